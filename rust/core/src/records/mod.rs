//! Flow records: connections (or aggregates of them) with counts, as flow exporters write them,
//! read into the header batch the engine judges, with a parallel array of [`FlowCounts`].
//!
//! A record is judged once, as the packet that opens its connection: [`PacketHeader`] holds the
//! opening direction's 5-tuple (a record of the reply direction is turned around, each format
//! saying how it knows), `ts_ns` its first time; [`FlowCounts`] holds what the record counted
//! and the verdict it reports itself. Readers take input in chunks of any size and keep only
//! the incomplete record at a chunk's end, so memory stays flat in the size of the input.
//!
//! - [`json`]: JSON lines: Cilium Hubble flows, Calico flow logs and Goldmane flows.
//! - [`vpc`]: AWS VPC Flow Logs, text (default and custom field orders, versions 2 to 5).
//! - [`conntrack`]: `conntrack -L` / `conntrack -E` output.
//! - [`netflow`]: NetFlow v5, v9 and IPFIX messages, back to back (RFC 5655's file format).
//! - [`detect`]: which of these a file's first bytes are.
//! - [`judge`]: records judged with each distinct decision made once, summed as they go.
//! - [`tally`]: the verdicts summed, weighted by what each record counted.

pub mod conntrack;
pub mod detect;
pub mod json;
pub mod judge;
pub mod keytable;
pub mod lines;
pub mod netflow;
pub mod tally;
pub mod text;
pub mod time;
pub mod vpc;

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use crate::batch::{PacketHeader, FLAG_HAS_PORTS};

pub use detect::{detect, Format};

/// `FlowCounts::src_name`/`dst_name` of a record that names no endpoint.
pub const NO_NAME: u32 = u32::MAX;

/// Values of `FlowCounts::reported`: the verdict the record carries itself.
pub const REPORTED_NONE: u8 = 0;
pub const REPORTED_ALLOW: u8 = 1;
pub const REPORTED_DENY: u8 = 2;
/// A verdict that is neither (Hubble's AUDIT, ERROR, ...; Goldmane's Pass).
pub const REPORTED_OTHER: u8 = 3;

/// Values of `FlowCounts::reported_at`: which end's decision the reported verdict is.
pub const REPORTED_AT_CONNECTION: u8 = 0;
pub const REPORTED_AT_EGRESS: u8 = 1;
pub const REPORTED_AT_INGRESS: u8 = 2;

/// Values of `FlowCounts::orientation`: how the opening direction was found.
pub const ORIENT_AS_RECORDED: u8 = 0;
/// The record says it is the opening direction (Hubble `is_reply` false, conntrack's original
/// tuple, a NetFlow/VPC record whose TCP flags hold SYN without ACK).
pub const ORIENT_STATED: u8 = 1;
/// The record was of the reply direction and is turned around.
pub const ORIENT_REVERSED: u8 = 2;

crate::abi_record! {
/// What one flow record counted, parallel to the `PacketHeader` it is judged as.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowCounts as "FlowCounts" {
    /// First time the record covers, nanoseconds since the Unix epoch (0: unknown).
    pub first_ns: u64,
    /// Last time the record covers, nanoseconds since the Unix epoch (0: unknown).
    pub last_ns: u64,
    /// Packets the record counted, both directions (0: not counted).
    pub packets: u64,
    /// Bytes the record counted, both directions (0: not counted).
    pub bytes: u64,
    /// Connections the record stands for (1 for a single connection).
    pub flows: u64,
    /// Where the record is in its input: line number (text, from 1) or byte offset (binary).
    pub position: u64,
    /// The source's name in the reader's name table (records that name endpoints rather than,
    /// or besides, addresses), or `NO_NAME`.
    pub src_name: u32,
    /// The destination's name in the reader's name table, or `NO_NAME`.
    pub dst_name: u32,
    /// The verdict the record reports: 0 none, 1 allowed, 2 denied, 3 another (audit, pass, error).
    pub reported: u8,
    /// 0 as recorded, 1 stated as the opening direction, 2 turned around (was the reply).
    pub orientation: u8,
    /// 1 when the header's source address is known (else only a name may place it).
    pub has_src: u8,
    /// 1 when the header's destination address is known.
    pub has_dst: u8,
    /// Where the datapath gave `reported`: 0 the connection, 1 the source's egress, 2 the
    /// destination's ingress (Hubble's `traffic_direction`, Calico's `reporter`).
    pub reported_at: u8,
    /// Explicit padding, always 0.
    pub reserved: [u8; 3],
}
}

const _: () = assert!(core::mem::size_of::<FlowCounts>() == 64);

/// An endpoint a record names instead of (or besides) an address: Calico's and Goldmane's
/// `*_name`/`*_namespace`/`*_type`, Hubble's `pod_name`/`namespace`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EndpointName {
    /// `wep` (a pod), `hep` (host endpoint), `ns` (network set), `net` (a network), or "".
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

