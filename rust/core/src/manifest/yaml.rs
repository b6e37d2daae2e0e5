//! YAML: saphyr-parser's event stream (a YAML 1.2 parser with positions) turned into
//! [`Event`]s, scalars resolved as ruamel.yaml resolves them, tags sorted into those built here
//! and those left to the ruamel path.

use saphyr_parser::{Event as YamlEvent, Parser, ScalarStyle, Span, StrInput, Tag};

use super::events::{Event, EventSource, Located, Pos, Support, SyntaxError, TopLevelScan, TopLevelType};
use super::scalar::{resolve_plain, Scalar};

const CORE_TAG_PREFIX: &str = "tag:yaml.org,2002:";
const BOM: char = '\u{feff}';

/// YAML text as [`Event`]s.
pub(crate) struct YamlEvents<'t> {
    text: &'t str,
    parser: Parser<'t, StrInput<'t>>,
    /// Added to saphyr's 1-based lines: the line of the text's start in its file, less one.
    line_offset: u32,
    offsets: CharOffsets<'t>,
    /// Character index where the last document ended (directives of the next one follow it).
    last_document_end: usize,
    last_document_end_pos: Pos,
    /// Taken off saphyr's character indices from the last directives on: saphyr 0.3.4 counts
    /// the bytes, not the characters, of a directive's name and parameters, so every index after
    /// a directive with non-ASCII text is too large by their difference.
    index_shift: usize,
    failed: Option<SyntaxError>,
    ended: Option<Pos>,
}

impl<'t> YamlEvents<'t> {
    /// A reader of `text`, whose first line is `first_line` of its file.
    pub fn new(text: &'t str, first_line: u32) -> Self {
        YamlEvents {
            text,
            parser: Parser::new_from_str(text),
            line_offset: first_line.saturating_sub(1),
            offsets: CharOffsets::new(text),
            last_document_end: 0,
            last_document_end_pos: Pos { line: first_line.max(1), col: 0, index: 0 },
            index_shift: 0,
            failed: None,
            ended: None,
        }
    }

    fn pos(&self, marker: saphyr_parser::Marker) -> Pos {
        Pos {
            line: (marker.line() as u32).saturating_add(self.line_offset),
            col: marker.col() as u32,
            index: marker.index().saturating_sub(self.index_shift),
        }
    }

    /// After directives, the character index of the `---` that starts the document saphyr put
    /// at `reported` (already corrected by the shift so far): its real one, found in the text
    /// from the last document's end. Adds the difference to the shift.
    fn correct_after_directives(&mut self, reported: usize) {
        let from = self.offsets.byte_of(self.last_document_end);
        let mut at = self.last_document_end;
        let mut directives = false;
        for line in yaml_lines(&self.text[from..]) {
            // byte order marks may begin a document's lines (YAML 1.2): nothing to the reader
            let body = line.trim_start_matches(BOM);
            let start = at + (line.len() - body.len()) / BOM.len_utf8();
            if body.starts_with("---") {
                if directives && reported > start {
                    self.index_shift += reported - start;
                }
                return;
            }
            if body.starts_with('%') {
                directives = true;
            } else if !(body.trim().is_empty() || body.trim_start().starts_with('#') || body.starts_with("...")) {
                return; // content before any `---`: an implicit document, no directives
            }
            at += line.chars().count();
        }
    }

