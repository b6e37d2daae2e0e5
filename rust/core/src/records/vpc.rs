//! AWS VPC Flow Logs as text: space-separated fields, in the default order (version 2's
//! fourteen) or in the custom order the file's first line names (`version account-id ...`, as
//! logs delivered to S3 begin; versions 2 to 5 add fields, never change one).
//!
//! A VPC record is one direction of traffic through one network interface; its connection's
//! other direction is another record. Which end opened it: with `tcp-flags` (version 3), a
//! record whose flags hold SYN without ACK is the opening side; else the ports decide as
//! [`looks_like_reply`](super::looks_like_reply) says (a service port to an ephemeral one is
//! the reply, turned around). `pkt-srcaddr`/`pkt-dstaddr`, when present, are the packet's own addresses
//! (behind NAT, or a pod's secondary address) and are used instead of `srcaddr`/`dstaddr`.

use std::net::IpAddr;

use super::text::{excerpt, LineParser};
use super::{
    looks_like_reply, FlowCounts, NameTable, Problems, Record, RecordBatch, NO_NAME, ORIENT_STATED, REPORTED_ALLOW,
    REPORTED_DENY, REPORTED_NONE,
};

/// Version 2's fields, the order of a log without a header line.
pub const DEFAULT_FIELDS: &[&str] = &[
    "version", "account-id", "interface-id", "srcaddr", "dstaddr", "srcport", "dstport", "protocol", "packets",
    "bytes", "start", "end", "action", "log-status",
];

/// Every field of versions 2 to 5 (the names AWS publishes; Parquet and Athena spell `-` as `_`).
pub const KNOWN_FIELDS: &[&str] = &[
    "version", "account-id", "interface-id", "srcaddr", "dstaddr", "srcport", "dstport", "protocol", "packets",
    "bytes", "start", "end", "action", "log-status", "vpc-id", "subnet-id", "instance-id", "tcp-flags", "type",
    "pkt-srcaddr", "pkt-dstaddr", "region", "az-id", "sublocation-type", "sublocation-id", "pkt-src-aws-service",
    "pkt-dst-aws-service", "flow-direction", "traffic-path", "ecs-cluster-arn", "ecs-cluster-name",
    "ecs-container-instance-arn", "ecs-container-instance-id", "ecs-container-id", "ecs-second-container-id",
    "ecs-service-name", "ecs-task-definition-arn", "ecs-task-arn", "ecs-task-id", "reject-reason",
    "resource-id", "encryption-status",
];

/// The most fields a line is read for.
const MAX_FIELDS: usize = 64;

#[derive(Clone, Copy, Default)]
struct Columns {
    srcaddr: Option<usize>,
    dstaddr: Option<usize>,
    pkt_srcaddr: Option<usize>,
    pkt_dstaddr: Option<usize>,
    srcport: Option<usize>,
    dstport: Option<usize>,
    protocol: Option<usize>,
    packets: Option<usize>,
    bytes: Option<usize>,
    start: Option<usize>,
    end: Option<usize>,
    action: Option<usize>,
    log_status: Option<usize>,
    tcp_flags: Option<usize>,
    count: usize,
}

impl Columns {
    fn of(fields: &[&str]) -> Columns {
        let at = |name: &str| fields.iter().position(|f| f.replace('_', "-") == name);
        Columns {
            srcaddr: at("srcaddr"),
            dstaddr: at("dstaddr"),
            pkt_srcaddr: at("pkt-srcaddr"),
            pkt_dstaddr: at("pkt-dstaddr"),
            srcport: at("srcport"),
            dstport: at("dstport"),
            protocol: at("protocol"),
            packets: at("packets"),
            bytes: at("bytes"),
            start: at("start"),
            end: at("end"),
            action: at("action"),
            log_status: at("log-status"),
            tcp_flags: at("tcp-flags"),
            count: fields.len(),
        }
    }
}

/// AWS VPC Flow Logs (text).
#[derive(Default)]
pub struct Vpc {
    columns: Option<Columns>,
}

fn field<'a>(tokens: &[&'a str], at: Option<usize>) -> Option<&'a str> {
    at.and_then(|i| tokens.get(i)).copied().filter(|t| *t != "-")
}

