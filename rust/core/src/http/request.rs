//! One HTTP/1.x request head (RFC 9112 §2–§3, §5, §6): the request line, the header fields and
//! the body framing they announce.
//!
//! Strict where a lenient reading could let the proxy-less judge and the server disagree about
//! what was asked (request smuggling): the request line is `METHOD SP request-target SP
//! HTTP/1.x` with single spaces; a method is a token; a target is visible ASCII, in origin form
//! (`/...`), absolute form (`http[s]://authority/...`, no userinfo) or, for `OPTIONS` only,
//! asterisk form; header names are tokens directly followed by `:`; values hold no control
//! characters; obs-fold (a line starting with a space or tab) is refused; at most [`MAX_HEADERS`]
//! fields; one `Host`, a valid `uri-host [":" port]`; `Content-Length` a single non-negative
//! integer (repeated identical values accepted, differing ones refused); `Transfer-Encoding` only
//! with `chunked` last and once, never in HTTP/1.0, never together with `Content-Length`.
//!
//! Lenient where RFC 9112 allows it: a bare LF ends a line (a CR before it is dropped); a bare CR
//! anywhere else is a control character and refused.
#![deny(clippy::indexing_slicing)]

use std::fmt;
use std::net::Ipv6Addr;

/// Most header fields in one head; a head with more is refused ([`HttpError::TooLong`]).
pub const MAX_HEADERS: usize = 100;

/// The request line of the HTTP/2 connection preface (RFC 9113 §3.4).
const H2_PREFACE_LINE: &[u8] = b"PRI * HTTP/2.0";

/// Why a request (and so its connection) could not be judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HttpError {
    /// The bytes do not start like an HTTP/1.x request: the first byte of a request line is not
    /// a token character (TLS, binary protocols), or the HTTP/2 connection preface.
    NotHttp,
    /// The request line is not `METHOD SP target SP version` (missing or doubled spaces, no
    /// version, an unterminated line).
    BadRequestLine,
    /// The method holds a byte that is not a token character (RFC 9110 §5.6.2).
    BadMethod,
    /// The target holds a control character, space or non-ASCII byte, or is not in origin,
    /// absolute (http/https, a valid host, no userinfo) or (for OPTIONS) asterisk form.
    BadTarget,
    /// The version is not `HTTP/1.x` (x one digit).
    BadVersion,
    /// A header field is malformed (name not a token, no colon, whitespace before the colon,
    /// control characters in the value, obs-fold), a second or invalid `Host`, an invalid or
    /// conflicting `Content-Length`, a `Transfer-Encoding` not ending in `chunked`, sent in
    /// HTTP/1.0 or alongside `Content-Length`; a head not ending in an empty line or followed by
    /// more bytes ([`parse_head`]); or a chunked body that breaks its framing (a bad chunk size,
    /// no CRLF after a chunk's data, control characters in extensions or trailers).
    BadHeader,
    /// A head (or a chunk-size line, or a chunked body's trailer section) longer than the
    /// stream's `max_head` bytes, or a head of more than [`MAX_HEADERS`] fields.
    TooLong,
    /// A head spread over more than the stream's `max_segments` segments.
    TooManySegments,
}

/// Every [`HttpError::name`], in declaration order (metric label values).
pub const HTTP_ERROR_NAMES: &[&str] = &[
    "not_http",
    "bad_request_line",
    "bad_method",
    "bad_target",
    "bad_version",
    "bad_header",
    "too_long",
    "too_many_segments",
];

impl HttpError {
    /// Every error, in declaration order (the order of [`HTTP_ERROR_NAMES`]).
    pub const ALL: [HttpError; 8] = [
        HttpError::NotHttp,
        HttpError::BadRequestLine,
        HttpError::BadMethod,
        HttpError::BadTarget,
        HttpError::BadVersion,
        HttpError::BadHeader,
        HttpError::TooLong,
        HttpError::TooManySegments,
    ];

    /// Short snake_case name, a metric label value.
    pub fn name(&self) -> &'static str {
        match self {
            HttpError::NotHttp => "not_http",
            HttpError::BadRequestLine => "bad_request_line",
            HttpError::BadMethod => "bad_method",
            HttpError::BadTarget => "bad_target",
            HttpError::BadVersion => "bad_version",
            HttpError::BadHeader => "bad_header",
            HttpError::TooLong => "too_long",
            HttpError::TooManySegments => "too_many_segments",
        }
    }
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::error::Error for HttpError {}

