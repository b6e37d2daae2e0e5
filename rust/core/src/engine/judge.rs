//! Batch judgement of decoded packet headers, with or without connection tracking: one loop
//! for every engine that can judge a single header ([`Judge`]).

use super::records::{PacketVerdict, PACKET_ESTABLISHED, PACKET_INVALID};
use super::{is_port_protocol, Addr, Defaults, Flow, FlowEnd, Verdict, PROTO_ICMP, PROTO_ICMPV6};
use crate::batch::{PacketHeader, FLAG_HAS_PORTS, FLAG_MALFORMED, FLAG_TRUNCATED};
use crate::conntrack::{ConnTrack, QuotedTuple};

/// The flow policy judges for one decoded header; None if it lacks what policy needs
/// (malformed, not IP, or a port protocol without its ports): such packets are denied.
#[inline]
pub fn flow_of_header(h: &PacketHeader) -> Option<Flow> {
    if h.flags & FLAG_MALFORMED != 0 || (h.ip_version != 4 && h.ip_version != 6) {
        return None;
    }
    let has_ports = h.flags & FLAG_HAS_PORTS != 0;
    if h.flags & FLAG_TRUNCATED != 0 && !has_ports && is_port_protocol(h.protocol) {
        return None;
    }
    let icmp = matches!(h.protocol, PROTO_ICMP | PROTO_ICMPV6);
    Some(Flow {
        src: FlowEnd { addr: Some(Addr::from_header(&h.src_addr, h.ip_version)), endpoint: None },
        dst: FlowEnd { addr: Some(Addr::from_header(&h.dst_addr, h.ip_version)), endpoint: None },
        protocol: h.protocol,
        sport: has_ports.then_some(h.sport),
        dport: has_ports.then_some(h.dport),
        icmp_type: icmp.then_some(h.icmp_type),
        icmp_code: icmp.then_some(h.icmp_code),
        ts_ns: Some(h.ts_ns),
    })
}

/// An engine that judges one decoded header; the batch loops come with it.
pub trait Judge {
    /// The verdict for one header; None if it lacks what policy needs.
    fn header_verdict(&self, h: &PacketHeader, defaults: Defaults) -> Option<Verdict>;

    /// One header's verdict record (deciding tier, policy and rule per direction).
    fn packet_verdict(&self, h: &PacketHeader, defaults: Defaults) -> PacketVerdict {
        match self.header_verdict(h, defaults) {
            Some(v) => PacketVerdict::judged(&v),
            None => PacketVerdict::malformed(),
        }
    }

    /// Verdicts for a batch of headers: 1 allow, 0 deny (malformed packets are denied).
    fn classify_batch(&self, headers: &[PacketHeader], out: &mut [u8], defaults: Defaults) {
        for (h, o) in headers.iter().zip(out.iter_mut()) {
            *o = self.packet_verdict(h, defaults).allow;
        }
    }

    /// Like [`Judge::classify_batch`], with the deciding tier, policy and rule per direction.
    fn classify_detailed(&self, headers: &[PacketHeader], out: &mut [PacketVerdict], defaults: Defaults) {
        for (h, o) in headers.iter().zip(out.iter_mut()) {
            *o = self.packet_verdict(h, defaults);
        }
    }

    /// Classifies a batch with connection tracking: packets of connections already allowed
    /// (and their replies, and ICMP errors about them) pass without policy; a packet that may
    /// open a connection is judged by policy and, if allowed, starts tracking. Time is each
    /// header's capture timestamp. `quotes`, parallel to `headers`, carries the flow each ICMP
    /// error quotes.
    fn classify_tracked(
        &self,
        ct: &mut ConnTrack,
        headers: &[PacketHeader],
        quotes: Option<&[QuotedTuple]>,
        out: &mut [PacketVerdict],
        defaults: Defaults,
    ) {
        for (i, (h, o)) in headers.iter().zip(out.iter_mut()).enumerate() {
            if h.flags & FLAG_MALFORMED != 0 {
                *o = PacketVerdict::malformed();
                continue;
            }
            let mut judged = None;
            let quoted = quotes.and_then(|q| q.get(i));
            let (state, allowed) = ct.track_judged(h, quoted, h.ts_ns, |h| {
                let v = self.packet_verdict(h, defaults);
                let allow = v.allow != 0;
                judged = Some(v);
                allow
            });
            *o = match judged {
                Some(v) => v,
                None if state.allows() => PacketVerdict { allow: 1, reason: PACKET_ESTABLISHED, ..Default::default() },
                None => PacketVerdict { allow: 0, reason: PACKET_INVALID, ..Default::default() },
            };
            o.allow = allowed as u8;
            o.ct_state = state.code();
        }
    }
}
