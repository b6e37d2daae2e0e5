//! A bounded decoder of DNS response messages (RFC 1035 §4) to the facts they teach.
//!
//! Only what domain policy needs is decoded: the header, then every record of the answer
//! section; questions and the authority and additional sections are walked over (their names are
//! skipped in place, not followed), OPT (EDNS) and every other record type ignored. A message is
//! either fully well formed (every section present, no byte left over) or refused with a
//! [`DnsError`], so a half-understood message never teaches anything.
//!
//! Names: compression pointers are followed only backwards (each pointer must point strictly
//! before the run of labels it ends, which makes loops impossible) and never into the header; a
//! name is at most [`MAX_NAME_WIRE_LEN`] bytes on the wire and [`MAX_NAME_LABELS`] labels; its
//! labels are printable ASCII without `.` (a label with a dot would print as two labels and could
//! pass for another name), lowercased.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Longest name on the wire, length bytes and the final zero included (RFC 1035 §3.1).
pub const MAX_NAME_WIRE_LEN: usize = 255;
/// Most labels in a name (the most 255 wire bytes can hold).
pub const MAX_NAME_LABELS: usize = 127;
/// Most answer records in a message; a message with more is refused ([`DnsError::TooManyRecords`]).
pub const MAX_ANSWER_RECORDS: usize = 512;
/// Most CNAME hops followed from an address record back to the names that reach it.
pub const MAX_CNAME_DEPTH: usize = 16;
/// Most facts one message may teach (addresses x names reaching them); a message teaching more
/// is refused ([`DnsError::TooManyRecords`]).
pub const MAX_FACTS_PER_MESSAGE: usize = 4096;

const HEADER_LEN: usize = 12;
const TYPE_A: u16 = 1;
const TYPE_CNAME: u16 = 5;
const TYPE_AAAA: u16 = 28;
const CLASS_IN: u16 = 1;

/// Why a DNS message taught nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DnsError {
    /// The message (or a TCP payload's last message) ends before its header, a record, a name or
    /// its length prefix does.
    Truncated,
    /// QR = 0: a query, not a response.
    NotResponse,
    /// An opcode other than QUERY (0).
    BadOpcode,
    /// A label of a reserved type (first bits 01 or 10), or with a byte that is not printable
    /// ASCII or is a `.`.
    BadLabel,
    /// A name longer than 255 bytes on the wire or than 127 labels.
    NameTooLong,
    /// A compression pointer that does not point strictly before the labels it ends (the shape
    /// every loop needs).
    PointerLoop,
    /// A compression pointer into the header or past the end of the message.
    BadPointer,
    /// More than [`MAX_ANSWER_RECORDS`] answer records, or more than [`MAX_FACTS_PER_MESSAGE`]
    /// facts taught.
    TooManyRecords,
    /// An A record whose data is not 4 bytes, an AAAA not 16, a CNAME whose name does not end
    /// exactly where its data does.
    BadRdata,
    /// Bytes after the last record the header announces.
    TrailingGarbage,
}

/// Every [`DnsError::name`], in declaration order (metric label values).
pub const DNS_ERROR_NAMES: &[&str] = &[
    "truncated",
    "not_response",
    "bad_opcode",
    "bad_label",
    "name_too_long",
    "pointer_loop",
    "bad_pointer",
    "too_many_records",
    "bad_rdata",
    "trailing_garbage",
];

impl DnsError {
    /// Every error, in declaration order (the order of [`DNS_ERROR_NAMES`]).
    pub const ALL: [DnsError; 10] = [
        DnsError::Truncated,
        DnsError::NotResponse,
        DnsError::BadOpcode,
        DnsError::BadLabel,
        DnsError::NameTooLong,
        DnsError::PointerLoop,
        DnsError::BadPointer,
        DnsError::TooManyRecords,
        DnsError::BadRdata,
        DnsError::TrailingGarbage,
    ];

    /// Short snake_case name, a metric label value.
    pub fn name(&self) -> &'static str {
        match self {
            DnsError::Truncated => "truncated",
            DnsError::NotResponse => "not_response",
            DnsError::BadOpcode => "bad_opcode",
            DnsError::BadLabel => "bad_label",
            DnsError::NameTooLong => "name_too_long",
            DnsError::PointerLoop => "pointer_loop",
            DnsError::BadPointer => "bad_pointer",
            DnsError::TooManyRecords => "too_many_records",
            DnsError::BadRdata => "bad_rdata",
            DnsError::TrailingGarbage => "trailing_garbage",
        }
    }
}