/// One HTTP/1.x request head: what Calico's `http` match reads, plus Host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The method as sent (a token; case kept: methods are case-sensitive).
    pub method: String,
    /// The target's path without query string or fragment, percent-decoding NOT applied, dot
    /// segments NOT removed: `/...` (origin form; for absolute form its path, `/` when empty),
    /// or `*` (asterisk form, OPTIONS only). Visible ASCII only.
    pub path: String,
    /// Lowercase, port stripped (an IPv6 literal in its canonical form, in brackets); from the
    /// target when in absolute form (RFC 9112 §3.2.2: then Host is ignored), else from the Host
    /// header; `None` when neither gives one (no Host, or an empty one).
    pub host: Option<String>,
    /// `x` of `HTTP/1.x`.
    pub version_minor: u8,
}

/// How the body after a head is delimited (RFC 9112 §6.3 for requests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body: the request ends at its head.
    None,
    /// `Content-Length` bytes.
    Length(u64),
    /// `Transfer-Encoding: ..., chunked`: chunks up to the last one, then trailers.
    Chunked,
}

/// Parse one complete head (request line + headers, ending in CRLF CRLF; bare LF tolerated), and
/// nothing after it.
pub fn parse_head(head: &[u8]) -> Result<Request, HttpError> {
    parse_head_framed(head).map(|(request, _)| request)
}

/// RFC 9110 §5.6.2 token characters.
pub(crate) fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+' | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~'
        )
}

/// Bytes a request target may hold: visible ASCII.
fn is_target_byte(b: u8) -> bool {
    (0x21..=0x7e).contains(&b)
}

/// Bytes a field value may hold: VCHAR, obs-text, SP, HTAB.
fn is_field_value_byte(b: u8) -> bool {
    b == b' ' || b == b'\t' || (0x21..=0x7e).contains(&b) || b >= 0x80
}

fn ascii_string(bytes: &[u8]) -> String {
    bytes.iter().map(|&b| char::from(b)).collect()
}

fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// A line without its terminator: drop one CR before the LF.
pub(crate) fn strip_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// The parts of a valid request line.
#[derive(Debug)]
pub(crate) struct RequestLine {
    method: String,
    path: String,
    host: Option<String>,
    version_minor: u8,
}

/// Check a request line (without its line terminator) left to right. With `complete` false the
/// line may continue: `Ok(None)` while nothing is wrong with what is there so far. Every error
/// depends only on the bytes up to where it is found, so the error found in a prefix is the error
/// of the whole line (the stream reports bad request lines before their head completes).
pub(crate) fn scan_request_line(line: &[u8], complete: bool) -> Result<Option<RequestLine>, HttpError> {
    if line.starts_with(H2_PREFACE_LINE) {
        return Err(HttpError::NotHttp);
    }
    if !complete && H2_PREFACE_LINE.starts_with(line) {
        return Ok(None);
    }
    let more = |error| if complete { Err(error) } else { Ok(None) };
    match line.first() {
        None => return more(HttpError::BadRequestLine),
        Some(b' ') => return Err(HttpError::BadRequestLine),
        Some(&b) if !is_tchar(b) => return Err(HttpError::NotHttp),
        Some(_) => {}
    }
    // METHOD SP
    let Some(end) = line.iter().position(|&b| !is_tchar(b)) else {
        return more(HttpError::BadRequestLine);
    };
    let (method, rest) = line.split_at_checked(end).ok_or(HttpError::BadRequestLine)?;
    let Some(rest) = rest.strip_prefix(b" ") else {
        return Err(HttpError::BadMethod);
    };
    // request-target SP
    let Some(end) = rest.iter().position(|&b| !is_target_byte(b)) else {
        return more(HttpError::BadRequestLine);
    };
    let (target, rest) = rest.split_at_checked(end).ok_or(HttpError::BadRequestLine)?;
    let Some(version) = rest.strip_prefix(b" ") else {
        return Err(HttpError::BadTarget);
    };
    if target.is_empty() {
        return Err(HttpError::BadRequestLine);
    }
    let (path, host) = parse_target(method, target)?;
    // HTTP-version, the end of the line
    if !complete {
        return Ok(None);
    }
    if version.contains(&b' ') {
        return Err(HttpError::BadRequestLine);
    }
    let version_minor = match version {
        [b'H', b'T', b'T', b'P', b'/', b'1', b'.', minor] if minor.is_ascii_digit() => minor.saturating_sub(b'0'),
        _ => return Err(HttpError::BadVersion),
    };
    Ok(Some(RequestLine { method: ascii_string(method), path, host, version_minor }))
}

