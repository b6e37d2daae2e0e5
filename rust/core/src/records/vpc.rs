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
    "version",
    "account-id",
    "interface-id",
    "srcaddr",
    "dstaddr",
    "srcport",
    "dstport",
    "protocol",
    "packets",
    "bytes",
    "start",
    "end",
    "action",
    "log-status",
];

/// Every field of versions 2 to 5 (the names AWS publishes; Parquet and Athena spell `-` as `_`).
pub const KNOWN_FIELDS: &[&str] = &[
    "version",
    "account-id",
    "interface-id",
    "srcaddr",
    "dstaddr",
    "srcport",
    "dstport",
    "protocol",
    "packets",
    "bytes",
    "start",
    "end",
    "action",
    "log-status",
    "vpc-id",
    "subnet-id",
    "instance-id",
    "tcp-flags",
    "type",
    "pkt-srcaddr",
    "pkt-dstaddr",
    "region",
    "az-id",
    "sublocation-type",
    "sublocation-id",
    "pkt-src-aws-service",
    "pkt-dst-aws-service",
    "flow-direction",
    "traffic-path",
    "ecs-cluster-arn",
    "ecs-cluster-name",
    "ecs-container-instance-arn",
    "ecs-container-instance-id",
    "ecs-container-id",
    "ecs-second-container-id",
    "ecs-service-name",
    "ecs-task-definition-arn",
    "ecs-task-arn",
    "ecs-task-id",
    "reject-reason",
    "resource-id",
    "encryption-status",
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
    fn line(
        &mut self,
        line: &[u8],
        number: u64,
        out: &mut RecordBatch,
        _names: &mut NameTable,
        problems: &mut Problems,
    ) {
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
            let header =
                total <= MAX_FIELDS && tokens.iter().all(|t| KNOWN_FIELDS.contains(&t.replace('_', "-").as_str()));
            if header {
                let cols = Columns::of(tokens);
                if cols.srcaddr.is_none() && cols.pkt_srcaddr.is_none()
                    || cols.dstaddr.is_none() && cols.pkt_dstaddr.is_none()
                    || cols.protocol.is_none()
                {
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
                problems.add("unknown_field_order", number, || {
                    format!("a header with fields no VPC Flow Logs version has: {}", excerpt(line))
                });
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
            problems.add("truncated_record", number, || {
                format!("{} fields, the header names {}: {}", total, c.count, excerpt(line))
            });
            return;
        }
        if let Some(status) = field(tokens, c.log_status) {
            if status != "OK" {
                // NODATA / SKIPDATA: a capture window without records, or with records lost.
                problems.add(if status == "SKIPDATA" { "skipdata" } else { "nodata" }, number, || {
                    format!("log-status {status}")
                });
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

fn bit(bits: Option<&[u8]>, k: usize) -> bool {
    bits.is_none_or(|v| v.get(k / 8).is_some_and(|b| b >> (k % 8) & 1 == 1))
}

/// Arrow strings (`string` or `large_string`): offsets of `width` bytes into `data`, an
/// optional validity bitmap, and the array's offset into both.
#[derive(Clone, Copy)]
pub struct Strings<'a> {
    pub offsets: &'a [u8],
    pub data: &'a [u8],
    pub valid: Option<&'a [u8]>,
    pub offset: usize,
    /// Bytes an offset takes: 4 (Arrow `string`) or 8 (`large_string`).
    pub width: usize,
}

impl<'a> Strings<'a> {
    /// Entry `i`'s text; None when null, out of bounds, not UTF-8, `-` or empty.
    #[inline]
    pub fn get(&self, i: usize) -> Option<&'a str> {
        let k = self.offset + i;
        if !bit(self.valid, k) {
            return None;
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

    /// How many entries the offsets hold from the array's offset on.
    pub fn len(&self) -> usize {
        (self.offsets.len() / self.width.max(1)).saturating_sub(self.offset + 1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A text column of Parquet as Arrow reads it: strings row by row, or dictionary-encoded
/// (as Parquet writers store such columns) — each row an int32 index into a dictionary of
/// distinct strings, so that what a row's text means is worked out once per entry.
#[derive(Clone, Copy)]
pub enum TextColumn<'a> {
    Plain(Strings<'a>),
    Dictionary {
        values: Strings<'a>,
        /// int32 little-endian
        indices: &'a [u8],
        valid: Option<&'a [u8]>,
        offset: usize,
    },
}

impl<'a> TextColumn<'a> {
    /// Row `i`'s dictionary entry (None: null, or an index out of the dictionary).
    #[inline]
    fn index(indices: &[u8], valid: Option<&[u8]>, k: usize) -> Option<usize> {
        if !bit(valid, k) {
            return None;
        }
        let b = indices.get(4 * k..4 * k + 4)?;
        usize::try_from(i32::from_le_bytes(b.try_into().ok()?)).ok()
    }

    /// Row `i`'s text; None when null, out of bounds, `-` or empty.
    #[inline]
    pub fn get(&self, i: usize) -> Option<&'a str> {
        match self {
            TextColumn::Plain(s) => s.get(i),
            TextColumn::Dictionary { values, indices, valid, offset } => {
                Self::index(indices, *valid, offset + i).and_then(|e| values.get(e))
            }
        }
    }
}

/// A text column read for one meaning (an address, an action...): `read` gives row `i`'s,
/// from a table of the dictionary's entries, each worked out once, or from the row's text.
struct Meaning<'c, 'a, T> {
    column: Option<&'c TextColumn<'a>>,
    of: fn(Option<&str>) -> T,
    table: Vec<T>,
    missing: T,
}

impl<'c, 'a, T: Copy> Meaning<'c, 'a, T> {
    fn new(column: &'c Option<TextColumn<'a>>, of: fn(Option<&str>) -> T) -> Self {
        let table = match column {
            Some(TextColumn::Dictionary { values, .. }) => (0..values.len()).map(|e| of(values.get(e))).collect(),
            _ => Vec::new(),
        };
        Meaning { column: column.as_ref(), of, table, missing: of(None) }
    }

    #[inline]
    fn read(&self, i: usize) -> T {
        match self.column {
            None => self.missing,
            Some(TextColumn::Plain(s)) => (self.of)(s.get(i)),
            Some(TextColumn::Dictionary { indices, valid, offset, .. }) => {
                TextColumn::index(indices, *valid, offset + i)
                    .and_then(|e| self.table.get(e).copied())
                    .unwrap_or(self.missing)
            }
        }
    }
}

/// An integer column as Arrow holds it: little-endian values of `width` bytes (4: int32,
/// 8: int64), an optional validity bitmap, and the array's offset into both.
#[derive(Clone, Copy)]
pub struct IntColumn<'a> {
    pub data: &'a [u8],
    pub valid: Option<&'a [u8]>,
    pub offset: usize,
    pub width: usize,
}

impl IntColumn<'_> {
    /// Row `i`'s value; None when null or out of bounds.
    #[inline]
    pub fn get(&self, i: usize) -> Option<i64> {
        let k = self.offset + i;
        if !bit(self.valid, k) {
            return None;
        }
        if self.width == 4 {
            let b = self.data.get(4 * k..4 * k + 4)?;
            return Some(i32::from_le_bytes(b.try_into().ok()?) as i64);
        }
        let b = self.data.get(8 * k..8 * k + 8)?;
        Some(i64::from_le_bytes(b.try_into().ok()?))
    }
}

/// VPC Flow Logs as Parquet columns (VPC's field names, `_` for `-`), a batch of `rows` rows
/// of which the first is row `first_row` (from 1): the same records and problems the text
/// reader makes of the same fields (a null is the text's `-`).
#[derive(Default)]
pub struct ColumnBatch<'a> {
    pub srcaddr: Option<TextColumn<'a>>,
    pub dstaddr: Option<TextColumn<'a>>,
    pub pkt_srcaddr: Option<TextColumn<'a>>,
    pub pkt_dstaddr: Option<TextColumn<'a>>,
    pub action: Option<TextColumn<'a>>,
    pub log_status: Option<TextColumn<'a>>,
    pub srcport: Option<IntColumn<'a>>,
    pub dstport: Option<IntColumn<'a>>,
    pub protocol: Option<IntColumn<'a>>,
    pub packets: Option<IntColumn<'a>>,
    pub bytes: Option<IntColumn<'a>>,
    pub start: Option<IntColumn<'a>>,
    pub end: Option<IntColumn<'a>>,
    pub tcp_flags: Option<IntColumn<'a>>,
}

const STATUS_OK: u8 = 0;
const STATUS_NODATA: u8 = 1;
const STATUS_SKIPDATA: u8 = 2;

fn status_of(t: Option<&str>) -> u8 {
    match t {
        None | Some("OK") => STATUS_OK,
        Some("SKIPDATA") => STATUS_SKIPDATA,
        Some(_) => STATUS_NODATA,
    }
}

fn action_of(t: Option<&str>) -> u8 {
    match t {
        Some("ACCEPT") => REPORTED_ALLOW,
        Some("REJECT") => REPORTED_DENY,
        _ => REPORTED_NONE,
    }
}

fn address_of(t: Option<&str>) -> Option<IpAddr> {
    t.and_then(|t| t.parse().ok())
}

impl ColumnBatch<'_> {
    pub fn read(&self, rows: usize, first_row: u64, out: &mut RecordBatch, problems: &mut Problems) {
        let int = |c: &Option<IntColumn<'_>>, i: usize| c.as_ref().and_then(|c| c.get(i));
        let uint = |c: &Option<IntColumn<'_>>, i: usize| int(c, i).map(|v| v.max(0) as u64);
        let status = Meaning::new(&self.log_status, status_of);
        let action = Meaning::new(&self.action, action_of);
        let (pkt_src, src) = (Meaning::new(&self.pkt_srcaddr, address_of), Meaning::new(&self.srcaddr, address_of));
        let (pkt_dst, dst) = (Meaning::new(&self.pkt_dstaddr, address_of), Meaning::new(&self.dstaddr, address_of));
        out.headers.reserve(rows);
        out.counts.reserve(rows);
        for i in 0..rows {
            let number = first_row + i as u64;
            let s = status.read(i);
            if s != STATUS_OK {
                let text = self.log_status.as_ref().and_then(|c| c.get(i)).unwrap_or_default();
                problems.add(if s == STATUS_SKIPDATA { "skipdata" } else { "nodata" }, number, || {
                    format!("log-status {text}")
                });
                continue;
            }
            let (Some(src), Some(dst)) =
                (pkt_src.read(i).or_else(|| src.read(i)), pkt_dst.read(i).or_else(|| dst.read(i)))
            else {
                problems.add("bad_address", number, || "no source or destination address".into());
                continue;
            };
            let Some(protocol) = int(&self.protocol, i).filter(|p| (0..256).contains(p)) else {
                problems.add("bad_field", number, || "protocol is not a protocol number".into());
                continue;
            };
            let (start, end) = (uint(&self.start, i).unwrap_or(0), uint(&self.end, i).unwrap_or(0));
            if end < start {
                problems.add("end_before_start", number, || format!("end {end} is before start {start}"));
            }
            Fields {
                src,
                dst,
                protocol: protocol as u8,
                sport: uint(&self.srcport, i).unwrap_or(0) as u16,
                dport: uint(&self.dstport, i).unwrap_or(0) as u16,
                packets: uint(&self.packets, i).unwrap_or(0),
                bytes: uint(&self.bytes, i).unwrap_or(0),
                start,
                end,
                action: action.read(i),
                tcp_flags: uint(&self.tcp_flags, i),
                position: number,
            }
            .record()
            .push(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Arrow buffers of strings (32-bit offsets, validity) and of a dictionary of them.
    struct Built {
        offsets: Vec<u8>,
        data: Vec<u8>,
        valid: Vec<u8>,
        dict_offsets: Vec<u8>,
        dict_data: Vec<u8>,
        indices: Vec<u8>,
    }

    fn build(rows: &[Option<&str>]) -> Built {
        let mut b = Built {
            offsets: 0i32.to_le_bytes().to_vec(),
            data: vec![],
            valid: vec![0; rows.len().div_ceil(8)],
            dict_offsets: 0i32.to_le_bytes().to_vec(),
            dict_data: vec![],
            indices: vec![],
        };
        let mut entries: Vec<&str> = vec![];
        for (i, r) in rows.iter().enumerate() {
            if let Some(t) = r {
                b.valid[i / 8] |= 1 << (i % 8);
                b.data.extend_from_slice(t.as_bytes());
            }
            b.offsets.extend_from_slice(&(b.data.len() as i32).to_le_bytes());
            let e = match r.and_then(|t| entries.iter().position(|x| *x == t)) {
                Some(e) => e,
                None => {
                    entries.push(r.unwrap_or(""));
                    b.dict_data.extend_from_slice(r.unwrap_or("").as_bytes());
                    b.dict_offsets.extend_from_slice(&(b.dict_data.len() as i32).to_le_bytes());
                    entries.len() - 1
                }
            };
            b.indices.extend_from_slice(&(e as i32).to_le_bytes());
        }
        b
    }

    impl Built {
        fn plain(&self, offset: usize) -> TextColumn<'_> {
            TextColumn::Plain(Strings {
                offsets: &self.offsets,
                data: &self.data,
                valid: Some(&self.valid),
                offset,
                width: 4,
            })
        }

        fn column(&self, dictionary: bool, offset: usize) -> Option<TextColumn<'_>> {
            Some(if dictionary { self.dictionary(offset) } else { self.plain(offset) })
        }

        fn dictionary(&self, offset: usize) -> TextColumn<'_> {
            let values =
                Strings { offsets: &self.dict_offsets, data: &self.dict_data, valid: None, offset: 0, width: 4 };
            TextColumn::Dictionary { values, indices: &self.indices, valid: Some(&self.valid), offset }
        }
    }

    fn read(batch: &ColumnBatch<'_>, rows: usize) -> (RecordBatch, Problems) {
        let (mut out, mut problems) = (RecordBatch::default(), Problems::default());
        batch.read(rows, 7, &mut out, &mut problems);
        (out, problems)
    }

    #[test]
    fn dictionary_columns_read_as_their_strings() {
        let src = build(&[
            Some("10.0.0.1"),
            Some("10.0.0.1"),
            None,
            Some("-"),
            Some("fd00::1"),
            Some("10.0.0.1"),
            Some("x"),
            Some("10.0.0.2"),
        ]);
        let dst = build(&[
            Some("10.0.0.9"),
            Some("10.0.0.8"),
            Some("10.0.0.9"),
            Some("10.0.0.9"),
            Some("fd00::2"),
            Some("10.0.0.9"),
            Some("10.0.0.9"),
            Some("10.0.0.9"),
        ]);
        let action = build(&[
            Some("ACCEPT"),
            Some("REJECT"),
            None,
            Some("ACCEPT"),
            Some("ACCEPT"),
            Some("ACCEPT"),
            Some("REJECT"),
            Some("?"),
        ]);
        let status = build(&[
            Some("OK"),
            Some("OK"),
            Some("OK"),
            Some("OK"),
            None,
            Some("NODATA"),
            Some("OK"),
            Some("SKIPDATA"),
        ]);
        let protocol: Vec<u8> = [6i32, 17, 6, 6, 58, 6, 6, 6].iter().flat_map(|v| v.to_le_bytes()).collect();
        let ports: Vec<u8> = [443i64, 40000, 80, 80, 0, 80, 80, 80].iter().flat_map(|v| v.to_le_bytes()).collect();
        let port_valid = [0b1111_1101u8];
        for offset in [0, 3] {
            let rows = 8 - offset;
            let batch = |dict: bool| ColumnBatch {
                srcaddr: src.column(dict, offset),
                dstaddr: dst.column(dict, offset),
                action: action.column(dict, offset),
                log_status: status.column(dict, offset),
                protocol: Some(IntColumn { data: &protocol, valid: None, offset, width: 4 }),
                dstport: Some(IntColumn { data: &ports, valid: Some(&port_valid), offset, width: 8 }),
                ..Default::default()
            };
            let (plain, p_plain) = read(&batch(false), rows);
            let (dict, p_dict) = read(&batch(true), rows);
            assert_eq!((&plain.headers, &plain.counts), (&dict.headers, &dict.counts), "offset {offset}");
            assert_eq!(p_plain.counts, p_dict.counts);
            assert_eq!(p_plain.first, p_dict.first);
            if offset == 0 {
                // rows 3 (null), 4 (`-`) and 7 (not an address) have no source; 6 and 8 a log status
                assert_eq!(p_dict.counts.get("bad_address"), Some(&3));
                assert_eq!(p_dict.counts.get("nodata"), Some(&1));
                assert_eq!(p_dict.counts.get("skipdata"), Some(&1));
                assert_eq!(plain.counts.iter().map(|c| c.position).collect::<Vec<_>>(), [7, 8, 11]);
            }
        }
    }

    #[test]
    fn an_index_out_of_the_dictionary_is_a_missing_value() {
        let b = build(&[Some("10.0.0.1")]);
        let bad = 5i32.to_le_bytes();
        let values = Strings { offsets: &b.dict_offsets, data: &b.dict_data, valid: None, offset: 0, width: 4 };
        let col = TextColumn::Dictionary { values, indices: &bad, valid: None, offset: 0 };
        assert_eq!(col.get(0), None);
        assert_eq!(col.get(1), None);
        let protocol = 6i64.to_le_bytes();
        let batch = ColumnBatch {
            srcaddr: Some(col),
            dstaddr: Some(col),
            protocol: Some(IntColumn { data: &protocol, valid: None, offset: 0, width: 8 }),
            ..Default::default()
        };
        let (out, problems) = read(&batch, 2);
        assert!(out.is_empty());
        assert_eq!(problems.counts.get("bad_address"), Some(&2));
    }
}
