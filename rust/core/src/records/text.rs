//! Line-oriented formats: chunks cut into lines, each handed to a line parser with its number.

use super::{NameTable, Problems, Reader, RecordBatch};

/// One line-oriented format: reads one line (without its end) into `out`.
pub trait LineParser {
    fn line(&mut self, line: &[u8], number: u64, out: &mut RecordBatch, names: &mut NameTable, problems: &mut Problems);
}

/// The longest line kept while waiting for its end: longer is a problem (`line_too_long`), and
/// the line is skipped up to its end, so memory stays bounded whatever the input.
pub const MAX_LINE: usize = 1 << 20;

/// A [`Reader`] of a line-oriented format.
pub struct Lines<P> {
    parser: P,
    carry: Vec<u8>,
    number: u64,
    skipping: bool,
}

impl<P: LineParser> Lines<P> {
    pub fn new(parser: P) -> Self {
        Lines { parser, carry: Vec::new(), number: 0, skipping: false }
    }

    fn one(&mut self, line: &[u8], out: &mut RecordBatch, names: &mut NameTable, problems: &mut Problems) {
        self.number += 1;
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        self.parser.line(line, self.number, out, names, problems);
    }
}

impl<P: LineParser> Reader for Lines<P> {
    fn feed(
        &mut self,
        chunk: &[u8],
        last: bool,
        out: &mut RecordBatch,
        names: &mut NameTable,
        problems: &mut Problems,
    ) {
        let mut rest = chunk;
        while let Some(end) = memchr_newline(rest) {
            let (line, after) = (&rest[..end], &rest[end + 1..]);
            if self.skipping {
                self.skipping = false;
                self.number += 1;
            } else if self.carry.is_empty() {
                self.one(line, out, names, problems);
            } else {
                let mut whole = std::mem::take(&mut self.carry);
                whole.extend_from_slice(line);
                self.one(&whole, out, names, problems);
                whole.clear();
                self.carry = whole;
            }
            rest = after;
        }
        if !self.skipping && !rest.is_empty() {
            if self.carry.len() + rest.len() > MAX_LINE {
                problems.add("line_too_long", self.number + 1, || format!("longer than {MAX_LINE} bytes: skipped"));
                self.carry.clear();
                self.skipping = true;
            } else {
                self.carry.extend_from_slice(rest);
            }
        }
        if last {
            if self.skipping {
                self.number += 1;
            } else if !self.carry.is_empty() {
                let whole = std::mem::take(&mut self.carry);
                self.one(&whole, out, names, problems);
            }
            self.skipping = false;
        }
    }
}

fn memchr_newline(b: &[u8]) -> Option<usize> {
    memchr::memchr(b'\n', b)
}

/// The text of a line for a problem's detail: at most 80 characters, lossy UTF-8.
pub fn excerpt(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(&line[..line.len().min(80)]).into_owned();
    if line.len() > 80 {
        format!("{text}...")
    } else {
        text
    }
}
