//! JSON: a hand-written reader that counts lines as it goes (JSON's only line breaks are in
//! whitespace, so that costs nothing). Numbers and strings are what Python's `json` makes of
//! them: an integer without fraction or exponent is an int (of any size), anything else a float;
//! a lone UTF-16 surrogate escape becomes U+FFFD, as Go (and so Kubernetes) decodes it.

use std::borrow::Cow;

use super::events::{Event, EventSource, Located, Pos, Support, SyntaxError, TopLevelScan, TopLevelType};
use super::scalar::Scalar;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Start,
    Root,
    End,
    Done,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Right after `{` or `[`: a key/value or the closing bracket.
    FirstOrEnd,
    /// After `,`.
    Next,
    /// After a key, before `:` (objects only).
    Colon,
    /// After `:` (objects only).
    Value,
    /// After a member or element.
    CommaOrEnd,
}

#[derive(Clone, Copy)]
struct Open {
    object: bool,
    expect: Expect,
}

/// JSON text as [`Event`]s: one document, `DocStart` .. `DocEnd`.
pub(crate) struct JsonEvents<'t> {
    text: &'t str,
    bytes: &'t [u8],
    at: usize,
    line: u32,
    line_start: usize,
    phase: Phase,
    stack: Vec<Open>,
    ahead: TopLevelType,
}

impl<'t> JsonEvents<'t> {
    /// A reader of `text`, whose first line is `first_line` of its file.
    pub fn new(text: &'t str, first_line: u32) -> Self {
        JsonEvents {
            text,
            bytes: text.as_bytes(),
            at: 0,
            line: first_line,
            line_start: 0,
            phase: Phase::Start,
            stack: Vec::new(),
            ahead: TopLevelType::default(),
        }
    }

    /// Reads all of `text` without building anything: whether it is one valid JSON value, and
    /// the `kind`/`apiVersion` of its top-level object.
    pub fn skim(text: &'t str) -> Result<Self, SyntaxError> {
        let mut scan_reader = JsonEvents::new(text, 1);
        let mut scan = TopLevelScan::new();
        // None before the root node; then whether the top-level mapping is still being read.
        let mut scanning: Option<bool> = None;
        loop {
            let (event, _, _) = scan_reader.next_event()?;
            match (&event, scanning) {
                (Event::StreamEnd, _) => break,
                (Event::DocStart { .. }, _) => {}
                (_, None) => scanning = Some(matches!(event, Event::MapStart { .. }) && scan.feed(&event)),
                (_, Some(true)) => scanning = Some(scan.feed(&event)),
                (_, Some(false)) => {}
            }
        }
        let mut reader = JsonEvents::new(text, 1);
        reader.ahead = scan.found;
        Ok(reader)
    }

    fn pos(&self) -> Pos {
        Pos { line: self.line, col: (self.at - self.line_start) as u32, index: self.at }
    }

    fn error(&self, message: &str) -> SyntaxError {
        SyntaxError { line: self.line, message: format!("invalid JSON: {message}") }
    }

    fn skip_whitespace(&mut self) {
        while let Some(&c) = self.bytes.get(self.at) {
            match c {
                b' ' | b'\t' | b'\r' => self.at += 1,
                b'\n' => {
                    self.at += 1;
                    self.line += 1;
                    self.line_start = self.at;
                }
                _ => break,
            }
        }
    }

