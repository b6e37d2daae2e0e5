//! Bounded reassembly of the request heads of one connection's client-to-server bytes.
//!
//! The caller gives TCP payloads in sequence order (it drops retransmissions and out-of-order
//! segments: this only appends). Only a head in progress is held, at most `max_head` bytes;
//! bodies are skipped as they go by, counted, never stored: `Content-Length` bytes, or a
//! `chunked` body followed chunk by chunk to its last chunk and trailer section. Empty lines
//! before a request line are skipped (RFC 9112 §2.2). A request line is checked as soon as its
//! bytes arrive, so a stream that is not HTTP fails at its first segment rather than after
//! `max_head` bytes.
//!
//! Once [`RequestStream::push`] fails the stream stays failed: every later push returns the same
//! error and nothing is held.
#![deny(clippy::indexing_slicing)]

use super::request::{parse_head_framed, scan_request_line, strip_cr, Framing};
use super::{HttpError, Request};

/// A usual bound for a head (what many servers accept by default).
pub const DEFAULT_MAX_HEAD: usize = 8192;
/// A usual bound for the segments one head may spread over.
pub const DEFAULT_MAX_SEGMENTS: usize = 64;

/// Where a chunked body is (RFC 9112 §7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// In a chunk-size line's hex digits (`digits` false: none yet).
    Size { value: u64, digits: bool },
    /// After the digits: whitespace before `;`, or an extension, up to the line's end.
    Ext { value: u64 },
    /// After the CR of a chunk-size line.
    SizeLf { value: u64 },
    /// In a chunk's data.
    Data { remaining: u64 },
    /// After a chunk's data: its CRLF.
    DataCr,
    /// After the CR following a chunk's data.
    DataLf,
    /// In the trailer section after the last chunk (`line_start`: at the start of a line).
    Trailer { line_start: bool },
    /// After a CR in the trailer section (`empty`: the line was empty, so the body ends at LF).
    TrailerLf { empty: bool },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading a head (held in `buf`).
    Head,
    /// Skipping this many more bytes of a `Content-Length` body.
    Body { remaining: u64 },
    /// Following a chunked body; `line` counts the bytes of the current chunk-size line, or of
    /// the trailer section, against `max_head`.
    Chunked { chunk: Chunk, line: usize },
    /// The stream could not be judged.
    Failed(HttpError),
}

/// Bounded reassembly of one connection's client-to-server bytes into request heads.
#[derive(Debug, Clone)]
pub struct RequestStream {
    max_head: usize,
    max_segments: usize,
    state: State,
    /// The head in progress (at most `max_head` bytes), or a lone CR between requests.
    buf: Vec<u8>,
    /// Where the search for the head's end resumes in `buf`.
    scan_from: usize,
    /// The head's request line was complete and valid (no need to check it again).
    line_checked: bool,
    /// Segments that brought bytes to the head in progress (or to the empty lines before it).
    head_segments: usize,
}

impl RequestStream {
    /// A stream whose heads may be at most `max_head` bytes (request line, fields and the empty
    /// line ending them; e.g. [`DEFAULT_MAX_HEAD`]) spread over at most `max_segments` segments
    /// (e.g. [`DEFAULT_MAX_SEGMENTS`]). Chunk-size lines and a chunked body's trailer section are
    /// bounded by `max_head` too.
    pub fn new(max_head: usize, max_segments: usize) -> Self {
        RequestStream {
            max_head,
            max_segments,
            state: State::Head,
            buf: Vec::new(),
            scan_from: 0,
            line_checked: false,
            head_segments: 0,
        }
    }

    /// Feed one segment's payload; returns every request head now complete, in order
    /// (pipelining: several per segment; a request's body is skipped using Content-Length;
    /// `Transfer-Encoding: chunked` bodies are followed to their last chunk; a request without a
    /// body ends at its head). Err once the stream cannot be judged (a head over max_head, more
    /// than max_segments segments before a head completes, not HTTP, any [`HttpError`]): the
    /// caller denies and counts. The error is final: later pushes return it again. Empty
    /// segments change nothing and are not counted.
    pub fn push(&mut self, segment: &[u8]) -> Result<Vec<Request>, HttpError> {
        if let State::Failed(error) = self.state {
            return Err(error);
        }
        let mut out = Vec::new();
        match self.feed(segment, &mut out) {
            Ok(()) => Ok(out),
            Err(error) => {
                self.state = State::Failed(error);
                self.buf = Vec::new();
                self.scan_from = 0;
                Err(error)
            }
        }
    }