    /// Where a block scalar (`|`, `>`) starts: its indicator. saphyr 0.3.4 puts the start of a
    /// top-level one at its first content line, or past its blank lines (an empty one): the
    /// header is then the first line before that which is not blank (`| # note`, `>-`,
    /// `--- |`). Left as reported when it is on the indicator or no header is found.
    fn block_scalar_start(&mut self, reported: Pos) -> Pos {
        let at = self.offsets.byte_of(reported.index);
        let text = self.text;
        if text[at..].starts_with(['|', '>']) {
            return reported;
        }
        // the header is looked for in text[..end], a line at a time from the end
        // lines end at \n, \r\n or a lone \r (as saphyr counts them)
        let line_start = text[..at].rfind(['\n', '\r']).map_or(0, |i| i + 1);
        // a BOM inside the text reads as space too
        let space = |c: char| c.is_whitespace() || c == '\u{feff}';
        let mut end = if text[line_start..at].trim_matches(space).is_empty() { line_start } else { at };
        loop {
            if end == 0 {
                return reported;
            }
            let before = &text[..end];
            let from = before.strip_suffix(['\n', '\r']).unwrap_or(before).rfind(['\n', '\r']).map_or(0, |i| i + 1);
            let line = &text[from..end];
            if line.trim_matches(space).is_empty() {
                end = from;
                continue;
            }
            let code =
                line.find(" #").or_else(|| line.find("\t#")).map_or(line, |i| &line[..i]).trim_end_matches(space);
            let word = code.rsplit(space).next().unwrap_or("");
            let header =
                word.starts_with(['|', '>']) && word[1..].bytes().all(|b| b == b'+' || b == b'-' || b.is_ascii_digit());
            if !header {
                return reported;
            }
            let indicator = from + code.len() - word.len();
            let skipped = &text[indicator..at];
            return Pos {
                line: reported.line.saturating_sub(
                    (skipped.matches('\n').count() + skipped.matches('\r').count() - skipped.matches("\r\n").count())
                        as u32,
                ),
                col: text[from..indicator].chars().count() as u32,
                index: reported.index.saturating_sub(skipped.chars().count()),
            };
        }
    }

    /// Whether the directives before a document (`%YAML 1.1`) change how it reads.
    fn directives_need_fallback(&mut self, document_start: usize) -> bool {
        let from = self.offsets.byte_of(self.last_document_end.min(document_start));
        let to = self.offsets.byte_of(document_start);
        yaml_lines(&self.text[from..to])
            .map(|line| line.trim_start_matches(BOM))
            .any(|line| line.starts_with("%YAML") && line.split_whitespace().nth(1) != Some("1.2"))
    }
}

/// The lines of `text`, each with its break: YAML's (and saphyr's) line breaks are `\r\n`, `\n`
/// and a lone `\r` (old Mac line ends), so a line may end at any of them.
fn yaml_lines(text: &str) -> impl Iterator<Item = &str> {
    let bytes = text.as_bytes();
    let mut start = 0;
    std::iter::from_fn(move || {
        if start >= bytes.len() {
            return None;
        }
        let from = start;
        let mut i = from;
        while i < bytes.len() && bytes[i] != b'\n' && bytes[i] != b'\r' {
            i += 1;
        }
        // past the break: \r\n is one
        start = match bytes.get(i) {
            Some(b'\r') if bytes.get(i + 1) == Some(&b'\n') => i + 2,
            Some(_) => i + 1,
            None => i,
        };
        Some(&text[from..start])
    })
}

/// Converts one saphyr event; None for events that have no counterpart.
fn convert<'t>(event: YamlEvent<'t>) -> Option<Event<'t>> {
    Some(match event {
        YamlEvent::Nothing | YamlEvent::StreamStart => return None,
        YamlEvent::StreamEnd => Event::StreamEnd,
        YamlEvent::DocumentStart(_) => Event::DocStart { region: Pos::default(), fallback: false },
        YamlEvent::DocumentEnd => Event::DocEnd,
        YamlEvent::Alias(id) => Event::Alias(id),
        YamlEvent::MappingStart(anchor, tag) => {
            Event::MapStart { anchor, support: collection_support(tag.as_deref(), "map") }
        }
        YamlEvent::MappingEnd => Event::MapEnd,
        YamlEvent::SequenceStart(anchor, tag) => {
            Event::SeqStart { anchor, support: collection_support(tag.as_deref(), "seq") }
        }
        YamlEvent::SequenceEnd => Event::SeqEnd,
        YamlEvent::Scalar(text, style, anchor, tag) => {
            let (support, is_string) = match tag.as_deref().map(classify) {
                None => (Support::Native, style != ScalarStyle::Plain),
                Some(TagClass::Core("str")) | Some(TagClass::Custom) => (Support::Native, true),
                Some(TagClass::Core(_)) | Some(TagClass::NonSpecific) => (Support::Fallback, true),
            };
            let merge = tag.is_none() && style == ScalarStyle::Plain && text == "<<";
            let value = if is_string { Scalar::Str(text) } else { resolve_plain(text) };
            Event::Scalar { value, anchor, support, merge }
        }
    })
}

