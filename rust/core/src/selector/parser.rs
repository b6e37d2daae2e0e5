//! Recursive-descent parser with Calico's precedence: `!` binds tightest, then `&&`, then `||`.
//!
//! ```text
//! selector := [or] EOF            (empty = all())
//! or       := and ("||" and)*
//! and      := unary ("&&" unary)*
//! unary    := "!" unary | "(" or ")" | has(k) | all() | global() | k op value
//! ```

use std::collections::BTreeSet;

use super::ast::Node;
use super::error::{SelectorError, SelectorErrorKind};
use super::tokenizer::{Token, TokenKind};
use super::MAX_DEPTH;

pub struct Parser {
    tokens: Vec<Token>,
    at: usize,
    depth: usize,
}

impl Parser {
    pub fn new(tokens: Vec<Token>) -> Self {
        Parser { tokens, at: 0, depth: 0 }
    }

    fn peek(&self) -> &Token {
        // The tokenizer always ends the stream with Eof, and we never advance past it.
        &self.tokens[self.at.min(self.tokens.len() - 1)]
    }

    fn advance(&mut self) -> Token {
        let t = self.peek().clone();
        if t.kind != TokenKind::Eof {
            self.at += 1;
        }
        t
    }

    fn error(&self, pos: usize, msg: impl Into<String>) -> SelectorError {
        SelectorError::new(SelectorErrorKind::Syntax, pos, msg)
    }

    pub fn parse_selector(&mut self) -> Result<Node, SelectorError> {
        if self.peek().kind == TokenKind::Eof {
            return Ok(Node::All);
        }
        let node = self.parse_or()?;
        let t = self.peek();
        if t.kind != TokenKind::Eof {
            return Err(self.error(t.pos, format!("unexpected {}", describe(&t.kind))));
        }
        Ok(node)
    }

    fn parse_or(&mut self) -> Result<Node, SelectorError> {
        let mut terms = vec![self.parse_and()?];
        while self.peek().kind == TokenKind::Or {
            self.advance();
            terms.push(self.parse_and()?);
        }
        Ok(if terms.len() == 1 { terms.pop().unwrap() } else { Node::Or(terms) })
    }

    fn parse_and(&mut self) -> Result<Node, SelectorError> {
        let mut terms = vec![self.parse_unary()?];
        while self.peek().kind == TokenKind::And {
            self.advance();
            terms.push(self.parse_unary()?);
        }
        Ok(if terms.len() == 1 { terms.pop().unwrap() } else { Node::And(terms) })
    }

    fn enter(&mut self, pos: usize) -> Result<(), SelectorError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(SelectorError::new(
                SelectorErrorKind::TooLong,
                pos,
                format!("selector nests deeper than {MAX_DEPTH} levels"),
            ));
        }
        Ok(())
    }

    fn parse_unary(&mut self) -> Result<Node, SelectorError> {
        let t = self.advance();
        match t.kind {
            TokenKind::Not => {
                self.enter(t.pos)?;
                let inner = self.parse_unary()?;
                self.depth -= 1;
                Ok(Node::Not(Box::new(inner)))
            }
            TokenKind::LParen => {
                self.enter(t.pos)?;
                let inner = self.parse_or()?;
                self.depth -= 1;
                let close = self.advance();
                if close.kind != TokenKind::RParen {
                    return Err(self.error(
                        close.pos,
                        format!("expected ')' to close '(' at position {}, found {}", t.pos, describe(&close.kind)),
                    ));
                }
                Ok(inner)
            }
            TokenKind::Has(k) => Ok(Node::Has(k)),
            TokenKind::All => Ok(Node::All),
            TokenKind::Global => Ok(Node::Global),
            TokenKind::Label(k) => self.parse_comparison(k, t.pos),
            other => Err(self.error(
                t.pos,
                format!("expected a label, has(), all(), global(), '!' or '(', found {}", describe(&other)),
            )),
        }
    }

    fn parse_comparison(&mut self, key: String, key_pos: usize) -> Result<Node, SelectorError> {
        let op = self.advance();
        match op.kind {
            TokenKind::Eq | TokenKind::Ne | TokenKind::Contains | TokenKind::StartsWith | TokenKind::EndsWith => {
                let v = self.expect_literal()?;
                Ok(match op.kind {
                    TokenKind::Eq => Node::Eq(key, v),
                    TokenKind::Ne => Node::Ne(key, v),
                    TokenKind::Contains => Node::Contains(key, v),
                    TokenKind::StartsWith => Node::StartsWith(key, v),
                    _ => Node::EndsWith(key, v),
                })
            }
            TokenKind::In | TokenKind::NotIn => {
                let set = self.parse_set()?;
                Ok(if op.kind == TokenKind::In { Node::In(key, set) } else { Node::NotIn(key, set) })
            }
            other => Err(self.error(
                if other == TokenKind::Eof { key_pos } else { op.pos },
                format!("label '{key}' must be followed by an operator, found {}", describe(&other)),
            )),
        }
    }

    fn expect_literal(&mut self) -> Result<String, SelectorError> {
        let t = self.advance();
        match t.kind {
            TokenKind::StringLiteral(v) => Ok(v),
            other => Err(self.error(t.pos, format!("expected a quoted string, found {}", describe(&other)))),
        }
    }

    fn parse_set(&mut self) -> Result<BTreeSet<String>, SelectorError> {
        let open = self.advance();
        if open.kind != TokenKind::LBrace {
            return Err(self
                .error(open.pos, format!("expected a set literal {{\"a\", \"b\"}}, found {}", describe(&open.kind))));
        }
        let mut set = BTreeSet::new();
        if self.peek().kind == TokenKind::RBrace {
            self.advance();
            return Ok(set);
        }
        loop {
            set.insert(self.expect_literal()?);
            let t = self.advance();
            match t.kind {
                TokenKind::Comma => continue,
                TokenKind::RBrace => return Ok(set),
                other => {
                    return Err(self.error(t.pos, format!("expected ',' or '}}' in set, found {}", describe(&other))))
                }
            }
        }
    }
}

fn describe(kind: &TokenKind) -> String {
    match kind {
        TokenKind::Label(s) => format!("label '{s}'"),
        TokenKind::StringLiteral(s) => format!("string {s:?}"),
        TokenKind::Has(s) => format!("has({s})"),
        TokenKind::All => "all()".into(),
        TokenKind::Global => "global()".into(),
        TokenKind::LParen => "'('".into(),
        TokenKind::RParen => "')'".into(),
        TokenKind::LBrace => "'{'".into(),
        TokenKind::RBrace => "'}'".into(),
        TokenKind::Comma => "','".into(),
        TokenKind::Eq => "'=='".into(),
        TokenKind::Ne => "'!='".into(),
        TokenKind::In => "'in'".into(),
        TokenKind::NotIn => "'not in'".into(),
        TokenKind::Contains => "'contains'".into(),
        TokenKind::StartsWith => "'starts with'".into(),
        TokenKind::EndsWith => "'ends with'".into(),
        TokenKind::Not => "'!'".into(),
        TokenKind::And => "'&&'".into(),
        TokenKind::Or => "'||'".into(),
        TokenKind::Eof => "end of selector".into(),
    }
}
