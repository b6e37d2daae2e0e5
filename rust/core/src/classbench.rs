//! ClassBench rulesets and traces (the packet-classification literature's benchmark data).
//!
//! Rules, one a line, priority = line order (first line highest):
//!
//! ```text
//! @<src ip>/<len> <tab> <dst ip>/<len> <tab> <sport lo> : <sport hi> <tab> <dport lo> : <dport hi> <tab> <proto>/<mask> <tab> <flags>/<mask>
//! ```
//!
//! Traces, one header a line: `<src ip as u32> <dst ip as u32> <sport> <dport> <proto> <flags>
//! <rule number>` (the rule number, from 1, is the rule the generator started from; not always the
//! first match).
//!
//! Parsers take any [`Read`]; [`open`] gives a reader over a file, decompressing it when it is
//! gzipped (detected by its magic bytes, not its name). Errors carry the 1-based line number.
//! Rule `i` (0-based line index among rule lines) gets id `i` and priority `i`.

use crate::classifier::{ClassRule, PacketKey, PortRange, Prefix};
use flate2::read::MultiGzDecoder;
use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// A malformed ClassBench file: where and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// File, when read through [`load_rules`]/[`load_trace`].
    pub path: Option<String>,
    /// 1-based line number; 0 when the error is not about a line (file cannot be opened).
    pub line: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.path, self.line) {
            (Some(p), 0) => write!(f, "{p}: {}", self.message),
            (Some(p), l) => write!(f, "{p}:{l}: {}", self.message),
            (None, 0) => write!(f, "{}", self.message),
            (None, l) => write!(f, "line {l}: {}", self.message),
        }
    }
}

impl std::error::Error for ParseError {}

fn err(line: usize, message: impl Into<String>) -> ParseError {
    ParseError { path: None, line, message: message.into() }
}

/// One trace header and the generator's rule number (1-based; see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceEntry {
    pub key: PacketKey,
    pub rule: u32,
}

/// Calls `f(line_number, line)` for every non-blank line, stopping at the first error.
fn each_line<R: Read>(r: R, mut f: impl FnMut(usize, &str) -> Result<(), ParseError>) -> Result<(), ParseError> {
    let mut r = BufReader::new(r);
    let mut buf = Vec::new();
    let mut n = 0;
    loop {
        buf.clear();
        n += 1;
        match r.read_until(b'\n', &mut buf) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) => return Err(err(n, format!("read error: {e}"))),
        }
        let line = std::str::from_utf8(&buf).map_err(|_| err(n, "line is not valid UTF-8"))?;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        f(n, line)?;
    }
}

fn parse_prefix(n: usize, what: &str, s: &str) -> Result<Prefix, ParseError> {
    let (a, l) = s.split_once('/').ok_or_else(|| err(n, format!("{what}: expected ADDRESS/LENGTH, got {s:?}")))?;
    let len: u8 = l.trim().parse().map_err(|_| err(n, format!("{what}: bad prefix length {l:?}")))?;
    match a.trim().parse::<IpAddr>() {
        Ok(IpAddr::V4(v4)) if len <= 32 => Ok(Prefix::v4(u32::from(v4), len)),
        Ok(IpAddr::V6(v6)) if len <= 128 => Ok(Prefix { addr: u128::from(v6), len }),
        Ok(_) => Err(err(n, format!("{what}: prefix length {len} too long for {a}"))),
        Err(_) => Err(err(n, format!("{what}: bad address {a:?}"))),
    }
}

fn parse_range(n: usize, what: &str, s: &str) -> Result<PortRange, ParseError> {
    let (lo, hi) = s.split_once(':').ok_or_else(|| err(n, format!("{what}: expected LO : HI, got {s:?}")))?;
    let p = |x: &str| x.trim().parse::<u16>().map_err(|_| err(n, format!("{what}: bad port {:?}", x.trim())));
    let (lo, hi) = (p(lo)?, p(hi)?);
    if lo > hi {
        return Err(err(n, format!("{what}: range {lo} : {hi} has lo > hi")));
    }
    Ok(PortRange { lo, hi })
}

fn parse_hex(n: usize, what: &str, s: &str) -> Result<u32, ParseError> {
    let t = s.trim();
    let digits = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .ok_or_else(|| err(n, format!("{what}: expected hex 0x.., got {t:?}")))?;
    u32::from_str_radix(digits, 16).map_err(|_| err(n, format!("{what}: bad hex {t:?}")))
}