enum TagClass<'a> {
    /// `!!name` (`tag:yaml.org,2002:name`).
    Core(&'a str),
    /// `!`: ruamel gives it a meaning of its own.
    NonSpecific,
    /// `!foo`, `!e!foo`, `!<tag:example.com:x>`: ruamel keeps the value untouched.
    Custom,
}

fn classify(tag: &Tag) -> TagClass<'_> {
    if tag.handle == CORE_TAG_PREFIX {
        TagClass::Core(&tag.suffix)
    } else if tag.handle.is_empty() && tag.suffix.starts_with(CORE_TAG_PREFIX) {
        TagClass::Core(&tag.suffix[CORE_TAG_PREFIX.len()..])
    } else if tag.handle.is_empty() && tag.suffix == "!" {
        TagClass::NonSpecific
    } else {
        TagClass::Custom
    }
}

fn collection_support(tag: Option<&Tag>, own: &str) -> Support {
    match tag.map(classify) {
        None | Some(TagClass::Custom) => Support::Native,
        Some(TagClass::Core(name)) if name == own => Support::Native,
        Some(_) => Support::Fallback,
    }
}

impl<'t> EventSource<'t> for YamlEvents<'t> {
    fn next_event(&mut self) -> Result<Located<'t>, SyntaxError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        loop {
            if let Some(end) = self.ended {
                return Ok((Event::StreamEnd, end, end));
            }
            let (event, span): (YamlEvent<'t>, Span) = match self.parser.next_event() {
                None => {
                    let chars = self.text.chars().count();
                    let end = Pos { index: chars, ..self.pos(saphyr_parser::Marker::new(chars, 1, 0)) };
                    self.ended = Some(end);
                    continue;
                }
                Some(Err(e)) => {
                    let err = SyntaxError {
                        line: (e.marker().line() as u32).saturating_add(self.line_offset).max(1),
                        message: format!("invalid YAML: {}", e.info()),
                    };
                    self.failed = Some(err.clone());
                    return Err(err);
                }
                Some(Ok(pair)) => pair,
            };
            let block = matches!(&event, YamlEvent::Scalar(_, ScalarStyle::Literal | ScalarStyle::Folded, _, _));
            let Some(mut converted) = convert(event) else { continue };
            if let Event::DocStart { .. } = converted {
                self.correct_after_directives(self.pos(span.start).index);
            }
            let (mut start, end) = (self.pos(span.start), self.pos(span.end));
            if block {
                start = self.block_scalar_start(start);
            }
            match &mut converted {
                Event::DocStart { region, fallback } => {
                    *fallback = self.directives_need_fallback(start.index);
                    // An implicit end of the previous document spans the next `---`.
                    let from = self.last_document_end.min(start.index);
                    *region = if from == start.index { start } else { self.last_document_end_pos };
                }
                Event::DocEnd => {
                    self.last_document_end = end.index;
                    self.last_document_end_pos = end;
                }
                Event::StreamEnd => self.ended = Some(end),
                _ => {}
            }
            return Ok((converted, start, end));
        }
    }

    fn byte_offset(&mut self, index: usize) -> usize {
        self.offsets.byte_of(index)
    }

    fn top_level_type_ahead(&self) -> TopLevelType {
        let mut parser = self.parser.clone();
        let mut scan = TopLevelScan::inside_value();
        while let Some(Ok((event, _))) = parser.next_event() {
            if let Some(event) = convert(event) {
                if !scan.feed(&event) {
                    return scan.found;
                }
            }
        }
        TopLevelType::default() // unreadable: the main pass reports why
    }
}

/// Character index to byte offset, walking from the last position asked for.
struct CharOffsets<'t> {
    text: &'t str,
    ascii: bool,
    char_at: usize,
    byte_at: usize,
}

impl<'t> CharOffsets<'t> {
    fn new(text: &'t str) -> Self {
        CharOffsets { text, ascii: text.is_ascii(), char_at: 0, byte_at: 0 }
    }

