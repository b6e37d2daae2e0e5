//! `conntrack -L` and `conntrack -E` output (conntrack-tools), the kernel's own record of
//! connections: `tcp 6 431999 ESTABLISHED src=A dst=B sport=P dport=Q [packets=N bytes=M]
//! src=B dst=A sport=Q dport=P ... [ASSURED] mark=0 use=1`, optionally behind `-o extended`'s
//! `ipv4 2`, and for `-E` behind an event (`[NEW]`, `[UPDATE]`, `[DESTROY]`) and `-o
//! timestamp`'s `[seconds.micros]`.
//!
//! The original tuple is the direction that opened the connection. Its destination is taken
//! from the reply tuple's source (and port) when they differ: that is where DNAT delivered it
//! (a Service's ClusterIP to a backend), the address policy judges. Counters (`packets=`,
//! `bytes=`, with `nf_conntrack_acct` on) are summed over both directions; with `-E`, a
//! connection is counted once (its `[NEW]` event) and its counters taken from `[DESTROY]`,
//! since every event carries the totals so far.

use std::net::IpAddr;

use super::text::{excerpt, LineParser};
use super::time::seconds_ns;
use super::{protocol_number, FlowCounts, NameTable, Problems, Record, RecordBatch, NO_NAME, ORIENT_STATED};

/// `conntrack -L` / `-E` output.
#[derive(Default)]
pub struct Conntrack;

#[derive(Default)]
struct Tuple {
    src: Option<IpAddr>,
    dst: Option<IpAddr>,
    sport: Option<u16>,
    dport: Option<u16>,
    icmp_type: Option<u8>,
    icmp_code: Option<u8>,
    packets: u64,
    bytes: u64,
}

impl LineParser for Conntrack {
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
        let mut tokens = text.split_ascii_whitespace().peekable();
        let mut ts_ns = 0u64;
        let mut event: Option<&str> = None;
        // [timestamp] and [EVENT] before the protocol
        while let Some(t) = tokens.peek() {
            if let Some(inner) = t.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
                if let Some(ns) = seconds_ns(inner) {
                    ts_ns = ns;
                } else {
                    event = Some(inner);
                }
                tokens.next();
            } else {
                break;
            }
        }
        // `-o extended`: the layer-3 name and number first
        if matches!(tokens.peek(), Some(&"ipv4") | Some(&"ipv6")) {
            tokens.next();
            tokens.next();
        }
        let Some(protocol) = tokens.next().and_then(protocol_number) else {
            problems.add("bad_field", number, || format!("no protocol: {}", excerpt(line)));
            return;
        };
        // protocol number, then timeout, then (TCP, SCTP, DCCP) the state
        let mut tuples: [Tuple; 2] = Default::default();
        let mut which = 0usize;
        let mut seen_src = [false; 2];
        let mut delta_s: Option<u64> = None;
        for t in tokens {
            let Some((k, v)) = t.split_once('=') else { continue };
            if k == "src" {
                if seen_src[0] {
                    which = 1;
                }
                seen_src[which] = true;
            }
            let tuple = &mut tuples[which];
            match k {
                "src" => tuple.src = v.parse().ok(),
                "dst" => tuple.dst = v.parse().ok(),
                "sport" => tuple.sport = v.parse().ok(),
                "dport" => tuple.dport = v.parse().ok(),
                "type" => tuple.icmp_type = v.parse().ok(),
                "code" => tuple.icmp_code = v.parse().ok(),
                "packets" => tuple.packets = v.parse().unwrap_or(0),
                "bytes" => tuple.bytes = v.parse().unwrap_or(0),
                "delta-time" => delta_s = v.parse().ok(),
                _ => {}
            }
        }
        let [orig, reply] = tuples;
        let (Some(src), Some(mut dst)) = (orig.src, orig.dst) else {
            problems.add("truncated_record", number, || format!("no original src= and dst=: {}", excerpt(line)));
            return;
        };
        let mut dport = orig.dport.unwrap_or(0);
        if let Some(delivered) = reply.src {
            if delivered != dst {
                dst = delivered; // DNAT: where the connection was delivered
                dport = reply.sport.unwrap_or(dport);
            }
        }
        let first = ts_ns.saturating_sub(delta_s.unwrap_or(0) * 1_000_000_000);
        let counted = !matches!(event, Some("NEW") | Some("UPDATE"));
        let r = Record {
            src: Some(src),
            dst: Some(dst),
            protocol,
            sport: orig.sport.unwrap_or(0),
            dport,
            icmp_type: orig.icmp_type.unwrap_or(0),
            icmp_code: orig.icmp_code.unwrap_or(0),
            counts: FlowCounts {
                first_ns: first,
                last_ns: ts_ns,
                packets: if counted { orig.packets + reply.packets } else { 0 },
                bytes: if counted { orig.bytes + reply.bytes } else { 0 },
                flows: matches!(event, None | Some("NEW")) as u64,
                position: number,
                src_name: NO_NAME,
                dst_name: NO_NAME,
                orientation: ORIENT_STATED,
                ..Default::default()
            },
            ..Default::default()
        };
        r.push(out);
    }
}