/// The names records have used, each once, numbered in order of first use.
#[derive(Debug, Default)]
pub struct NameTable {
    index: HashMap<EndpointName, u32>,
    names: Vec<EndpointName>,
}

impl NameTable {
    pub fn intern(&mut self, kind: &str, namespace: &str, name: &str) -> u32 {
        let key = EndpointName { kind: kind.to_owned(), namespace: namespace.to_owned(), name: name.to_owned() };
        if let Some(&i) = self.index.get(&key) {
            return i;
        }
        let i = self.names.len() as u32;
        self.names.push(key.clone());
        self.index.insert(key, i);
        i
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The names from number `from` on.
    pub fn since(&self, from: usize) -> &[EndpointName] {
        &self.names[from.min(self.names.len())..]
    }
}

/// Records that could not be read, or were read with a doubt, counted per reason, with the
/// positions of the first few of each.
#[derive(Debug, Default)]
pub struct Problems {
    pub counts: BTreeMap<&'static str, u64>,
    /// (reason, position, detail) of the first [`Problems::KEPT`] of each reason.
    pub first: Vec<(&'static str, u64, String)>,
}

impl Problems {
    pub const KEPT: u64 = 3;

    pub fn add(&mut self, reason: &'static str, position: u64, detail: impl FnOnce() -> String) {
        let n = self.counts.entry(reason).or_insert(0);
        *n += 1;
        if *n <= Self::KEPT {
            self.first.push((reason, position, detail()));
        }
    }

    /// Adds `other`'s problems to these.
    pub fn merge(&mut self, other: Problems) {
        for (reason, position, detail) in other.first {
            let kept = self.counts.get(reason).copied().unwrap_or(0);
            if kept < Self::KEPT {
                self.first.push((reason, position, detail));
            }
            *self.counts.entry(reason).or_insert(0) += 1;
        }
        for (reason, n) in other.counts {
            let firsts = n.min(Self::KEPT);
            *self.counts.entry(reason).or_insert(0) += n - firsts;
        }
    }

    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }
}

/// What readers write: the header batch, the counts beside it, and the names they use.
#[derive(Debug, Default)]
pub struct RecordBatch {
    pub headers: Vec<PacketHeader>,
    pub counts: Vec<FlowCounts>,
}

impl RecordBatch {
    pub fn len(&self) -> usize {
        self.headers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.headers.is_empty()
    }

