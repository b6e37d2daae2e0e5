//! The NetFlow v9 / IPFIX decoder against the maintained crate for the job, `netflow_parser`,
//! on the same message stream: what the choice of a decoder of our own rests on.
//!
//! Run: `cargo bench --manifest-path rust/Cargo.toml -p pyclassify-bench-netflow` (optionally followed by
//! the number of records, e.g. `-- 200000`).
//!
//! The stream is what softflowd or a router's exporter writes: IPFIX messages of 30 records of
//! one template (IPv4 addresses, ports, protocol, TCP flags, packet and byte counts, start and
//! end in milliseconds), its template set in the first message and every 64th after it, back
//! to back as a collector stores them (RFC 5655). Contenders, each judged on records per second:
//! - `ours`: `records::netflow::Netflow`, as `replay --traffic` reads a file: records into a
//!   `RecordBatch` with their opening direction, counts and time range.
//! - `netflow_parser`: `NetflowParser::iter_packets`, every message parsed into its data
//!   records (the crate's own field list per record); and the same with each record brought to
//!   its common form (`as_netflow_common`: addresses, ports, protocol, times), the least a
//!   reader needs. Both decoders must read every record, with the same addresses, ports and
//!   protocols.
//!
//! Figures are best-of-5 wall times on a shared machine: read ratios, not absolutes.

use std::hint::black_box;
use std::net::IpAddr;
use std::time::Instant;

use netflow_parser::{NetflowPacket, NetflowParser};
use pyclassify_core::records::netflow::Netflow;
use pyclassify_core::records::{NameTable, Problems, Reader, RecordBatch};

const RECORDS_PER_MESSAGE: usize = 30;
const TEMPLATE_EVERY: usize = 64;
const TEMPLATE_ID: u16 = 256;
/// (information element, length) of each field of the template.
const FIELDS: [(u16, u16); 10] = [
    (8, 4),   // sourceIPv4Address
    (12, 4),  // destinationIPv4Address
    (7, 2),   // sourceTransportPort
    (11, 2),  // destinationTransportPort
    (4, 1),   // protocolIdentifier
    (6, 1),   // tcpControlBits
    (2, 8),   // packetDeltaCount
    (1, 8),   // octetDeltaCount
    (152, 8), // flowStartMilliseconds
    (153, 8), // flowEndMilliseconds
];
const RECORD_LEN: usize = 46;

/// `records` flow records as IPFIX messages; a deterministic mix of pods talking TCP and UDP,
/// half of them the reply direction.
fn stream(records: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(records * RECORD_LEN + records / RECORDS_PER_MESSAGE * 64);
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut written = 0;
    let mut message = 0usize;
    while written < records {
        let n = RECORDS_PER_MESSAGE.min(records - written);
        let mut body = Vec::new();
        if message.is_multiple_of(TEMPLATE_EVERY) {
            body.extend_from_slice(&2u16.to_be_bytes()); // template set
            body.extend_from_slice(&(4 + 4 + 4 * FIELDS.len() as u16).to_be_bytes());
            body.extend_from_slice(&TEMPLATE_ID.to_be_bytes());
            body.extend_from_slice(&(FIELDS.len() as u16).to_be_bytes());
            for (id, len) in FIELDS {
                body.extend_from_slice(&id.to_be_bytes());
                body.extend_from_slice(&len.to_be_bytes());
            }
        }
        body.extend_from_slice(&TEMPLATE_ID.to_be_bytes());
        body.extend_from_slice(&((4 + n * RECORD_LEN) as u16).to_be_bytes());
        for _ in 0..n {
            let r = next();
            let (client, server) = (0x0a00_0000 | (r as u32 & 0xffff), 0x0a01_0000 | ((r >> 16) as u32 & 0x3fff));
            let (ephemeral, service) =
                (32768 + (r >> 32) as u16 % 28000, [80u16, 443, 5432, 53][(r >> 48) as usize % 4]);
            let udp = service == 53;
            let reply = r >> 63 == 1;
            let (src, dst, sport, dport) =
                if reply { (server, client, service, ephemeral) } else { (client, server, ephemeral, service) };
            body.extend_from_slice(&src.to_be_bytes());
            body.extend_from_slice(&dst.to_be_bytes());
            body.extend_from_slice(&sport.to_be_bytes());
            body.extend_from_slice(&dport.to_be_bytes());
            body.push(if udp { 17 } else { 6 });
            body.push(if udp {
                0
            } else if reply {
                0x12
            } else {
                0x02
            });
            body.extend_from_slice(&(1 + (r & 0xff)).to_be_bytes());
            body.extend_from_slice(&(64 + (r & 0xffff)).to_be_bytes());
            let start = 1_714_557_600_000u64 + written as u64;
            body.extend_from_slice(&start.to_be_bytes());
            body.extend_from_slice(&(start + (r & 0x3ff)).to_be_bytes());
        }
        out.extend_from_slice(&10u16.to_be_bytes());
        out.extend_from_slice(&((16 + body.len()) as u16).to_be_bytes());
        out.extend_from_slice(&1_714_557_600u32.to_be_bytes()); // export time
        out.extend_from_slice(&(written as u32).to_be_bytes()); // sequence: records before
        out.extend_from_slice(&7u32.to_be_bytes()); // observation domain
        out.extend_from_slice(&body);
        written += n;
        message += 1;
    }
    out
}