impl fmt::Display for DnsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::error::Error for DnsError {}

/// One learned fact: `name` resolved (directly or through a CNAME chain) to `addr` for `ttl`
/// seconds.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Answer {
    /// Lowercase, no trailing dot, never empty.
    pub name: String,
    pub addr: IpAddr,
    pub ttl: u32,
}

fn be16(msg: &[u8], pos: usize) -> Result<u16, DnsError> {
    match msg.get(pos..pos.saturating_add(2)) {
        Some(&[a, b]) => Ok(u16::from_be_bytes([a, b])),
        _ => Err(DnsError::Truncated),
    }
}

fn be32(msg: &[u8], pos: usize) -> Result<u32, DnsError> {
    match msg.get(pos..pos.saturating_add(4)) {
        Some(&[a, b, c, d]) => Ok(u32::from_be_bytes([a, b, c, d])),
        _ => Err(DnsError::Truncated),
    }
}

/// Reads the name at `start`, following compression pointers: (the name, lowercase with no
/// trailing dot, "" for the root; the offset just after the name where it started).
fn read_name(msg: &[u8], start: usize) -> Result<(String, usize), DnsError> {
    let mut pos = start;
    // Start of the run of labels being read: a pointer must point strictly before it.
    let mut run_start = start;
    let mut end_in_place: Option<usize> = None;
    let mut wire_len = 1usize; // the final zero
    let mut labels = 0usize;
    let mut name = String::new();
    loop {
        let len = *msg.get(pos).ok_or(DnsError::Truncated)?;
        match len >> 6 {
            0 if len == 0 => {
                let end = end_in_place.unwrap_or(pos.saturating_add(1));
                return Ok((name, end));
            }
            0 => {
                let l = usize::from(len);
                let first = pos.saturating_add(1);
                let label = msg.get(first..first.saturating_add(l)).ok_or(DnsError::Truncated)?;
                wire_len = wire_len.saturating_add(l + 1);
                labels += 1;
                if wire_len > MAX_NAME_WIRE_LEN || labels > MAX_NAME_LABELS {
                    return Err(DnsError::NameTooLong);
                }
                if !label.iter().all(|&b| label_byte(b)) {
                    return Err(DnsError::BadLabel);
                }
                if !name.is_empty() {
                    name.push('.');
                }
                name.extend(label.iter().map(|&b| char::from(b.to_ascii_lowercase())));
                pos = first.saturating_add(l);
            }
            3 => {
                let low = *msg.get(pos.saturating_add(1)).ok_or(DnsError::Truncated)?;
                let target = (usize::from(len & 0x3f) << 8) | usize::from(low);
                if end_in_place.is_none() {
                    end_in_place = Some(pos.saturating_add(2));
                }
                if target < HEADER_LEN || target >= msg.len() {
                    return Err(DnsError::BadPointer);
                }
                if target >= run_start {
                    return Err(DnsError::PointerLoop);
                }
                run_start = target;
                pos = target;
            }
            _ => return Err(DnsError::BadLabel),
        }
    }
}

/// A byte a label may hold: printable ASCII, not `.`.
fn label_byte(b: u8) -> bool {
    (0x21..=0x7e).contains(&b) && b != b'.'
}

/// Walks over the name at `pos` without following its pointer: the offset just after it.
fn skip_name(msg: &[u8], start: usize) -> Result<usize, DnsError> {
    let mut pos = start;
    let mut wire_len = 1usize;
    loop {
        let len = *msg.get(pos).ok_or(DnsError::Truncated)?;
        match len >> 6 {
            0 if len == 0 => return Ok(pos.saturating_add(1)),
            0 => {
                let l = usize::from(len);
                wire_len = wire_len.saturating_add(l + 1);
                if wire_len > MAX_NAME_WIRE_LEN {
                    return Err(DnsError::NameTooLong);
                }
                pos = pos.saturating_add(1 + l);
            }
            3 => {
                let end = pos.saturating_add(2);
                return if end <= msg.len() { Ok(end) } else { Err(DnsError::Truncated) };
            }
            _ => return Err(DnsError::BadLabel),
        }
    }
}