    /// A value starting at the current byte (not whitespace).
    fn value(&mut self) -> Result<Event<'t>, SyntaxError> {
        let Some(&c) = self.bytes.get(self.at) else { return Err(self.error("Expecting value")) };
        let scalar = match c {
            b'{' => {
                self.at += 1;
                self.stack.push(Open { object: true, expect: Expect::FirstOrEnd });
                return Ok(Event::MapStart { anchor: 0, support: Support::Native });
            }
            b'[' => {
                self.at += 1;
                self.stack.push(Open { object: false, expect: Expect::FirstOrEnd });
                return Ok(Event::SeqStart { anchor: 0, support: Support::Native });
            }
            b'"' => Scalar::Str(self.string()?),
            b'-' | b'0'..=b'9' => self.number()?,
            b't' => self.literal("true", Scalar::Bool(true))?,
            b'f' => self.literal("false", Scalar::Bool(false))?,
            b'n' => self.literal("null", Scalar::Null)?,
            _ => return Err(self.error("Expecting value")),
        };
        self.after_value();
        Ok(Event::Scalar { value: scalar, anchor: 0, support: Support::Native, merge: false })
    }

    fn after_value(&mut self) {
        match self.stack.last_mut() {
            Some(open) => open.expect = Expect::CommaOrEnd,
            None => self.phase = Phase::End,
        }
    }

    fn literal(&mut self, word: &str, value: Scalar<'t>) -> Result<Scalar<'t>, SyntaxError> {
        if self.bytes[self.at..].starts_with(word.as_bytes()) {
            self.at += word.len();
            Ok(value)
        } else {
            Err(self.error("Expecting value"))
        }
    }

    fn number(&mut self) -> Result<Scalar<'t>, SyntaxError> {
        let start = self.at;
        let b = self.bytes;
        let mut i = start;
        let negative = b[i] == b'-';
        if negative {
            i += 1;
        }
        match b.get(i) {
            Some(b'0') => i += 1,
            Some(b'1'..=b'9') => {
                while b.get(i).is_some_and(u8::is_ascii_digit) {
                    i += 1;
                }
            }
            _ => return Err(self.error("Expecting value")),
        }
        let int_end = i;
        let mut is_float = false;
        if b.get(i) == Some(&b'.') && b.get(i + 1).is_some_and(u8::is_ascii_digit) {
            is_float = true;
            i += 1;
            while b.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
        }
        if matches!(b.get(i), Some(b'e' | b'E')) {
            let mut j = i + 1;
            if matches!(b.get(j), Some(b'+' | b'-')) {
                j += 1;
            }
            if b.get(j).is_some_and(u8::is_ascii_digit) {
                is_float = true;
                while b.get(j).is_some_and(u8::is_ascii_digit) {
                    j += 1;
                }
                i = j;
            }
        }
        self.at = i;
        let text = &self.text[start..i];
        if is_float {
            return text.parse::<f64>().map(Scalar::Float).map_err(|_| self.error("Expecting value"));
        }
        Ok(match text.parse::<i64>() {
            Ok(n) => Scalar::Int(n),
            Err(_) => Scalar::BigInt {
                negative,
                radix: 10,
                digits: self.text[start + usize::from(negative)..int_end].to_string(),
            },
        })
    }

    /// A string starting at its opening quote.
    fn string(&mut self) -> Result<Cow<'t, str>, SyntaxError> {
        let start = self.at + 1;
        let b = self.bytes;
        let mut i = start;
        while let Some(&c) = b.get(i) {
            match c {
                b'"' => {
                    self.at = i + 1;
                    return Ok(Cow::Borrowed(&self.text[start..i]));
                }
                b'\\' => break,
                0..=0x1f => {
                    self.at = i;
                    return Err(self.error("Invalid control character in string"));
                }
                _ => i += 1,
            }
        }
        if i >= b.len() {
            return Err(self.error("Unterminated string"));
        }
        // Escapes: decode into a new string.
        let mut out = String::with_capacity(i - start + 16);
        out.push_str(&self.text[start..i]);
        loop {
            let Some(&c) = b.get(i) else { return Err(self.error("Unterminated string")) };
            match c {
                b'"' => {
                    self.at = i + 1;
                    return Ok(Cow::Owned(out));
                }
                b'\\' => {
                    let Some(&e) = b.get(i + 1) else { return Err(self.error("Unterminated string")) };
                    i += 2;
                    match e {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let high = self.hex4(i)?;
                            i += 4;
                            let code = if (0xD800..0xDC00).contains(&high)
                                && b.get(i) == Some(&b'\\')
                                && b.get(i + 1) == Some(&b'u')
                            {
                                match self.hex4(i + 2)? {
                                    low @ 0xDC00..=0xDFFF => {
                                        i += 6;
                                        0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)
                                    }
                                    _ => 0xFFFD,
                                }
                            } else {
                                high
                            };
                            out.push(char::from_u32(code).unwrap_or('\u{FFFD}'));
                        }
                        _ => {
                            self.at = i - 2;
                            return Err(self.error("Invalid \\escape"));
                        }
                    }
                }
                0..=0x1f => {
                    self.at = i;
                    return Err(self.error("Invalid control character in string"));
                }
                _ => {
                    // Copy the run up to the next quote, backslash or control character.
                    let run =
                        b[i..].iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20).map_or(b.len(), |p| i + p);
                    out.push_str(&self.text[i..run]);
                    i = run;
                }
            }
        }
    }

    fn hex4(&self, at: usize) -> Result<u32, SyntaxError> {
        self.bytes
            .get(at..at + 4)
            .and_then(|h| std::str::from_utf8(h).ok())
            .filter(|h| h.bytes().all(|c| c.is_ascii_hexdigit()))
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .ok_or_else(|| self.error("Invalid \\uXXXX escape"))
    }

    /// The next event, and where its token starts.
    fn step(&mut self) -> Result<(Event<'t>, Pos), SyntaxError> {
        loop {
            self.skip_whitespace();
            let start = self.pos();
            let Some(open) = self.stack.last().copied() else {
                return Ok((self.value()?, start));
            };
            let c = self.bytes.get(self.at).copied();
            let close = if open.object { b'}' } else { b']' };
            match open.expect {
                Expect::FirstOrEnd | Expect::CommaOrEnd if c == Some(close) => {
                    self.at += 1;
                    self.stack.pop();
                    self.after_value();
                    return Ok((if open.object { Event::MapEnd } else { Event::SeqEnd }, start));
                }
                Expect::CommaOrEnd => {
                    if c != Some(b',') {
                        return Err(self.error("Expecting ',' delimiter"));
                    }
                    self.at += 1;
                    self.set_expect(Expect::Next);
                }
                Expect::FirstOrEnd | Expect::Next if open.object => {
                    if c != Some(b'"') {
                        return Err(self.error("Expecting property name enclosed in double quotes"));
                    }
                    let key = self.string()?;
                    self.set_expect(Expect::Colon);
                    let key =
                        Event::Scalar { value: Scalar::Str(key), anchor: 0, support: Support::Native, merge: false };
                    return Ok((key, start));
                }
                Expect::Colon => {
                    if c != Some(b':') {
                        return Err(self.error("Expecting ':' delimiter"));
                    }
                    self.at += 1;
                    self.set_expect(Expect::Value);
                }
                Expect::FirstOrEnd | Expect::Next | Expect::Value => return Ok((self.value()?, start)),
            }
        }
    }

    fn set_expect(&mut self, expect: Expect) {
        if let Some(open) = self.stack.last_mut() {
            open.expect = expect;
        }
    }
}