/// The path (query and fragment cut) and, in absolute form, the host of a target of visible
/// ASCII.
fn parse_target(method: &[u8], target: &[u8]) -> Result<(String, Option<String>), HttpError> {
    let cut = |s: &[u8]| -> String {
        let end = s.iter().position(|&b| b == b'?' || b == b'#').unwrap_or(s.len());
        ascii_string(s.get(..end).unwrap_or(s))
    };
    if target == b"*" {
        return if method == b"OPTIONS" { Ok(("*".to_string(), None)) } else { Err(HttpError::BadTarget) };
    }
    if target.first() == Some(&b'/') {
        return Ok((cut(target), None));
    }
    // absolute-form: http or https (scheme case-insensitive), "//" authority, path-abempty.
    let sep = find(target, b"://").ok_or(HttpError::BadTarget)?;
    let scheme = target.get(..sep).ok_or(HttpError::BadTarget)?;
    if !scheme.eq_ignore_ascii_case(b"http") && !scheme.eq_ignore_ascii_case(b"https") {
        return Err(HttpError::BadTarget);
    }
    let rest = target.get(sep.saturating_add(3)..).ok_or(HttpError::BadTarget)?;
    let end = rest.iter().position(|&b| matches!(b, b'/' | b'?' | b'#')).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at_checked(end).ok_or(HttpError::BadTarget)?;
    if authority.contains(&b'@') {
        // userinfo: RFC 9110 §4.2.4, an error in http(s) URIs (and a classic spoofing trick).
        return Err(HttpError::BadTarget);
    }
    let host = parse_host(authority).ok_or(HttpError::BadTarget)?;
    if host.is_none() {
        return Err(HttpError::BadTarget);
    }
    let path = cut(tail);
    let path = if path.is_empty() { "/".to_string() } else { path };
    Ok((path, host))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// `uri-host [":" port]` (RFC 9110 §7.2, RFC 3986 §3.2.2): `None` if invalid, `Some(None)` if
/// empty, else the host lowercased without its port (an IPv6 literal canonical, in brackets).
fn parse_host(value: &[u8]) -> Option<Option<String>> {
    if value.is_empty() {
        return Some(None);
    }
    let (host, port) = if let Some(inner) = value.strip_prefix(b"[") {
        let close = inner.iter().position(|&b| b == b']')?;
        let (addr, rest) = inner.split_at_checked(close)?;
        let addr: Ipv6Addr = std::str::from_utf8(addr).ok()?.parse().ok()?;
        (format!("[{addr}]"), rest.strip_prefix(b"]")?)
    } else {
        let end = value.iter().position(|&b| b == b':').unwrap_or(value.len());
        let (name, port) = value.split_at_checked(end)?;
        if name.is_empty() || !reg_name_ok(name) {
            return None;
        }
        (ascii_string(name).to_ascii_lowercase(), port)
    };
    match port {
        [] => {}
        [b':', digits @ ..] if digits.iter().all(u8::is_ascii_digit) => {}
        _ => return None,
    }
    Some(Some(host))
}

/// RFC 3986 reg-name (an IPv4 address is one too): unreserved, sub-delims, pct-encoded.
fn reg_name_ok(name: &[u8]) -> bool {
    let mut i = 0;
    while let Some(&b) = name.get(i) {
        if b == b'%' {
            let hex = |j: usize| name.get(j).is_some_and(u8::is_ascii_hexdigit);
            if !hex(i.saturating_add(1)) || !hex(i.saturating_add(2)) {
                return false;
            }
            i = i.saturating_add(3);
            continue;
        }
        let ok = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'.' | b'_' | b'~' | b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'='
            );
        if !ok {
            return false;
        }
        i = i.saturating_add(1);
    }
    true
}

/// A `Content-Length` value: one or more identical non-negative integers, comma separated.
fn parse_content_length(value: &[u8]) -> Option<u64> {
    let mut found: Option<u64> = None;
    for element in value.split(|&b| b == b',') {
        let element = trim_ows(element);
        if element.is_empty() || !element.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let n =
            element.iter().try_fold(0u64, |n, &d| n.checked_mul(10)?.checked_add(u64::from(d.saturating_sub(b'0'))))?;
        if found.is_some_and(|f| f != n) {
            return None;
        }
        found = Some(n);
    }
    found
}