fn parse_value_mask(n: usize, what: &str, s: &str) -> Result<(u32, u32), ParseError> {
    let (v, m) = s.split_once('/').ok_or_else(|| err(n, format!("{what}: expected VALUE/MASK, got {s:?}")))?;
    Ok((parse_hex(n, what, v)?, parse_hex(n, what, m)?))
}

/// Parses one rule line (with its leading `@`).
pub fn parse_rule_line(n: usize, line: &str, id: u32) -> Result<ClassRule, ParseError> {
    let body = line.strip_prefix('@').ok_or_else(|| err(n, "rule line must start with '@'"))?;
    let fields: Vec<&str> = body.split('\t').map(str::trim).filter(|f| !f.is_empty()).collect();
    if !(5..=6).contains(&fields.len()) {
        return Err(err(
            n,
            format!(
                "expected 5 or 6 tab-separated fields (src, dst, sport, dport, proto[, flags]), got {}",
                fields.len()
            ),
        ));
    }
    let src = parse_prefix(n, "source", fields[0])?;
    let dst = parse_prefix(n, "destination", fields[1])?;
    let sport = parse_range(n, "source port", fields[2])?;
    let dport = parse_range(n, "destination port", fields[3])?;
    let (pv, pm) = parse_value_mask(n, "protocol", fields[4])?;
    if pv > 0xff || pm > 0xff {
        return Err(err(n, format!("protocol: {pv:#x}/{pm:#x} does not fit in a byte")));
    }
    let proto = match pm {
        0xff => Some(pv as u8),
        0 => None,
        _ => return Err(err(n, format!("protocol: partial mask {pm:#04x} is not supported (0x00 or 0xFF)"))),
    };
    if let Some(f) = fields.get(5) {
        let (fv, fm) = parse_value_mask(n, "flags", f)?;
        if fv > 0xffff || fm > 0xffff {
            return Err(err(n, format!("flags: {fv:#x}/{fm:#x} does not fit in 16 bits")));
        }
    }
    Ok(ClassRule { id, priority: id, src, dst, sport, dport, proto, icmp_type: None, icmp_code: None })
}

/// Parses a ruleset; rule `i` (0-based, in file order) gets id and priority `i`.
pub fn parse_rules<R: Read>(r: R) -> Result<Vec<ClassRule>, ParseError> {
    let mut rules = Vec::new();
    each_line(r, |n, line| {
        let id = u32::try_from(rules.len()).map_err(|_| err(n, "too many rules"))?;
        rules.push(parse_rule_line(n, line, id)?);
        Ok(())
    })?;
    Ok(rules)
}

/// Parses one trace line.
pub fn parse_trace_line(n: usize, line: &str) -> Result<TraceEntry, ParseError> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() != 7 {
        return Err(err(n, format!("expected 7 fields (src dst sport dport proto flags rule), got {}", f.len())));
    }
    fn num<T: std::str::FromStr>(n: usize, what: &str, s: &str) -> Result<T, ParseError> {
        s.parse().map_err(|_| err(n, format!("{what}: bad number {s:?}")))
    }
    let src: u32 = num(n, "source address", f[0])?;
    let dst: u32 = num(n, "destination address", f[1])?;
    let sport: u16 = num(n, "source port", f[2])?;
    let dport: u16 = num(n, "destination port", f[3])?;
    let proto: u8 = num(n, "protocol", f[4])?;
    let _flags: u32 = num(n, "flags", f[5])?;
    let rule: u32 = num(n, "rule number", f[6])?;
    Ok(TraceEntry { key: PacketKey::v4(src, dst, sport, dport, proto), rule })
}

/// Parses a trace.
pub fn parse_trace<R: Read>(r: R) -> Result<Vec<TraceEntry>, ParseError> {
    let mut out = Vec::new();
    each_line(r, |n, line| {
        out.push(parse_trace_line(n, line)?);
        Ok(())
    })?;
    Ok(out)
}

/// A reader over the file, gunzipping it when it starts with the gzip magic bytes.
pub fn open(path: &Path) -> std::io::Result<Box<dyn Read>> {
    let mut f = BufReader::new(File::open(path)?);
    let gz = f.fill_buf()?.starts_with(&[0x1f, 0x8b]);
    Ok(if gz { Box::new(MultiGzDecoder::new(f)) } else { Box::new(f) })
}

fn with_path<T>(path: &Path, r: Result<T, ParseError>) -> Result<T, ParseError> {
    r.map_err(|mut e| {
        e.path = Some(path.display().to_string());
        e
    })
}