impl<'t> EventSource<'t> for JsonEvents<'t> {
    fn next_event(&mut self) -> Result<Located<'t>, SyntaxError> {
        match self.phase {
            Phase::Start => {
                let region = self.pos();
                self.skip_whitespace();
                self.phase = Phase::Root;
                let at = self.pos();
                Ok((Event::DocStart { region, fallback: false }, at, at))
            }
            Phase::Root => {
                let (event, start) = self.step()?;
                Ok((event, start, self.pos()))
            }
            Phase::End => {
                let end = self.pos();
                self.skip_whitespace();
                if self.at < self.bytes.len() {
                    return Err(self.error("Extra data"));
                }
                self.phase = Phase::Done;
                Ok((Event::DocEnd, end, self.pos()))
            }
            Phase::Done => {
                let at = self.pos();
                Ok((Event::StreamEnd, at, at))
            }
        }
    }

    fn byte_offset(&mut self, index: usize) -> usize {
        index
    }

    fn top_level_type_ahead(&self) -> TopLevelType {
        self.ahead.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(text: &str) -> Result<Vec<(Event<'_>, u32)>, SyntaxError> {
        let mut r = JsonEvents::new(text, 1);
        let mut out = Vec::new();
        loop {
            let (e, start, _) = r.next_event()?;
            if e == Event::StreamEnd {
                return Ok(out);
            }
            out.push((e, start.line));
        }
    }

    fn s(v: &str) -> Event<'_> {
        Event::Scalar { value: Scalar::Str(Cow::Borrowed(v)), anchor: 0, support: Support::Native, merge: false }
    }

    #[test]
    fn events_with_lines() {
        let got = events("{\n\t\"a\": [1, -2.5e1, \"x\\ty\"],\n \"b\": null}\n").unwrap();
        let kinds: Vec<_> = got.iter().map(|(e, l)| (e.clone(), *l)).collect();
        assert!(matches!(kinds[0].0, Event::DocStart { fallback: false, .. }));
        assert_eq!(kinds[1].0, Event::MapStart { anchor: 0, support: Support::Native });
        assert_eq!(kinds[2], (s("a"), 2));
        assert_eq!(
            kinds[5].0,
            Event::Scalar { value: Scalar::Float(-25.0), anchor: 0, support: Support::Native, merge: false }
        );
        assert_eq!(
            kinds[6].0,
            Event::Scalar {
                value: Scalar::Str(Cow::Owned("x\ty".into())),
                anchor: 0,
                support: Support::Native,
                merge: false
            }
        );
        assert_eq!(kinds[8], (s("b"), 3));
    }

    #[test]
    fn errors_name_their_line() {
        for (text, line, message) in [
            ("{\n  \"a\": 1,,\n}", 2, "Expecting property name enclosed in double quotes"),
            ("[1 2]", 1, "Expecting ',' delimiter"),
            ("{\"a\" 1}", 1, "Expecting ':' delimiter"),
            ("[1]\n\n x", 3, "Extra data"),
            ("\"abc", 1, "Unterminated string"),
            ("[01]", 1, "Expecting ',' delimiter"),
            ("[-]", 1, "Expecting value"),
            ("", 1, "Expecting value"),
        ] {
            let err = events(text).unwrap_err();
            assert_eq!(
                (err.line, err.message.as_str()),
                (line, format!("invalid JSON: {message}").as_str()),
                "{text:?}"
            );
        }
    }

    #[test]
    fn big_numbers_and_surrogates() {
        let got = events("[123456789012345678901234567890, -0, \"\\ud83d\\ude00\\ud800x\"]").unwrap();
        assert!(matches!(&got[2].0, Event::Scalar { value: Scalar::BigInt { negative: false, radix: 10, digits }, .. }
            if digits == "123456789012345678901234567890"));
        assert!(matches!(&got[3].0, Event::Scalar { value: Scalar::Int(0), .. }));
        assert!(matches!(&got[4].0, Event::Scalar { value: Scalar::Str(s), .. } if s == "\u{1F600}\u{FFFD}x"));
    }

    #[test]
    fn skim_finds_the_top_level_type_after_items() {
        let r =
            JsonEvents::skim("{\"items\": [{\"kind\": \"Pod\"}], \"kind\": \"List\", \"apiVersion\": \"v1\"}").unwrap();
        let t = r.top_level_type_ahead();
        assert_eq!(t.kind, Some(Scalar::Str(Cow::Owned("List".into()))));
        assert_eq!(t.api_version, Some(Scalar::Str(Cow::Owned("v1".into()))));
        assert!(JsonEvents::skim("{\"a\": 1} x").is_err());
    }
}