/// The lines of a head: each without its LF and the CR before it, with whether it had a LF.
struct Lines<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Lines<'a> {
    type Item = (&'a [u8], bool);

    fn next(&mut self) -> Option<(&'a [u8], bool)> {
        if self.rest.is_empty() {
            return None;
        }
        match self.rest.iter().position(|&b| b == b'\n') {
            Some(lf) => {
                let line = self.rest.get(..lf).unwrap_or_default();
                self.rest = self.rest.get(lf.saturating_add(1)..).unwrap_or_default();
                Some((strip_cr(line), true))
            }
            None => {
                let line = self.rest;
                self.rest = &[];
                Some((line, false))
            }
        }
    }
}

/// [`parse_head`], with the framing of the body that follows.
pub(crate) fn parse_head_framed(head: &[u8]) -> Result<(Request, Framing), HttpError> {
    let mut lines = Lines { rest: head };
    let (first, terminated) = lines.next().unwrap_or_default();
    let line = scan_request_line(first, true)?.ok_or(HttpError::BadRequestLine)?;
    if !terminated {
        return Err(HttpError::BadRequestLine);
    }
    let mut count = 0usize;
    let mut host_seen = false;
    let mut header_host: Option<String> = None;
    let mut content_length: Option<u64> = None;
    let mut te_seen = false;
    let mut codings: Vec<Vec<u8>> = Vec::new();
    loop {
        let (field, terminated) = lines.next().ok_or(HttpError::BadHeader)?;
        if !terminated {
            return Err(HttpError::BadHeader);
        }
        if field.is_empty() {
            if !lines.rest.is_empty() {
                return Err(HttpError::BadHeader);
            }
            break;
        }
        count = count.saturating_add(1);
        if count > MAX_HEADERS {
            return Err(HttpError::TooLong);
        }
        // A name holding whitespace covers obs-fold (a line starting with SP or HTAB), whitespace
        // before the first field and before the colon: all refused (RFC 9112 §5.2, §2.2, §5.1).
        let colon = field.iter().position(|&b| b == b':').ok_or(HttpError::BadHeader)?;
        let (name, value) = field.split_at_checked(colon).ok_or(HttpError::BadHeader)?;
        let value = trim_ows(value.get(1..).unwrap_or_default());
        if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
            return Err(HttpError::BadHeader);
        }
        if !value.iter().all(|&b| is_field_value_byte(b)) {
            return Err(HttpError::BadHeader);
        }
        if name.eq_ignore_ascii_case(b"host") {
            if host_seen {
                return Err(HttpError::BadHeader);
            }
            host_seen = true;
            header_host = parse_host(value).ok_or(HttpError::BadHeader)?;
        } else if name.eq_ignore_ascii_case(b"content-length") {
            let n = parse_content_length(value).ok_or(HttpError::BadHeader)?;
            if content_length.is_some_and(|c| c != n) {
                return Err(HttpError::BadHeader);
            }
            content_length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            te_seen = true;
            for element in value.split(|&b| b == b',') {
                let coding = element.split(|&b| b == b';').next().unwrap_or_default();
                let coding = trim_ows(coding);
                if coding.is_empty() {
                    continue; // empty list elements are ignored (RFC 9110 §5.6.1.2)
                }
                if !coding.iter().all(|&b| is_tchar(b)) {
                    return Err(HttpError::BadHeader);
                }
                codings.push(coding.to_ascii_lowercase());
            }
        }
    }
    let framing = if te_seen {
        // RFC 9112 §6.1: chunked must be the final coding, applied once; TE in HTTP/1.0 means
        // faulty framing; TE and Content-Length together is how requests are smuggled.
        let chunked = codings.iter().filter(|c| c.as_slice() == b"chunked").count();
        let last_chunked = codings.last().is_some_and(|c| c.as_slice() == b"chunked");
        if content_length.is_some() || line.version_minor == 0 || chunked != 1 || !last_chunked {
            return Err(HttpError::BadHeader);
        }
        Framing::Chunked
    } else {
        match content_length {
            Some(n) => Framing::Length(n),
            None => Framing::None,
        }
    };
    let request = Request {
        method: line.method,
        path: line.path,
        host: line.host.or(header_host),
        version_minor: line.version_minor,
    };
    Ok((request, framing))
}
