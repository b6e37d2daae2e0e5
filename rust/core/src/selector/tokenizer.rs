//! Selector tokenizer.
//!
//! Context-sensitive like Calico's: a word right after a label must be an operator
//! (`contains contains "x"` is label, operator, literal), anywhere else a word is a label.

use super::error::{SelectorError, SelectorErrorKind};
use super::MAX_LABEL_LEN;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenKind {
    Label(String),
    StringLiteral(String),
    Has(String),
    All,
    Global,
    LParen,
    RParen,
    LBrace,
    RBrace,
    Comma,
    Eq,
    Ne,
    In,
    NotIn,
    Contains,
    StartsWith,
    EndsWith,
    Not,
    And,
    Or,
    Eof,
}

impl TokenKind {
    /// Calico's token kind name, used by tests and by `pyclassify selector --tokens`.
    pub fn calico_name(&self) -> &'static str {
        match self {
            TokenKind::Label(_) => "TokLabel",
            TokenKind::StringLiteral(_) => "TokStringLiteral",
            TokenKind::Has(_) => "TokHas",
            TokenKind::All => "TokAll",
            TokenKind::Global => "TokGlobal",
            TokenKind::LParen => "TokLParen",
            TokenKind::RParen => "TokRParen",
            TokenKind::LBrace => "TokLBrace",
            TokenKind::RBrace => "TokRBrace",
            TokenKind::Comma => "TokComma",
            TokenKind::Eq => "TokEq",
            TokenKind::Ne => "TokNe",
            TokenKind::In => "TokIn",
            TokenKind::NotIn => "TokNotIn",
            TokenKind::Contains => "TokContains",
            TokenKind::StartsWith => "TokStartsWith",
            TokenKind::EndsWith => "TokEndsWith",
            TokenKind::Not => "TokNot",
            TokenKind::And => "TokAnd",
            TokenKind::Or => "TokOr",
            TokenKind::Eof => "TokEOF",
        }
    }

    /// The text a token carries (label name or literal value), if any.
    pub fn value(&self) -> Option<&str> {
        match self {
            TokenKind::Label(s) | TokenKind::StringLiteral(s) | TokenKind::Has(s) => Some(s),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub kind: TokenKind,
    /// Byte offset of the token's first character.
    pub pos: usize,
}

pub(crate) fn is_label_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'/' | b'-')
}

struct Lexer<'a> {
    src: &'a [u8],
    text: &'a str,
    pos: usize,
}

impl<'a> Lexer<'a> {
    fn skip_ws(&mut self) {
        while self.pos < self.src.len() && self.src[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
    }

    fn rest(&self) -> &'a [u8] {
        &self.src[self.pos..]
    }

    fn err(&self, kind: SelectorErrorKind, pos: usize, msg: impl Into<String>) -> SelectorError {
        SelectorError::new(kind, pos, msg)
    }

    /// Length of a run of label characters starting at `at`.
    fn label_run(&self, at: usize) -> usize {
        self.src[at..].iter().take_while(|b| is_label_char(**b)).count()
    }

    /// Matches `word`, optional whitespace, `word2` (e.g. `starts with`, `not in`) and
    /// returns the length consumed, requiring a word boundary after it.
    fn keyword_pair(&self, first: &str, second: &str) -> Option<usize> {
        let r = self.rest();
        if !r.starts_with(first.as_bytes()) {
            return None;
        }
        let mut i = first.len();
        while i < r.len() && r[i].is_ascii_whitespace() {
            i += 1;
        }
        if !r[i..].starts_with(second.as_bytes()) {
            return None;
        }
        i += second.len();
        self.word_end(i)
    }

    fn keyword(&self, word: &str) -> Option<usize> {
        if self.rest().starts_with(word.as_bytes()) {
            self.word_end(word.len())
        } else {
            None
        }
    }

    /// `Some(len)` if the keyword of length `len` is not followed by a label character.
    fn word_end(&self, len: usize) -> Option<usize> {
        match self.rest().get(len) {
            Some(b) if is_label_char(*b) => None,
            _ => Some(len),
        }
    }

    /// `name(` optional spaces `)` for all() and global().
    fn empty_call(&self, name: &str) -> Option<usize> {
        let r = self.rest();
        if !r.starts_with(name.as_bytes()) {
            return None;
        }
        let mut i = name.len();
        if r.get(i) != Some(&b'(') {
            return None;
        }
        i += 1;
        while i < r.len() && r[i].is_ascii_whitespace() {
            i += 1;
        }
        if r.get(i) == Some(&b')') {
            Some(i + 1)
        } else {
            None
        }
    }

    /// `has(` spaces label spaces `)`; returns (consumed, label).
    fn has_call(&self) -> Result<Option<(usize, String)>, SelectorError> {
        let r = self.rest();
        if !r.starts_with(b"has(") {
            return Ok(None);
        }
        let start = self.pos;
        let mut i = 4;
        while i < r.len() && r[i].is_ascii_whitespace() {
            i += 1;
        }
        let n = self.label_run(self.pos + i);
        if n == 0 {
            return Err(self.err(SelectorErrorKind::Syntax, self.pos + i, "has() needs a label name"));
        }
        if n > MAX_LABEL_LEN {
            return Err(self.err(
                SelectorErrorKind::TooLong,
                self.pos + i,
                format!("label longer than {MAX_LABEL_LEN} characters"),
            ));
        }
        let label = self.text[self.pos + i..self.pos + i + n].to_string();
        i += n;
        while i < r.len() && r[i].is_ascii_whitespace() {
            i += 1;
        }
        if r.get(i) != Some(&b')') {
            return Err(self.err(SelectorErrorKind::Syntax, start, "unterminated has(: expected ')'"));
        }
        Ok(Some((i + 1, label)))
    }