    pub fn clear(&mut self) {
        self.headers.clear();
        self.counts.clear();
    }
}

/// One record as a reader has it, before it is written into a batch.
#[derive(Clone, Copy, Debug, Default)]
pub struct Record {
    pub src: Option<IpAddr>,
    pub dst: Option<IpAddr>,
    pub protocol: u8,
    pub sport: u16,
    pub dport: u16,
    pub icmp_type: u8,
    pub icmp_code: u8,
    pub tcp_flags: u8,
    pub counts: FlowCounts,
}

/// IPv4 as IPv4-mapped IPv6, as the header batch stores addresses.
pub fn addr16(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

fn family(ip: Option<IpAddr>) -> Option<u8> {
    ip.map(|a| if a.is_ipv4() { 4 } else { 6 })
}

impl Record {
    /// Turns the record around: the reply direction becomes the opening one.
    pub fn reverse(&mut self) {
        std::mem::swap(&mut self.src, &mut self.dst);
        std::mem::swap(&mut self.sport, &mut self.dport);
        std::mem::swap(&mut self.counts.src_name, &mut self.counts.dst_name);
        self.counts.orientation = ORIENT_REVERSED;
    }

    /// The record as the header it is judged as, and its counts.
    pub fn push(mut self, out: &mut RecordBatch) {
        let mut h = PacketHeader { ts_ns: self.counts.first_ns, protocol: self.protocol, ..Default::default() };
        h.ip_version = family(self.src).or(family(self.dst)).unwrap_or(0);
        if let Some(a) = self.src {
            h.src_addr = addr16(a);
        }
        if let Some(a) = self.dst {
            h.dst_addr = addr16(a);
        }
        if matches!(self.protocol, 6 | 17 | 132 | 136) {
            h.sport = self.sport;
            h.dport = self.dport;
            h.flags |= FLAG_HAS_PORTS;
        }
        if matches!(self.protocol, 1 | 58) {
            h.icmp_type = self.icmp_type;
            h.icmp_code = self.icmp_code;
        }
        // Judged as the packet that opens the connection.
        h.tcp_flags = if self.protocol == 6 { 0x02 } else { 0 };
        self.counts.has_src = self.src.is_some() as u8;
        self.counts.has_dst = self.dst.is_some() as u8;
        out.headers.push(h);
        out.counts.push(self.counts);
    }
}

/// The protocol number of a name or number as exporters write it (`tcp`, `TCP`, `6`).
pub fn protocol_number(text: &str) -> Option<u8> {
    let t = text.trim();
    if let Ok(n) = t.parse::<u8>() {
        return Some(n);
    }
    Some(match t.to_ascii_lowercase().as_str() {
        "tcp" => 6,
        "udp" => 17,
        "icmp" | "icmpv4" => 1,
        "icmpv6" | "ipv6-icmp" | "icmp6" => 58,
        "sctp" => 132,
        "udplite" | "udp-lite" => 136,
        _ => return None,
    })
}

/// Whether a record with these ports looks like the reply of a connection its destination
/// opened: the source port is a service port (below 32768) and the destination port an
/// ephemeral one (32768 and above, Linux's default range starts there), the rule for records
/// that carry no direction.
pub fn looks_like_reply(sport: u16, dport: u16) -> bool {
    sport < 32768 && dport >= 32768
}

/// A reader of one format, fed chunks of its input in order.
pub trait Reader {
    /// Reads what `chunk` completes; records into `out`, problems into `problems`. `last` says
    /// no chunk follows (an incomplete record left over is a problem then).
    fn feed(&mut self, chunk: &[u8], last: bool, out: &mut RecordBatch, names: &mut NameTable, problems: &mut Problems);
}

/// A new reader for `format` (None for formats read elsewhere: pcap, Parquet).
pub fn reader(format: Format) -> Option<Box<dyn Reader + Send + Sync>> {
    Some(match format {
        Format::Hubble => Box::new(text::Lines::new(json::Hubble)),
        Format::Calico => Box::new(text::Lines::new(json::Calico)),
        Format::Vpc => Box::new(text::Lines::new(vpc::Vpc::default())),
        Format::Conntrack => Box::new(text::Lines::new(conntrack::Conntrack)),
        Format::Netflow => Box::new(netflow::Netflow::default()),
        Format::Pcap | Format::Parquet => return None,
    })
}

/// One input read record by record: a format's reader, the names its records use, what went
/// wrong, and the order of its timestamps.
pub struct Stream {
    reader: Box<dyn Reader + Send + Sync>,
    pub names: NameTable,
    pub problems: Problems,
    pub records: u64,
    /// Where each name of `names` is, as the caller placed it: (address, IP version), or None.
    placed: Vec<Option<([u8; 16], u8)>>,
    last_first_ns: u64,
    /// Whether the format is a stream of events in time order (Hubble flows, conntrack
    /// events), where a record earlier than the one before is a problem; aggregating exporters
    /// (NetFlow, VPC, Calico) write records as they expire, in no order of their start.
    ordered: bool,
}

impl Stream {
    pub fn new(format: Format) -> Option<Stream> {
        Some(Stream {
            reader: reader(format)?,
            names: NameTable::default(),
            problems: Problems::default(),
            records: 0,
            placed: Vec::new(),
            last_first_ns: 0,
            ordered: matches!(format, Format::Hubble | Format::Conntrack),
        })
    }

    /// Reads what `chunk` completes into `out` (appended).
    pub fn feed(&mut self, chunk: &[u8], last: bool, out: &mut RecordBatch) {
        let from = out.len();
        self.reader.feed(chunk, last, out, &mut self.names, &mut self.problems);
        for c in out.counts[from..].iter().filter(|_| self.ordered) {
            if c.first_ns != 0 {
                if c.first_ns < self.last_first_ns {
                    let (was, now) = (self.last_first_ns, c.first_ns);
                    self.problems.add("out_of_order", c.position, || {
                        format!(
                            "starts {:.3} s before the record read before it (judged all the same)",
                            (was - now) as f64 / 1e9
                        )
                    });
                }
                self.last_first_ns = self.last_first_ns.max(c.first_ns);
            }
        }
        self.records += (out.len() - from) as u64;
    }

    /// How many names have been placed (`place`); names from there on are new.
    pub fn placed(&self) -> usize {
        self.placed.len()
    }

    /// Places the next names (in order from `placed()`): each an (address, IP version) or None.
    pub fn place(&mut self, found: impl IntoIterator<Item = Option<([u8; 16], u8)>>) {
        self.placed.extend(found);
    }

    /// Gives the records of `batch` that lack an address the one their name was placed at.
    pub fn fill_addresses(&self, batch: &mut RecordBatch) {
        for (h, c) in batch.headers.iter_mut().zip(batch.counts.iter_mut()) {
            if c.has_src != 0 && c.has_dst != 0 {
                continue;
            }
            for src in [true, false] {
                let (has, name) = if src { (&mut c.has_src, c.src_name) } else { (&mut c.has_dst, c.dst_name) };
                if *has != 0 || name == NO_NAME {
                    continue;
                }
                if let Some(Some((addr, version))) = self.placed.get(name as usize) {
                    *has = 1;
                    if src {
                        h.src_addr = *addr;
                    } else {
                        h.dst_addr = *addr;
                    }
                    if h.ip_version == 0 {
                        h.ip_version = *version;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