/// One resource record's fixed part, after its owner name.
struct RecordHead {
    rtype: u16,
    class: u16,
    ttl: u32,
    rdata_start: usize,
    rdata_end: usize,
}

fn record_head(msg: &[u8], pos: usize) -> Result<RecordHead, DnsError> {
    let rtype = be16(msg, pos)?;
    let class = be16(msg, pos.saturating_add(2))?;
    let ttl = be32(msg, pos.saturating_add(4))?;
    let rdlen = usize::from(be16(msg, pos.saturating_add(8))?);
    let rdata_start = pos.saturating_add(10);
    let rdata_end = rdata_start.saturating_add(rdlen);
    if rdata_end > msg.len() {
        return Err(DnsError::Truncated);
    }
    // RFC 2181 §8: a TTL with the top bit set is taken as zero.
    let ttl = if ttl > 0x7fff_ffff { 0 } else { ttl };
    Ok(RecordHead { rtype, class, ttl, rdata_start, rdata_end })
}

/// What an answer record says, for the records that teach.
enum Said {
    Addr(String, IpAddr, u32),
    /// owner, target, ttl
    Cname(String, String, u32),
}

/// A DNS response message (UDP payload, or one TCP message without its 2-byte length) -> the
/// facts it teaches: every A/AAAA in the answer section, attributed to its owner name AND to every
/// name that reaches that owner through CNAMEs in the same answer section (chains followed at most
/// [`MAX_CNAME_DEPTH`] deep, each name once: loops end there), ttl = the minimum TTL along the
/// chain. Only QR=1, opcode 0 (QUERY), rcode 0 messages teach anything (rcode != 0: `Ok(empty)`;
/// QR=0: [`DnsError::NotResponse`]; another opcode: [`DnsError::BadOpcode`]).
///
/// Each (name, address) once, with the largest TTL it was given; records of class IN only; an
/// address record owned by the root name teaches nothing. IPv4-mapped IPv6 addresses in AAAA
/// records are kept as they are (the store canonicalizes them).
pub fn parse_response(msg: &[u8]) -> Result<Vec<Answer>, DnsError> {
    if msg.len() < HEADER_LEN {
        return Err(DnsError::Truncated);
    }
    let flags = be16(msg, 2)?;
    if flags & 0x8000 == 0 {
        return Err(DnsError::NotResponse);
    }
    if (flags >> 11) & 0xf != 0 {
        return Err(DnsError::BadOpcode);
    }
    if flags & 0xf != 0 {
        return Ok(Vec::new());
    }
    let qdcount = be16(msg, 4)?;
    let ancount = usize::from(be16(msg, 6)?);
    let nscount = be16(msg, 8)?;
    let arcount = be16(msg, 10)?;
    if ancount > MAX_ANSWER_RECORDS {
        return Err(DnsError::TooManyRecords);
    }

    let mut pos = HEADER_LEN;
    for _ in 0..qdcount {
        pos = skip_name(msg, pos)?.saturating_add(4);
        if pos > msg.len() {
            return Err(DnsError::Truncated);
        }
    }

    let mut said = Vec::new();
    for _ in 0..ancount {
        let owner_end = skip_name(msg, pos)?;
        let head = record_head(msg, owner_end)?;
        let rdata = msg.get(head.rdata_start..head.rdata_end).ok_or(DnsError::Truncated)?;
        if head.class == CLASS_IN && matches!(head.rtype, TYPE_A | TYPE_AAAA | TYPE_CNAME) {
            let (owner, _) = read_name(msg, pos)?;
            match head.rtype {
                TYPE_A => {
                    let octets: [u8; 4] = rdata.try_into().map_err(|_| DnsError::BadRdata)?;
                    said.push(Said::Addr(owner, IpAddr::V4(Ipv4Addr::from(octets)), head.ttl));
                }
                TYPE_AAAA => {
                    let octets: [u8; 16] = rdata.try_into().map_err(|_| DnsError::BadRdata)?;
                    said.push(Said::Addr(owner, IpAddr::V6(Ipv6Addr::from(octets)), head.ttl));
                }
                _ => {
                    let (target, end) = read_name(msg, head.rdata_start)?;
                    if end != head.rdata_end {
                        return Err(DnsError::BadRdata);
                    }
                    said.push(Said::Cname(owner, target, head.ttl));
                }
            }
        }
        pos = head.rdata_end;
    }

    for _ in 0..u32::from(nscount) + u32::from(arcount) {
        let owner_end = skip_name(msg, pos)?;
        pos = record_head(msg, owner_end)?.rdata_end;
    }
    if pos != msg.len() {
        return Err(DnsError::TrailingGarbage);
    }
    facts_of(&said)
}