    /// Bytes held waiting for the rest of a head (a body is counted, never held: 0 while one is
    /// being skipped).
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    fn feed(&mut self, mut input: &[u8], out: &mut Vec<Request>) -> Result<(), HttpError> {
        // Whether this segment was counted for the head in progress.
        let mut counted = false;
        while !input.is_empty() {
            match self.state {
                State::Failed(error) => return Err(error),
                State::Body { remaining } => {
                    let take = remaining.min(input.len() as u64);
                    input = input.get(take as usize..).unwrap_or_default();
                    let remaining = remaining.saturating_sub(take);
                    self.state = if remaining == 0 { State::Head } else { State::Body { remaining } };
                }
                State::Chunked { chunk, line } => {
                    input = self.chunked(chunk, line, input)?;
                }
                State::Head => {
                    if !counted {
                        counted = true;
                        self.head_segments = self.head_segments.saturating_add(1);
                        if self.head_segments > self.max_segments {
                            return Err(HttpError::TooManySegments);
                        }
                    }
                    input = self.skip_empty_lines(input);
                    if input.is_empty() {
                        break;
                    }
                    let old = self.buf.len();
                    let take = self.max_head.saturating_sub(old).min(input.len());
                    self.buf.extend_from_slice(input.get(..take).unwrap_or_default());
                    match self.find_head_end() {
                        Some(end) => {
                            // The end lies in the new bytes (the old ones held none).
                            input = input.get(end.saturating_sub(old)..).unwrap_or_default();
                            let head = self.buf.get(..end).unwrap_or_default();
                            let (request, framing) = parse_head_framed(head)?;
                            out.push(request);
                            self.buf.clear();
                            self.scan_from = 0;
                            self.line_checked = false;
                            self.head_segments = 0;
                            counted = false;
                            self.state = match framing {
                                Framing::None | Framing::Length(0) => State::Head,
                                Framing::Length(remaining) => State::Body { remaining },
                                Framing::Chunked => {
                                    State::Chunked { chunk: Chunk::Size { value: 0, digits: false }, line: 0 }
                                }
                            };
                        }
                        None => {
                            self.check_request_line()?;
                            if self.buf.len() >= self.max_head {
                                return Err(HttpError::TooLong);
                            }
                            // Room was left, so all of the input was taken.
                            input = input.get(take..).unwrap_or_default();
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Between requests (nothing held but maybe a CR), drop empty lines.
    fn skip_empty_lines<'a>(&mut self, mut input: &'a [u8]) -> &'a [u8] {
        loop {
            if self.buf == b"\r" {
                match input {
                    [b'\n', rest @ ..] => {
                        self.buf.clear();
                        input = rest;
                    }
                    _ => return input,
                }
            } else if !self.buf.is_empty() {
                return input;
            }
            match input {
                [b'\n', rest @ ..] | [b'\r', b'\n', rest @ ..] => input = rest,
                [b'\r'] => {
                    self.buf.push(b'\r');
                    return &[];
                }
                _ => return input,
            }
        }
    }

    /// The end of the first empty line in `buf` (LF LF or LF CR LF), resuming where the last
    /// search stopped.
    fn find_head_end(&mut self) -> Option<usize> {
        let buf = self.buf.as_slice();
        let mut i = self.scan_from;
        while let Some(&b) = buf.get(i) {
            if b == b'\n' {
                match (buf.get(i.saturating_add(1)), buf.get(i.saturating_add(2))) {
                    (Some(b'\n'), _) => return Some(i.saturating_add(2)),
                    (Some(b'\r'), Some(b'\n')) => return Some(i.saturating_add(3)),
                    _ => {}
                }
            }
            i = i.saturating_add(1);
        }
        self.scan_from = buf.len().saturating_sub(2);
        None
    }

    /// Check the request line of the incomplete head in `buf` as far as it goes.
    fn check_request_line(&mut self) -> Result<(), HttpError> {
        if self.line_checked {
            return Ok(());
        }
        let buf = self.buf.as_slice();
        match buf.iter().position(|&b| b == b'\n') {
            Some(lf) => {
                scan_request_line(strip_cr(buf.get(..lf).unwrap_or_default()), true)?;
                self.line_checked = true;
            }
            None => {
                // A CR at the end may be the start of the line's end.
                scan_request_line(strip_cr(buf), false)?;
            }
        }
        Ok(())
    }

    /// Follow a chunked body through `input`; returns what is left of it after the body ends
    /// (then the state is back to `Head`), or nothing.
    fn chunked<'a>(&mut self, mut chunk: Chunk, mut line: usize, mut input: &'a [u8]) -> Result<&'a [u8], HttpError> {
        let max = self.max_head;
        loop {
            if let Chunk::Data { remaining } = chunk {
                let take = remaining.min(input.len() as u64);
                input = input.get(take as usize..).unwrap_or_default();
                let remaining = remaining.saturating_sub(take);
                chunk = if remaining == 0 { Chunk::DataCr } else { Chunk::Data { remaining } };
            }
            let Some((&b, rest)) = input.split_first() else {
                self.state = State::Chunked { chunk, line };
                return Ok(input);
            };
            input = rest;
            chunk = match chunk {
                Chunk::Size { value, digits } => {
                    count(&mut line, max)?;
                    if let Some(d) = char::from(b).to_digit(16) {
                        let value = value
                            .checked_mul(16)
                            .and_then(|v| v.checked_add(u64::from(d)))
                            .ok_or(HttpError::BadHeader)?;
                        Chunk::Size { value, digits: true }
                    } else if !digits {
                        return Err(HttpError::BadHeader);
                    } else {
                        match b {
                            b' ' | b'\t' | b';' => Chunk::Ext { value },
                            b'\r' => Chunk::SizeLf { value },
                            b'\n' => size_line_done(value, &mut line),
                            _ => return Err(HttpError::BadHeader),
                        }
                    }
                }
                Chunk::Ext { value } => {
                    count(&mut line, max)?;
                    match b {
                        b'\r' => Chunk::SizeLf { value },
                        b'\n' => size_line_done(value, &mut line),
                        b'\t' | b' '..=0x7e | 0x80..=0xff => Chunk::Ext { value },
                        _ => return Err(HttpError::BadHeader),
                    }
                }
                Chunk::SizeLf { value } => {
                    if b != b'\n' {
                        return Err(HttpError::BadHeader);
                    }
                    size_line_done(value, &mut line)
                }
                // (`Data` only once its bytes are all skipped: with some left, no input is left.)
                Chunk::Data { .. } | Chunk::DataCr => match b {
                    b'\r' => Chunk::DataLf,
                    b'\n' => Chunk::Size { value: 0, digits: false },
                    _ => return Err(HttpError::BadHeader),
                },
                Chunk::DataLf => {
                    if b != b'\n' {
                        return Err(HttpError::BadHeader);
                    }
                    Chunk::Size { value: 0, digits: false }
                }
                Chunk::Trailer { line_start } => {
                    count(&mut line, max)?;
                    match b {
                        b'\n' if line_start => {
                            self.state = State::Head;
                            return Ok(input);
                        }
                        b'\n' => Chunk::Trailer { line_start: true },
                        b'\r' => Chunk::TrailerLf { empty: line_start },
                        b'\t' | b' '..=0x7e | 0x80..=0xff => Chunk::Trailer { line_start: false },
                        _ => return Err(HttpError::BadHeader),
                    }
                }
                Chunk::TrailerLf { empty } => {
                    count(&mut line, max)?;
                    if b != b'\n' {
                        return Err(HttpError::BadHeader);
                    }
                    if empty {
                        self.state = State::Head;
                        return Ok(input);
                    }
                    Chunk::Trailer { line_start: true }
                }
            };
        }
    }
}

/// Count one more byte of a chunk-size line or of the trailer section, at most `max`.
fn count(line: &mut usize, max: usize) -> Result<(), HttpError> {
    *line = line.saturating_add(1);
    if *line > max {
        Err(HttpError::TooLong)
    } else {
        Ok(())
    }
}

/// The end of a chunk-size line: the chunk's data, or after the last chunk the trailer section.
fn size_line_done(value: u64, line: &mut usize) -> Chunk {
    *line = 0;
    if value == 0 {
        Chunk::Trailer { line_start: true }
    } else {
        Chunk::Data { remaining: value }
    }
}