    fn operator(&self) -> Option<(TokenKind, usize)> {
        let r = self.rest();
        if r.starts_with(b"==") {
            return Some((TokenKind::Eq, 2));
        }
        if r.starts_with(b"!=") {
            return Some((TokenKind::Ne, 2));
        }
        if let Some(n) = self.keyword_pair("not", "in") {
            return Some((TokenKind::NotIn, n));
        }
        if let Some(n) = self.keyword("in") {
            return Some((TokenKind::In, n));
        }
        if let Some(n) = self.keyword("contains") {
            return Some((TokenKind::Contains, n));
        }
        if let Some(n) = self.keyword_pair("starts", "with") {
            return Some((TokenKind::StartsWith, n));
        }
        if let Some(n) = self.keyword_pair("ends", "with") {
            return Some((TokenKind::EndsWith, n));
        }
        None
    }
}

/// Splits a selector into tokens, ending with `Eof`.
pub fn tokenize(text: &str) -> Result<Vec<Token>, SelectorError> {
    let mut lx = Lexer { src: text.as_bytes(), text, pos: 0 };
    let mut out: Vec<Token> = Vec::new();
    loop {
        lx.skip_ws();
        let pos = lx.pos;
        let Some(&c) = lx.src.get(pos) else {
            out.push(Token { kind: TokenKind::Eof, pos });
            return Ok(out);
        };
        let after_label = matches!(out.last(), Some(Token { kind: TokenKind::Label(_), .. }));
        if after_label {
            if let Some((kind, n)) = lx.operator() {
                lx.pos += n;
                out.push(Token { kind, pos });
                continue;
            }
            if is_label_char(c) {
                return Err(lx.err(
                    SelectorErrorKind::Syntax,
                    pos,
                    "expected an operator (==, !=, in, not in, contains, starts with, ends with) after label",
                ));
            }
        }
        let (kind, n) = match c {
            b'(' => (TokenKind::LParen, 1),
            b')' => (TokenKind::RParen, 1),
            b'{' => (TokenKind::LBrace, 1),
            b'}' => (TokenKind::RBrace, 1),
            b',' => (TokenKind::Comma, 1),
            b'"' | b'\'' => {
                let Some(len) = lx.src[pos + 1..].iter().position(|b| *b == c) else {
                    return Err(lx.err(SelectorErrorKind::Syntax, pos, "unterminated string literal"));
                };
                let value = text[pos + 1..pos + 1 + len].to_string();
                (TokenKind::StringLiteral(value), len + 2)
            }
            b'=' => {
                if lx.rest().starts_with(b"==") {
                    (TokenKind::Eq, 2)
                } else {
                    return Err(lx.err(SelectorErrorKind::Syntax, pos, "expected '==', found '='"));
                }
            }
            b'!' => {
                if lx.rest().starts_with(b"!=") {
                    (TokenKind::Ne, 2)
                } else {
                    (TokenKind::Not, 1)
                }
            }
            b'&' => {
                if lx.rest().starts_with(b"&&") {
                    (TokenKind::And, 2)
                } else {
                    return Err(lx.err(SelectorErrorKind::Syntax, pos, "expected '&&', found '&'"));
                }
            }
            b'|' => {
                if lx.rest().starts_with(b"||") {
                    (TokenKind::Or, 2)
                } else {
                    return Err(lx.err(SelectorErrorKind::Syntax, pos, "expected '||', found '|'"));
                }
            }
            _ if is_label_char(c) => {
                if let Some((n, label)) = lx.has_call()? {
                    (TokenKind::Has(label), n)
                } else if let Some(n) = lx.empty_call("all") {
                    (TokenKind::All, n)
                } else if let Some(n) = lx.empty_call("global") {
                    (TokenKind::Global, n)
                } else if lx.rest().starts_with(b"all(") || lx.rest().starts_with(b"global(") {
                    return Err(lx.err(SelectorErrorKind::Syntax, pos, "unterminated call: expected ')'"));
                } else {
                    let n = lx.label_run(pos);
                    if n > MAX_LABEL_LEN {
                        return Err(lx.err(
                            SelectorErrorKind::TooLong,
                            pos,
                            format!("label longer than {MAX_LABEL_LEN} characters"),
                        ));
                    }
                    (TokenKind::Label(text[pos..pos + n].to_string()), n)
                }
            }
            _ => {
                let ch = text[pos..].chars().next().unwrap_or('?');
                return Err(lx.err(SelectorErrorKind::Syntax, pos, format!("unexpected character {ch:?}")));
            }
        };
        lx.pos += n;
        out.push(Token { kind, pos });
    }
}