/// Reads a ruleset file (plain or gzipped).
pub fn load_rules(path: &Path) -> Result<Vec<ClassRule>, ParseError> {
    let r = open(path).map_err(|e| err(0, format!("cannot open: {e}")));
    with_path(path, r.and_then(parse_rules))
}

/// Reads a trace file (plain or gzipped).
pub fn load_trace(path: &Path) -> Result<Vec<TraceEntry>, ParseError> {
    let r = open(path).map_err(|e| err(0, format!("cannot open: {e}")));
    with_path(path, r.and_then(parse_trace))
}

/// The ClassBench data folder: `$PYCLASSIFY_CLASSBENCH` if set, else the first
/// `shared/classbench` found in `start` or one of its ancestors (the repository lives beside
/// `shared/`). `None` when there is none.
pub fn find_data_dir(start: &Path) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PYCLASSIFY_CLASSBENCH") {
        let p = PathBuf::from(p);
        return p.is_dir().then_some(p);
    }
    start.ancestors().map(|a| a.join("shared").join("classbench")).find(|p| p.is_dir())
}

/// Headers derived from the rules deterministically (for rulesets without a trace): for each of
/// `count` headers, a rule chosen by a fixed pseudo-random sequence and a point inside each of its
/// fields (a random address in the prefix, a random port in each range, its protocol or a random
/// one). `seed` selects the sequence. The headers are IPv4 when the rule is IPv4-mapped.
pub fn headers_from_rules(rules: &[ClassRule], count: usize, seed: u64) -> Vec<PacketKey> {
    let mut s = seed ^ 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        // splitmix64
        s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let in_prefix = |p: &Prefix, r: u128| {
        let m = Prefix::mask(p.len);
        // Keep an IPv4-mapped prefix IPv4-mapped, whatever its length.
        let (addr, m) = if p.len < 96 && p.addr & !Prefix::mask(96) == 0 && p.addr >> 32 == 0xffff {
            (p.addr, m | Prefix::mask(96))
        } else {
            (p.addr, m)
        };
        (addr & m) | (r & !m)
    };
    let in_range = |r: &PortRange, x: u64| (r.lo as u64 + x % (r.hi as u64 - r.lo as u64 + 1)) as u16;
    if rules.is_empty() {
        return Vec::new();
    }
    (0..count)
        .map(|_| {
            let r = &rules[(next() % rules.len() as u64) as usize];
            let src = in_prefix(&r.src, (next() as u128) << 64 | next() as u128);
            let dst = in_prefix(&r.dst, (next() as u128) << 64 | next() as u128);
            PacketKey {
                src,
                dst,
                sport: in_range(&r.sport, next()),
                dport: in_range(&r.dport, next()),
                proto: r.proto.unwrap_or(next() as u8),
                icmp_type: r.icmp_type.unwrap_or(0),
                icmp_code: r.icmp_code.unwrap_or(0),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_rule() {
        let r = parse_rule_line(
            1,
            "@12.161.113.252/32\t248.5.5.0/24\t0 : 65535\t5632 : 5632\t0x06/0xFF\t0x1000/0x1000\t",
            3,
        )
        .unwrap();
        assert_eq!(r.id, 3);
        assert_eq!(r.src, Prefix::v4(0x0ca1_71fc, 32));
        assert_eq!(r.dst, Prefix::v4(0xf805_0500, 24));
        assert_eq!(r.sport, PortRange::ANY);
        assert_eq!(r.dport, PortRange::exact(5632));
        assert_eq!(r.proto, Some(6));
        let any = parse_rule_line(1, "@0.0.0.0/0\t0.0.0.0/0\t0 : 65535\t0 : 65535\t0x00/0x00", 0).unwrap();
        assert_eq!(any.proto, None);
        assert!(any.matches(&PacketKey::v4(1, 2, 3, 4, 5)));
    }

    #[test]
    fn headers_from_rules_match_their_rule() {
        let rules = parse_rules(
            "@10.0.0.0/8\t0.0.0.0/0\t0 : 65535\t80 : 90\t0x06/0xFF\n@1.2.3.4/32\t5.6.7.0/24\t7 : 7\t0 : 65535\t0x00/0x00\n"
                .as_bytes(),
        )
        .unwrap();
        let hs = headers_from_rules(&rules, 200, 1);
        assert_eq!(hs.len(), 200);
        assert!(hs.iter().all(|h| rules.iter().any(|r| r.matches(h))));
        assert!(hs.iter().all(|h| h.src >> 32 == 0xffff && h.dst >> 32 == 0xffff));
        assert_eq!(hs, headers_from_rules(&rules, 200, 1));
    }
}