impl LineParser for Vpc {
    fn line(&mut self, line: &[u8], number: u64, out: &mut RecordBatch, _names: &mut NameTable, problems: &mut Problems) {
        let Ok(text) = std::str::from_utf8(line) else {
            problems.add("bad_field", number, || format!("not UTF-8: {}", excerpt(line)));
            return;
        };
        // on the stack: no version has more fields than this (a longer line is not a record)
        let mut held = [""; MAX_FIELDS];
        let mut total = 0usize;
        for t in text.split_ascii_whitespace() {
            if total < MAX_FIELDS {
                held[total] = t;
            }
            total += 1;
        }
        let tokens = &held[..total.min(MAX_FIELDS)];
        if self.columns.is_none() {
            let header = total <= MAX_FIELDS && tokens.iter().all(|t| KNOWN_FIELDS.contains(&t.replace('_', "-").as_str()));
            if header {
                let cols = Columns::of(tokens);
                if cols.srcaddr.is_none() && cols.pkt_srcaddr.is_none() || cols.dstaddr.is_none() && cols.pkt_dstaddr.is_none() || cols.protocol.is_none() {
                    problems.add("unknown_field_order", number, || {
                        format!("the header names no source or destination address or no protocol: {}", excerpt(line))
                    });
                }
                self.columns = Some(cols);
                return;
            }
            // A record in the default order starts with its version number: a first line that
            // does not is a header naming fields no version has.
            if tokens.first().is_some_and(|t| t.parse::<u8>().is_err()) {
                problems.add("unknown_field_order", number, || format!("a header with fields no VPC Flow Logs version has: {}", excerpt(line)));
                self.columns = Some(Columns::default());
                return;
            }
            self.columns = Some(Columns::of(DEFAULT_FIELDS));
        }
        let c = self.columns.expect("set above");
        if c.count == 0 {
            problems.add("unknown_field_order", number, || "the field order is not known: skipped".into());
            return;
        }
        if total != c.count {
            problems.add("truncated_record", number, || format!("{} fields, the header names {}: {}", total, c.count, excerpt(line)));
            return;
        }
        if let Some(status) = field(tokens, c.log_status) {
            if status != "OK" {
                // NODATA / SKIPDATA: a capture window without records, or with records lost.
                problems.add(if status == "SKIPDATA" { "skipdata" } else { "nodata" }, number, || format!("log-status {status}"));
                return;
            }
        }
        let addr = |pkt: Option<usize>, plain: Option<usize>| -> Option<IpAddr> {
            field(tokens, pkt).or(field(tokens, plain)).and_then(|t| t.parse().ok())
        };
        let (Some(src), Some(dst)) = (addr(c.pkt_srcaddr, c.srcaddr), addr(c.pkt_dstaddr, c.dstaddr)) else {
            problems.add("bad_address", number, || format!("no source or destination address: {}", excerpt(line)));
            return;
        };
        let num = |at: Option<usize>| field(tokens, at).and_then(|t| t.parse::<u64>().ok());
        let Some(protocol) = num(c.protocol).filter(|&p| p < 256) else {
            problems.add("bad_field", number, || format!("protocol is not a protocol number: {}", excerpt(line)));
            return;
        };
        let (start, end) = (num(c.start).unwrap_or(0), num(c.end).unwrap_or(0));
        if end < start {
            problems.add("end_before_start", number, || format!("end {end} is before start {start}"));
        }
        let fields = Fields {
            src,
            dst,
            protocol: protocol as u8,
            sport: num(c.srcport).unwrap_or(0) as u16,
            dport: num(c.dstport).unwrap_or(0) as u16,
            packets: num(c.packets).unwrap_or(0),
            bytes: num(c.bytes).unwrap_or(0),
            start,
            end,
            action: match field(tokens, c.action) {
                Some("ACCEPT") => REPORTED_ALLOW,
                Some("REJECT") => REPORTED_DENY,
                _ => REPORTED_NONE,
            },
            tcp_flags: num(c.tcp_flags),
            position: number,
        };
        fields.record().push(out);
    }
}

/// What judging reads of one VPC record, from text or from Parquet columns.
pub struct Fields {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub protocol: u8,
    pub sport: u16,
    pub dport: u16,
    pub packets: u64,
    pub bytes: u64,
    /// seconds since the epoch
    pub start: u64,
    pub end: u64,
    /// `REPORTED_*` of the record's action
    pub action: u8,
    pub tcp_flags: Option<u64>,
    /// line, or row from 1
    pub position: u64,
}

impl Fields {
    /// The record, turned to its opening direction (see the module doc).
    pub fn record(self) -> Record {
        let sec = 1_000_000_000u64;
        let mut r = Record {
            src: Some(self.src),
            dst: Some(self.dst),
            protocol: self.protocol,
            sport: self.sport,
            dport: self.dport,
            counts: FlowCounts {
                first_ns: self.start.saturating_mul(sec),
                last_ns: self.end.saturating_mul(sec),
                packets: self.packets,
                bytes: self.bytes,
                flows: 1,
                position: self.position,
                src_name: NO_NAME,
                dst_name: NO_NAME,
                reported: self.action,
                ..Default::default()
            },
            ..Default::default()
        };
        // tcp-flags are OR'ed over the capture window: SYN without ACK is only ever the opening
        // side's (both sides' windows hold SYN and ACK once the handshake is through).
        let syn_only = r.protocol == 6 && self.tcp_flags.is_some_and(|f| f & 0x12 == 0x02);
        if syn_only {
            r.counts.orientation = ORIENT_STATED;
        } else if looks_like_reply(r.sport, r.dport) {
            r.reverse();
            r.counts.flows = 0; // the request's own record counts the connection
        }
        if r.protocol == 1 || r.protocol == 58 {
            // VPC records carry no ICMP type: judged as an echo request.
            r.icmp_type = if r.protocol == 1 { 8 } else { 128 };
        }
        r
    }
}


