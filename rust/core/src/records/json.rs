//! JSON-lines flow records: Cilium Hubble flows and Calico flow logs / Goldmane flows.
//!
//! Each line is deserialized into borrowed, typed structs holding only the fields judging
//! needs (serde skips the rest without building it); names follow the published schemas:
//! Cilium's `flow.proto` (`hubble observe -o json`, the Hubble exporter's
//! `{"flow": {...}, "node_name", "time"}` lines), Calico's flow log fields, and Goldmane's
//! `Flow`/`FlowKey` (`goldmane/proto/api.proto`, as protojson writes it: proto names or
//! lowerCamelCase, 64-bit integers as strings).

use std::borrow::Cow;
use std::net::IpAddr;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

use super::text::{excerpt, LineParser};
use super::time::rfc3339_ns;
use super::{
    protocol_number, FlowCounts, NameTable, Problems, Record, RecordBatch, NO_NAME, ORIENT_STATED, REPORTED_ALLOW,
    REPORTED_AT_CONNECTION, REPORTED_AT_EGRESS, REPORTED_AT_INGRESS, REPORTED_DENY, REPORTED_NONE, REPORTED_OTHER,
};

/// An integer written as a JSON number or as a string (protojson writes 64-bit ones so).
#[derive(Clone, Copy, Debug, Default)]
pub struct Num(pub Option<u64>);

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Num;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an integer, or an integer in a string")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Num, E> {
                Ok(Num(Some(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Num, E> {
                Ok(Num(u64::try_from(v).ok()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Num, E> {
                Ok(Num(if v >= 0.0 && v.fract() == 0.0 { Some(v as u64) } else { None }))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Num, E> {
                Ok(Num(v.trim().parse().ok()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Num, E> {
                Ok(Num(None))
            }
            fn visit_none<E: de::Error>(self) -> Result<Num, E> {
                Ok(Num(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// A string or a number (Goldmane's enums are names or numbers; Calico's `proto` either).
#[derive(Clone, Debug, Default)]
pub struct Text<'a>(pub Option<Cow<'a, str>>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or a number")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Text<'a>, E> {
                Ok(Text(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Text<'a>, E> {
                Ok(Text(Some(Cow::Owned(v.to_owned()))))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Text<'a>, E> {
                Ok(Text(Some(Cow::Owned(v.to_string()))))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Text<'a>, E> {
                Ok(Text(Some(Cow::Owned(v.to_string()))))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Text<'a>, E> {
                Ok(Text(Some(Cow::Owned(v.to_string()))))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Text<'a>, E> {
                Ok(Text(None))
            }
            fn visit_none<E: de::Error>(self) -> Result<Text<'a>, E> {
                Ok(Text(None))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

impl Text<'_> {
    /// The text, None when absent, empty or `-` (Calico's "not recorded").
    pub fn get(&self) -> Option<&str> {
        match self.0.as_deref() {
            None | Some("") | Some("-") => None,
            Some(t) => Some(t),
        }
    }
}

fn ip(text: &Text<'_>) -> Option<IpAddr> {
    text.get()?.parse().ok()
}

// ---- Cilium Hubble (flow.proto) ----

#[derive(Deserialize, Default)]
#[serde(default)]
struct HubbleIp<'a> {
    #[serde(borrow)]
    source: Text<'a>,
    #[serde(borrow)]
    destination: Text<'a>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct TcpFlags {
    #[serde(rename = "SYN")]
    syn: bool,
    #[serde(rename = "ACK")]
    ack: bool,
    #[serde(rename = "FIN")]
    fin: bool,
    #[serde(rename = "RST")]
    rst: bool,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Ports {
    #[serde(alias = "sourcePort")]
    source_port: Num,
    #[serde(alias = "destinationPort")]
    destination_port: Num,
    flags: Option<TcpFlags>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Icmp {
    #[serde(rename = "type")]
    kind: Num,
    code: Num,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Layer4 {
    #[serde(rename = "TCP")]
    tcp: Option<Ports>,
    #[serde(rename = "UDP")]
    udp: Option<Ports>,
    #[serde(rename = "SCTP")]
    sctp: Option<Ports>,
    #[serde(rename = "ICMPv4")]
    icmpv4: Option<Icmp>,
    #[serde(rename = "ICMPv6")]
    icmpv6: Option<Icmp>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct HubbleEndpoint<'a> {
    #[serde(borrow)]
    namespace: Text<'a>,
    #[serde(borrow, alias = "podName")]
    pod_name: Text<'a>,
}

/// A Hubble flow, or the exporter's / `GetFlowsResponse` envelope around one (`flow`).
#[derive(Deserialize, Default)]
#[serde(default)]
struct HubbleFlow<'a> {
    #[serde(borrow)]
    flow: Option<Box<HubbleFlow<'a>>>,
    #[serde(borrow)]
    time: Text<'a>,
    #[serde(borrow)]
    verdict: Text<'a>,
    #[serde(borrow, rename = "IP", alias = "ip")]
    ip: Option<HubbleIp<'a>>,
    l4: Option<Layer4>,
    #[serde(borrow)]
    source: Option<HubbleEndpoint<'a>>,
    #[serde(borrow)]
    destination: Option<HubbleEndpoint<'a>>,
    #[serde(alias = "isReply")]
    is_reply: Option<bool>,
    /// The connection's direction as the observing endpoint sees it: its verdict is that
    /// endpoint's egress (it opened the connection) or ingress decision.
    #[serde(borrow, alias = "trafficDirection")]
    traffic_direction: Text<'a>,
}

/// Cilium Hubble flows, one JSON object a line.
#[derive(Default)]
pub struct Hubble;

fn json_error(e: &serde_json::Error) -> &'static str {
    match e.classify() {
        serde_json::error::Category::Data => "bad_field",
        serde_json::error::Category::Eof => "truncated_record",
        _ => "not_json",
    }
}

/// A line of an export that may wrap each record in `flow` (`hubble observe -o json`, the
/// Hubble exporter, Calico's and Goldmane's flow APIs): the record, or a problem counted.
trait Wrapped: Sized {
    fn unwrap_flow(self) -> Self;
}

fn parse_line<'a, T: Wrapped + Deserialize<'a>>(line: &'a [u8], number: u64, problems: &mut Problems) -> Option<T> {
    match serde_json::from_slice::<T>(line) {
        Ok(parsed) => Some(parsed.unwrap_flow()),
        Err(e) => {
            problems.add(json_error(&e), number, || format!("{e}: {}", excerpt(line)));
            None
        }
    }
}

impl Wrapped for HubbleFlow<'_> {
    fn unwrap_flow(self) -> Self {
        match self.flow {
            Some(inner) => *inner,
            None => self,
        }
    }
}

impl Wrapped for CalicoFlow<'_> {
    fn unwrap_flow(self) -> Self {
        match self.flow {
            Some(inner) => *inner,
            None => self,
        }
    }
}

fn hubble_verdict(v: Option<&str>) -> u8 {
    match v {
        None => REPORTED_NONE,
        Some("FORWARDED") | Some("1") => REPORTED_ALLOW,
        Some("DROPPED") | Some("2") => REPORTED_DENY,
        Some(_) => REPORTED_OTHER,
    }
}

/// `flow.proto`'s `TrafficDirection` (INGRESS = 1, EGRESS = 2).
fn hubble_direction(d: Option<&str>) -> u8 {
    match d {
        Some("EGRESS") | Some("2") => REPORTED_AT_EGRESS,
        Some("INGRESS") | Some("1") => REPORTED_AT_INGRESS,
        _ => REPORTED_AT_CONNECTION,
    }
}

fn endpoint_name(names: &mut NameTable, ep: &Option<HubbleEndpoint<'_>>) -> u32 {
    match ep {
        Some(e) => match (e.namespace.get(), e.pod_name.get()) {
            (Some(ns), Some(pod)) => names.intern("wep", ns, pod),
            _ => NO_NAME,
        },
        None => NO_NAME,
    }
}

impl LineParser for Hubble {
    fn line(
        &mut self,
        line: &[u8],
        number: u64,
        out: &mut RecordBatch,
        names: &mut NameTable,
        problems: &mut Problems,
    ) {
        let Some(flow) = parse_line::<HubbleFlow<'_>>(line, number, problems) else { return };
        let Some(ip_pair) = &flow.ip else {
            // Hubble also reports events that are not IP flows (L7 without IP, agent events).
            problems.add("not_ip_flow", number, || "no IP addresses (not an IP flow)".into());
            return;
        };
        let (Some(src), Some(dst)) = (ip(&ip_pair.source), ip(&ip_pair.destination)) else {
            problems.add("bad_address", number, || "IP.source or IP.destination is not an IP address".into());
            return;
        };
        let mut r = Record { src: Some(src), dst: Some(dst), ..Default::default() };
        let mut opening = true;
        if let Some(l4) = &flow.l4 {
            let ports = |p: &Ports| (p.source_port.0.unwrap_or(0) as u16, p.destination_port.0.unwrap_or(0) as u16);
            if let Some(t) = &l4.tcp {
                r.protocol = 6;
                (r.sport, r.dport) = ports(t);
                if let Some(f) = &t.flags {
                    opening = f.syn && !f.ack;
                    r.tcp_flags = (f.fin as u8) | (f.syn as u8) << 1 | (f.rst as u8) << 2 | (f.ack as u8) << 4;
                } else {
                    opening = false;
                }
            } else if let Some(u) = &l4.udp {
                r.protocol = 17;
                (r.sport, r.dport) = ports(u);
            } else if let Some(s) = &l4.sctp {
                r.protocol = 132;
                (r.sport, r.dport) = ports(s);
            } else if let Some(i) = &l4.icmpv4 {
                r.protocol = 1;
                (r.icmp_type, r.icmp_code) = (i.kind.0.unwrap_or(0) as u8, i.code.0.unwrap_or(0) as u8);
            } else if let Some(i) = &l4.icmpv6 {
                r.protocol = 58;
                (r.icmp_type, r.icmp_code) = (i.kind.0.unwrap_or(0) as u8, i.code.0.unwrap_or(0) as u8);
            }
        }
        let ts = flow.time.get().and_then(rfc3339_ns).unwrap_or(0);
        r.counts = FlowCounts {
            first_ns: ts,
            last_ns: ts,
            packets: 1,
            position: number,
            src_name: endpoint_name(names, &flow.source),
            dst_name: endpoint_name(names, &flow.destination),
            reported: hubble_verdict(flow.verdict.get()),
            reported_at: hubble_direction(flow.traffic_direction.get()),
            ..Default::default()
        };
        match flow.is_reply {
            Some(true) => {
                r.reverse();
                opening = false;
            }
            Some(false) => r.counts.orientation = ORIENT_STATED,
            None => {}
        }
        // One Hubble event is one packet of a connection; it starts one when it opens it.
        r.counts.flows = opening as u64;
        r.push(out);
    }
}

// ---- Calico flow logs and Goldmane flows ----

#[derive(Deserialize, Default)]
#[serde(default)]
struct CalicoFlow<'a> {
    /// Goldmane: `FlowResult.flow`.
    #[serde(borrow)]
    flow: Option<Box<CalicoFlow<'a>>>,
    /// Goldmane: `Flow.Key`.
    #[serde(borrow, rename = "Key", alias = "key")]
    key: Option<Box<CalicoFlow<'a>>>,
    #[serde(alias = "startTime")]
    start_time: Num,
    #[serde(alias = "endTime")]
    end_time: Num,
    #[serde(borrow)]
    action: Text<'a>,
    /// The end whose policy gave `action`: `src` (its egress) or `dst` (its ingress).
    #[serde(borrow)]
    reporter: Text<'a>,
    #[serde(borrow)]
    source_ip: Text<'a>,
    #[serde(borrow, alias = "sourceName")]
    source_name: Text<'a>,
    #[serde(borrow)]
    source_name_aggr: Text<'a>,
    #[serde(borrow, alias = "sourceNamespace")]
    source_namespace: Text<'a>,
    #[serde(borrow, alias = "sourceType")]
    source_type: Text<'a>,
    source_port: Num,
    #[serde(borrow)]
    dest_ip: Text<'a>,
    #[serde(borrow, alias = "destName")]
    dest_name: Text<'a>,
    #[serde(borrow)]
    dest_name_aggr: Text<'a>,
    #[serde(borrow, alias = "destNamespace")]
    dest_namespace: Text<'a>,
    #[serde(borrow, alias = "destType")]
    dest_type: Text<'a>,
    #[serde(alias = "destPort")]
    dest_port: Num,
    #[serde(borrow)]
    proto: Text<'a>,
    #[serde(alias = "packetsIn")]
    packets_in: Num,
    #[serde(alias = "packetsOut")]
    packets_out: Num,
    #[serde(alias = "bytesIn")]
    bytes_in: Num,
    #[serde(alias = "bytesOut")]
    bytes_out: Num,
    num_flows: Num,
    num_flows_started: Num,
    #[serde(alias = "numConnectionsStarted")]
    num_connections_started: Num,
    #[serde(alias = "numConnectionsLive")]
    num_connections_live: Num,
}

/// Calico flow logs (one JSON object a line) and Goldmane flows (`Flow`, or `FlowResult`
/// around one).
#[derive(Default)]
pub struct Calico;

/// Calico's endpoint type in its flow log's short form: `wep`, `hep`, `ns`, `net`.
fn calico_kind(t: Option<&str>) -> &'static str {
    match t {
        Some("wep" | "WorkloadEndpoint" | "1") => "wep",
        Some("hep" | "HostEndpoint" | "2") => "hep",
        Some("ns" | "NetworkSet" | "3") => "ns",
        Some("net" | "Network" | "4") => "net",
        _ => "",
    }
}

/// Calico's `reporter` (`src`/`dst`), or Goldmane's `Reporter` by name or number (Src = 1,
/// Dst = 2, as protojson writes enums with `UseEnumNumbers`).
fn calico_reporter(r: Option<&str>) -> u8 {
    match r {
        Some(r) if r.eq_ignore_ascii_case("src") || r == "1" => REPORTED_AT_EGRESS,
        Some(r) if r.eq_ignore_ascii_case("dst") || r == "2" => REPORTED_AT_INGRESS,
        _ => REPORTED_AT_CONNECTION,
    }
}

fn calico_action(a: Option<&str>) -> u8 {
    match a.map(|s| s.to_ascii_lowercase()) {
        None => REPORTED_NONE,
        Some(s) if s == "allow" || s == "1" => REPORTED_ALLOW,
        Some(s) if s == "deny" || s == "2" => REPORTED_DENY,
        Some(_) => REPORTED_OTHER,
    }
}

impl LineParser for Calico {
    fn line(
        &mut self,
        line: &[u8],
        number: u64,
        out: &mut RecordBatch,
        names: &mut NameTable,
        problems: &mut Problems,
    ) {
        let Some(flow) = parse_line::<CalicoFlow<'_>>(line, number, problems) else { return };
        // Goldmane keeps the identifying fields in `Key`, the statistics beside it.
        let (stats, key) = match &flow.key {
            Some(k) => (&flow, &**k),
            None => (&flow, &flow),
        };
        let Some(protocol) = key.proto.get().and_then(protocol_number) else {
            problems.add("bad_field", number, || format!("proto {:?} is not a protocol", key.proto.0));
            return;
        };
        let name = |names: &mut NameTable, kind: &Text<'_>, ns: &Text<'_>, name: &Text<'_>, aggr: &Text<'_>| -> u32 {
            match name.get().or(aggr.get()) {
                Some(n) => names.intern(calico_kind(kind.get()), ns.get().unwrap_or(""), n),
                None => NO_NAME,
            }
        };
        let src_name = name(names, &key.source_type, &key.source_namespace, &key.source_name, &key.source_name_aggr);
        let dst_name = name(names, &key.dest_type, &key.dest_namespace, &key.dest_name, &key.dest_name_aggr);
        let (src, dst) = (ip(&key.source_ip), ip(&key.dest_ip));
        if (src.is_none() && src_name == NO_NAME) || (dst.is_none() && dst_name == NO_NAME) {
            problems.add("bad_address", number, || "neither an address nor a name at one end".into());
            return;
        }
        let sec = 1_000_000_000u64;
        let flows =
            [stats.num_flows_started, stats.num_connections_started, stats.num_flows, stats.num_connections_live]
                .iter()
                .find_map(|n| n.0.filter(|&v| v > 0))
                .unwrap_or(1);
        let mut r = Record {
            src,
            dst,
            protocol,
            sport: key.source_port.0.unwrap_or(0) as u16,
            dport: key.dest_port.0.unwrap_or(0) as u16,
            counts: FlowCounts {
                first_ns: stats.start_time.0.unwrap_or(0).saturating_mul(sec),
                last_ns: stats.end_time.0.unwrap_or(0).saturating_mul(sec),
                packets: stats.packets_in.0.unwrap_or(0) + stats.packets_out.0.unwrap_or(0),
                bytes: stats.bytes_in.0.unwrap_or(0) + stats.bytes_out.0.unwrap_or(0),
                flows,
                position: number,
                src_name,
                dst_name,
                reported: calico_action(key.action.get()),
                reported_at: calico_reporter(key.reporter.get()),
                // Calico's source is the end that opened the connection, whoever reports it.
                orientation: ORIENT_STATED,
                ..Default::default()
            },
            ..Default::default()
        };
        if r.protocol == 1 || r.protocol == 58 {
            // Calico records ICMP without type or code: judged as an echo request.
            r.icmp_type = if r.protocol == 1 { 8 } else { 128 };
        }
        r.push(out);
    }
}