    fn byte_of(&mut self, char_index: usize) -> usize {
        if self.ascii {
            return char_index.min(self.text.len());
        }
        while self.char_at < char_index {
            let Some(c) = self.text[self.byte_at..].chars().next() else { break };
            self.byte_at += c.len_utf8();
            self.char_at += 1;
        }
        while self.char_at > char_index {
            let Some(c) = self.text[..self.byte_at].chars().next_back() else { break };
            self.byte_at -= c.len_utf8();
            self.char_at -= 1;
        }
        self.byte_at
    }
}

#[cfg(test)]
mod block_scalar_tests {
    use super::*;

    fn scalar_start(text: &str) -> (u32, u32) {
        let mut r = YamlEvents::new(text, 1);
        loop {
            let (event, start, _) = r.next_event().expect("valid YAML");
            match event {
                Event::Scalar { .. } => return (start.line, start.col),
                Event::StreamEnd => panic!("no scalar in {text:?}"),
                _ => {}
            }
        }
    }

    #[test]
    fn a_top_level_block_scalar_starts_at_its_indicator() {
        // saphyr reports these past their blank lines (the next document's `---`, line 6)
        assert_eq!(scalar_start("\n\n|\n\n\n---\n"), (3, 0));
        assert_eq!(scalar_start("\n\n|\n  a\n\n---\n"), (3, 0));
        assert_eq!(scalar_start("# é\n--- >- # note | x\n\n  b\n"), (2, 4));
        assert_eq!(scalar_start("\n\n\u{feff}|\n\n\n---\n"), (3, 1));
        assert_eq!(scalar_start("\n\n|\n\r\r\n\n---\n"), (3, 0));
        assert_eq!(scalar_start("a: |\n\nb: 1\n"), (1, 0)); // the key; the value is right already
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;

    fn events(text: &str) -> Vec<(Event<'_>, u32)> {
        let mut r = YamlEvents::new(text, 1);
        let mut out = Vec::new();
        loop {
            let (e, start, _) = r.next_event().unwrap();
            if e == Event::StreamEnd {
                return out;
            }
            out.push((e, start.line));
        }
    }

    #[test]
    fn lines_end_at_every_yaml_line_break() {
        let lines: Vec<&str> = yaml_lines("a\r\rb\r\nc\nd").collect();
        assert_eq!(lines, ["a\r", "\r", "b\r\n", "c\n", "d"]);
        assert_eq!(yaml_lines("").count(), 0);
    }

    fn scalar(e: &Event<'_>) -> (Scalar<'static>, Support, bool) {
        match e {
            Event::Scalar { value, support, merge, .. } => (value.clone().into_owned(), *support, *merge),
            other => panic!("not a scalar: {other:?}"),
        }
    }

    #[test]
    fn tags_and_styles() {
        let got = events("a: !foo 12\nb: !!str 12\nc: !!int '12'\nd: '12'\ne: 12\n<<: x\nf: ! 1\n");
        let values: Vec<_> =
            got.iter().filter(|(e, _)| matches!(e, Event::Scalar { .. })).map(|(e, _)| scalar(e)).collect();
        let str12 = Scalar::Str(Cow::Owned("12".into()));
        assert_eq!(values[1], (str12.clone(), Support::Native, false));
        assert_eq!(values[3], (str12.clone(), Support::Native, false));
        assert_eq!(values[5].1, Support::Fallback);
        assert_eq!(values[7], (str12, Support::Native, false));
        assert_eq!(values[9], (Scalar::Int(12), Support::Native, false));
        assert!(values[10].2, "a plain << is a merge key");
        assert_eq!(values[13].1, Support::Fallback, "the non-specific tag !");
    }

    #[test]
    fn directives_of_another_version_fall_back() {
        let got = events("a: 1\n---\nb: 2\n...\n%YAML 1.1\n---\nc: yes\n");
        let starts: Vec<_> = got
            .iter()
            .filter_map(|(e, _)| match e {
                Event::DocStart { fallback, .. } => Some(*fallback),
                _ => None,
            })
            .collect();
        assert_eq!(starts, [false, false, true]);
    }

    #[test]
    fn character_offsets_walk_both_ways() {
        let mut o = CharOffsets::new("aé€😀b");
        assert_eq!(o.byte_of(4), 10);
        assert_eq!(o.byte_of(2), 3);
        assert_eq!(o.byte_of(5), 11);
        assert_eq!(o.byte_of(99), 11);
    }
}