/// A column of text as Arrow holds it (`large_string`): 64-bit little-endian offsets into
/// `data`, an optional validity bitmap, and the array's offset into both.
pub struct TextColumn<'a> {
    pub offsets: &'a [u8],
    pub data: &'a [u8],
    pub valid: Option<&'a [u8]>,
    pub offset: usize,
    /// Bytes an offset takes: 4 (Arrow `string`) or 8 (`large_string`).
    pub width: usize,
}

impl TextColumn<'_> {
    /// Row `i`'s text; None when null, out of bounds, `-` or empty.
    #[inline]
    pub fn get(&self, i: usize) -> Option<&'_ str> {
        let k = self.offset + i;
        if let Some(v) = self.valid {
            if v.get(k / 8).is_none_or(|b| b >> (k % 8) & 1 == 0) {
                return None;
            }
        }
        let at = |j: usize| -> Option<usize> {
            if self.width == 4 {
                let b = self.offsets.get(4 * j..4 * j + 4)?;
                return usize::try_from(i32::from_le_bytes(b.try_into().ok()?)).ok();
            }
            let b = self.offsets.get(8 * j..8 * j + 8)?;
            usize::try_from(i64::from_le_bytes(b.try_into().ok()?)).ok()
        };
        let (start, end) = (at(k)?, at(k + 1)?);
        let t = std::str::from_utf8(self.data.get(start..end)?).ok()?;
        (!t.is_empty() && t != "-").then_some(t)
    }
}

/// VPC Flow Logs as Parquet columns (VPC's field names, `_` for `-`), a batch of `rows` rows
/// of which the first is row `first_row` (from 1): the same records and problems the text
/// reader makes of the same fields. Integer columns are int64, nulls as 0.
#[derive(Default)]
pub struct ColumnBatch<'a> {
    pub srcaddr: Option<TextColumn<'a>>,
    pub dstaddr: Option<TextColumn<'a>>,
    pub pkt_srcaddr: Option<TextColumn<'a>>,
    pub pkt_dstaddr: Option<TextColumn<'a>>,
    pub action: Option<TextColumn<'a>>,
    pub log_status: Option<TextColumn<'a>>,
    pub srcport: Option<&'a [i64]>,
    pub dstport: Option<&'a [i64]>,
    pub protocol: Option<&'a [i64]>,
    pub packets: Option<&'a [i64]>,
    pub bytes: Option<&'a [i64]>,
    pub start: Option<&'a [i64]>,
    pub end: Option<&'a [i64]>,
    pub tcp_flags: Option<&'a [i64]>,
}

fn text<'c>(c: &'c Option<TextColumn<'_>>, i: usize) -> Option<&'c str> {
    c.as_ref().and_then(|c| c.get(i))
}

impl ColumnBatch<'_> {
    pub fn read(&self, rows: usize, first_row: u64, out: &mut RecordBatch, problems: &mut Problems) {
        let int = |c: Option<&[i64]>, i: usize| c.and_then(|c| c.get(i)).map(|&v| v.max(0) as u64);
        for i in 0..rows {
            let number = first_row + i as u64;
            if let Some(status) = text(&self.log_status, i) {
                if status != "OK" {
                    problems.add(if status == "SKIPDATA" { "skipdata" } else { "nodata" }, number, || format!("log-status {status}"));
                    continue;
                }
            }
            let addr = |pkt: &Option<TextColumn<'_>>, plain: &Option<TextColumn<'_>>| -> Option<IpAddr> {
                text(pkt, i).and_then(|t| t.parse().ok()).or_else(|| text(plain, i).and_then(|t| t.parse().ok()))
            };
            let (Some(src), Some(dst)) = (addr(&self.pkt_srcaddr, &self.srcaddr), addr(&self.pkt_dstaddr, &self.dstaddr)) else {
                problems.add("bad_address", number, || "no source or destination address".into());
                continue;
            };
            let Some(protocol) = self.protocol.and_then(|c| c.get(i)).copied().filter(|p| (0..256).contains(p)) else {
                problems.add("bad_field", number, || "protocol is not a protocol number".into());
                continue;
            };
            let (start, end) = (int(self.start, i).unwrap_or(0), int(self.end, i).unwrap_or(0));
            if end < start {
                problems.add("end_before_start", number, || format!("end {end} is before start {start}"));
            }
            Fields {
                src,
                dst,
                protocol: protocol as u8,
                sport: int(self.srcport, i).unwrap_or(0) as u16,
                dport: int(self.dstport, i).unwrap_or(0) as u16,
                packets: int(self.packets, i).unwrap_or(0),
                bytes: int(self.bytes, i).unwrap_or(0),
                start,
                end,
                action: match text(&self.action, i) {
                    Some("ACCEPT") => REPORTED_ALLOW,
                    Some("REJECT") => REPORTED_DENY,
                    _ => REPORTED_NONE,
                },
                tcp_flags: self.tcp_flags.is_some().then(|| int(self.tcp_flags, i)).flatten(),
                position: number,
            }
            .record()
            .push(out);
        }
    }
}