/// The facts of a message's answer records: each address with its owner and every name that
/// reaches the owner through CNAMEs, breadth first.
fn facts_of(said: &[Said]) -> Result<Vec<Answer>, DnsError> {
    // target -> [(alias, ttl)]
    let mut aliases: HashMap<&str, Vec<(&str, u32)>> = HashMap::new();
    for s in said {
        if let Said::Cname(owner, target, ttl) = s {
            if !owner.is_empty() && !target.is_empty() && owner != target {
                aliases.entry(target.as_str()).or_default().push((owner.as_str(), *ttl));
            }
        }
    }
    let mut out: Vec<Answer> = Vec::new();
    let mut index: HashMap<(&str, IpAddr), usize> = HashMap::new();
    let mut seen: HashSet<&str> = HashSet::new();
    let mut queue: VecDeque<(&str, u32, usize)> = VecDeque::new();
    for s in said {
        let Said::Addr(owner, addr, ttl) = s else {
            continue;
        };
        if owner.is_empty() {
            continue;
        }
        seen.clear();
        queue.clear();
        seen.insert(owner.as_str());
        queue.push_back((owner.as_str(), *ttl, 0));
        while let Some((name, ttl, depth)) = queue.pop_front() {
            match index.get(&(name, *addr)) {
                Some(&i) => {
                    if let Some(a) = out.get_mut(i) {
                        a.ttl = a.ttl.max(ttl);
                    }
                }
                None => {
                    if out.len() >= MAX_FACTS_PER_MESSAGE {
                        return Err(DnsError::TooManyRecords);
                    }
                    index.insert((name, *addr), out.len());
                    out.push(Answer { name: name.to_string(), addr: *addr, ttl });
                }
            }
            if depth >= MAX_CNAME_DEPTH {
                continue;
            }
            for &(alias, cname_ttl) in aliases.get(name).map(Vec::as_slice).unwrap_or(&[]) {
                if seen.insert(alias) {
                    queue.push_back((alias, ttl.min(cname_ttl), depth + 1));
                }
            }
        }
    }
    Ok(out)
}

/// A TCP payload: zero or more messages, each after its 2-byte length -> the answers of every
/// complete message, in order, and the error that stopped the walk if any: a message not complete
/// in the payload is [`DnsError::Truncated`] (no reassembly: counted, not learned), a malformed
/// one its own error; messages after an error are not read.
pub fn parse_tcp_payload_partial(payload: &[u8]) -> (Vec<Answer>, Option<DnsError>) {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos < payload.len() {
        let Ok(len) = be16(payload, pos) else {
            return (out, Some(DnsError::Truncated));
        };
        let start = pos.saturating_add(2);
        let end = start.saturating_add(usize::from(len));
        let Some(msg) = payload.get(start..end) else {
            return (out, Some(DnsError::Truncated));
        };
        match parse_response(msg) {
            Ok(answers) => out.extend(answers),
            Err(e) => return (out, Some(e)),
        }
        pos = end;
    }
    (out, None)
}

/// A TCP payload: zero or more length-prefixed messages; a message not complete in the payload
/// is `Err(Truncated)` (no reassembly: counted, not learned), a malformed one its error. Returns
/// the answers of all messages when every one is complete and well formed
/// ([`parse_tcp_payload_partial`] keeps those before an error).
pub fn parse_tcp_payload(payload: &[u8]) -> Result<Vec<Answer>, DnsError> {
    match parse_tcp_payload_partial(payload) {
        (answers, None) => Ok(answers),
        (_, Some(e)) => Err(e),
    }
}