/// What both decoders must agree on, whichever direction a record is turned to: the sum over
/// records of the two addresses and the two ports, each pair XORed, and the protocol.
fn digest(src: u32, dst: u32, sport: u16, dport: u16, protocol: u8) -> u64 {
    u64::from(src ^ dst) + u64::from(sport ^ dport) + u64::from(protocol)
}

fn v4(addr: [u8; 16]) -> u32 {
    u32::from_be_bytes([addr[12], addr[13], addr[14], addr[15]])
}

/// Records read by our decoder, fed in 1 MiB chunks as a file is read, and their digest.
fn ours(bytes: &[u8]) -> (usize, u64) {
    let mut reader = Netflow::default();
    let (mut out, mut names, mut problems) = (RecordBatch::default(), NameTable::default(), Problems::default());
    let (mut records, mut sum) = (0, 0u64);
    let mut chunks = bytes.chunks(1 << 20).peekable();
    while let Some(chunk) = chunks.next() {
        reader.feed(chunk, chunks.peek().is_none(), &mut out, &mut names, &mut problems);
        records += out.len();
        for h in &out.headers {
            sum = sum.wrapping_add(digest(v4(h.src_addr), v4(h.dst_addr), h.sport, h.dport, h.protocol));
        }
        out.clear();
    }
    assert!(problems.counts.is_empty(), "{:?}", problems.first);
    (records, sum)
}

/// Data records the crate parses (`common`: each brought to its common form too, and their
/// digest).
fn crate_parse(bytes: &[u8], common: bool) -> (usize, u64) {
    let mut parser = NetflowParser::default();
    let (mut records, mut sum) = (0, 0u64);
    for packet in parser.iter_packets(bytes) {
        let packet = packet.expect("the crate parses the stream");
        if common {
            let flows = packet.as_netflow_common().expect("a common form").flowsets;
            records += flows.len();
            for f in &flows {
                let addr = |a: Option<IpAddr>| match a {
                    Some(IpAddr::V4(a)) => u32::from(a),
                    _ => 0,
                };
                sum = sum.wrapping_add(digest(
                    addr(f.src_addr),
                    addr(f.dst_addr),
                    f.src_port.unwrap_or(0),
                    f.dst_port.unwrap_or(0),
                    f.protocol_number.unwrap_or(0),
                ));
            }
        } else if let NetflowPacket::IPFix(ipfix) = &packet {
            records += ipfix
                .flowsets
                .iter()
                .map(|set| match &set.body {
                    netflow_parser::variable_versions::ipfix::FlowSetBody::Data(data) => data.fields.len(),
                    _ => 0,
                })
                .sum::<usize>();
            black_box(&packet);
        }
    }
    (records, sum)
}

fn best_of(n: usize, mut f: impl FnMut() -> (usize, u64)) -> (f64, (usize, u64)) {
    let mut best = f64::INFINITY;
    let mut count = (0, 0);
    for _ in 0..n {
        let t = Instant::now();
        count = f();
        best = best.min(t.elapsed().as_secs_f64());
    }
    (best, count)
}

fn main() {
    let records: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(1_000_000);
    let bytes = stream(records);
    println!(
        "# IPFIX decoders: {records} records in {} messages, {:.1} MB, best of 5, one thread",
        records.div_ceil(RECORDS_PER_MESSAGE),
        bytes.len() as f64 / 1e6
    );
    let (t_ours, n_ours) = best_of(5, || ours(&bytes));
    let (t_parse, n_parse) = best_of(5, || crate_parse(&bytes, false));
    let (t_common, n_common) = best_of(5, || crate_parse(&bytes, true));
    assert_eq!((n_ours.0, n_parse.0, n_common.0), (records, records, records), "every decoder reads every record");
    assert_eq!(n_ours.1, n_common.1, "both decoders read the same addresses, ports and protocols");
    let rate = |t: f64| records as f64 / t / 1e6;
    println!("ours                              {:7.2} M records/s", rate(t_ours));
    println!("netflow_parser, parsed            {:7.2} M records/s  (ours {:.1}x)", rate(t_parse), t_parse / t_ours);
    println!("netflow_parser, common form       {:7.2} M records/s  (ours {:.1}x)", rate(t_common), t_common / t_ours);
}
