//! Batch judgement of decoded packet headers, with or without connection tracking: one loop
//! for every engine that can judge a single header ([`Judge`]).

use super::records::{
    PacketVerdict, HTTP_AWAITS, HTTP_ERROR, HTTP_OUT_OF_ORDER, HTTP_REQUEST, HTTP_TABLE_FULL, PACKET_DENIED_CONNECTION,
    PACKET_ESTABLISHED, PACKET_INVALID, PACKET_POLICY,
};
use super::{is_port_protocol, Addr, Defaults, Flow, FlowEnd, Verdict, PROTO_ICMP, PROTO_ICMPV6, PROTO_TCP};
use crate::batch::{PacketHeader, FLAG_HAS_PORTS, FLAG_MALFORMED, FLAG_TRUNCATED};
use crate::conntrack::{ConnTrack, CtState, FlowKey, QuotedTuple};
use crate::http::{Fed, HttpConns, Request};

const TCP_SYN: u8 = 0x02;

/// One packet's TCP payload and the sequence number of its first byte (empty: none, or not
/// TCP), parallel to a header batch: what `http` rules read.
#[derive(Clone, Copy, Debug, Default)]
pub struct Segment<'a> {
    pub seq: u32,
    pub data: &'a [u8],
}

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

    /// The verdict for one header whose connection carries `request` (`http` rules); engines
    /// without them judge the header alone.
    fn request_verdict(&self, h: &PacketHeader, request: &Request, defaults: Defaults) -> Option<Verdict> {
        let _ = request;
        self.header_verdict(h, defaults)
    }

    /// One header's verdict record (deciding tier, policy and rule per direction).
    fn packet_verdict(&self, h: &PacketHeader, defaults: Defaults) -> PacketVerdict {
        match self.header_verdict(h, defaults) {
            Some(v) => PacketVerdict::judged(&v),
            None => PacketVerdict::undecodable(h),
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
    /// open a connection is judged by policy and, if allowed, starts tracking; if denied, every
    /// later packet of its connection, either way, is denied with it
    /// (`PACKET_DENIED_CONNECTION`). A TCP connection picked up mid-stream is judged as its
    /// client opened it (`conntrack`, "Connections picked up mid-stream"): the verdict record of
    /// a server's packet is that of its reverse. Time is each header's capture timestamp.
    /// `quotes`, parallel to `headers`, carries the flow each ICMP error quotes.
    fn classify_tracked(
        &self,
        ct: &mut ConnTrack,
        headers: &[PacketHeader],
        quotes: Option<&[QuotedTuple]>,
        out: &mut [PacketVerdict],
        defaults: Defaults,
    ) {
        self.classify_tracked_http(ct, None, headers, quotes, out, defaults)
    }

    /// [`Judge::classify_tracked`] with `http` rules: `http` holds the watched connections and
    /// each header's TCP segment (parallel to `headers`). A new TCP connection whose verdict
    /// awaits its request is admitted provisionally and watched; each request its client sends
    /// is judged when its head is complete, at the packet that completes it, and the connection
    /// is revoked (every later packet, either way, INVALID) at the first one denied or at a
    /// stream that cannot be judged. A request is judged as of its connection's opening: the
    /// rules read at the opening (`domains`, whose answers may have expired since, as Calico
    /// checks them when a connection opens) read the same, and `http` rules read the request.
    /// Without `http`, such a connection is denied (fail closed).
    fn classify_tracked_http(
        &self,
        ct: &mut ConnTrack,
        mut http: Option<(&mut HttpConns, &[Segment<'_>])>,
        headers: &[PacketHeader],
        quotes: Option<&[QuotedTuple]>,
        out: &mut [PacketVerdict],
        defaults: Defaults,
    ) {
        for (i, (h, o)) in headers.iter().zip(out.iter_mut()).enumerate() {
            if h.flags & FLAG_MALFORMED != 0 {
                *o = PacketVerdict::undecodable(h);
                continue;
            }
            let mut judged = None;
            let quoted = quotes.and_then(|q| q.get(i));
            // Only a SYN is admitted up to its request: the stream is read from its next byte (a
            // connection picked up mid-stream could carry bytes before any the judge reads).
            let provisional = http.is_some() && h.protocol == PROTO_TCP && h.tcp_flags & TCP_SYN != 0;
            let (state, allowed) = ct.track_judged(h, quoted, h.ts_ns, |h| {
                let v = self.packet_verdict(h, defaults);
                let allow = v.allow != 0 || (provisional && v.http == HTTP_AWAITS);
                judged = Some(v);
                allow
            });
            *o = match judged {
                Some(v) => v,
                None if state.allows() => PacketVerdict { allow: 1, reason: PACKET_ESTABLISHED, ..Default::default() },
                None if state == CtState::Denied => {
                    PacketVerdict { allow: 0, reason: PACKET_DENIED_CONNECTION, ..Default::default() }
                }
                None => PacketVerdict { allow: 0, reason: PACKET_INVALID, ..Default::default() },
            };
            o.allow = allowed as u8;
            o.ct_state = state.code();
            let Some((conns, segments)) = http.as_mut() else { continue };
            match state {
                CtState::New(flow) if allowed && o.http == HTTP_AWAITS => {
                    // the client's first byte follows its SYN
                    let first = segments.get(i).map(|s| s.seq.wrapping_add(1));
                    if !conns.watch(flow.key(), first, h.ts_ns, |k, _| ct.get(k, h.ts_ns).is_some()) {
                        ct.revoke(&flow.key(), h.ts_ns);
                        o.allow = 0;
                        o.http = HTTP_TABLE_FULL;
                    }
                }
                CtState::Established if !conns.is_empty() => {
                    let seg = segments.get(i).copied().unwrap_or_default();
                    if judge_segment(self, conns, h, seg, defaults, o) == Some(SegmentStep::Cut) {
                        ct.revoke(&FlowKey::new(h.src_addr, h.dst_addr, h.sport, h.dport, h.protocol), h.ts_ns);
                    }
                    o.ct_state = state.code();
                }
                _ => {}
            }
        }
    }
}

/// What becomes of one segment of a watched connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentStep {
    /// It passes (its requests allowed, or none completed yet).
    Pass,
    /// It is dropped, the connection kept: it came after a gap in what was read.
    Hold,
    /// The connection is denied from here on (a request denied, the stream broken) and no
    /// longer watched: cut it.
    Cut,
}

/// One client-to-server segment of a connection `conns` may watch (its header `h` in the
/// original direction, allowed so far): None if it is not watched (`out` untouched). Else the
/// segment is read and each request it completes judged: `out` becomes that judgement
/// (`HTTP_REQUEST`), or a denial for a stream that cannot be judged (`HTTP_ERROR + k`), or a
/// hold (`HTTP_OUT_OF_ORDER`), or stays an allow marked `HTTP_AWAITS` while no request has been
/// read yet. Each request is judged with the header's time set to when its connection began to
/// be watched (its opening): what `domains` rules read is the same as at the opening, as Calico
/// checks them when a connection opens, and only `http` rules read the request.
pub fn judge_segment<J: Judge + ?Sized>(
    engine: &J,
    conns: &mut HttpConns,
    h: &PacketHeader,
    seg: Segment<'_>,
    defaults: Defaults,
    out: &mut PacketVerdict,
) -> Option<SegmentStep> {
    let key = FlowKey::new(h.src_addr, h.dst_addr, h.sport, h.dport, h.protocol);
    match conns.feed(&key, seg.seq, seg.data, h.ts_ns)? {
        Fed::Requests(requests) if requests.is_empty() => {
            if conns.awaiting(&key) {
                out.http = HTTP_AWAITS; // still provisional: no request judged yet
            }
            Some(SegmentStep::Pass)
        }
        Fed::Ahead => {
            *out = PacketVerdict { allow: 0, reason: PACKET_INVALID, http: HTTP_OUT_OF_ORDER, ..Default::default() };
            Some(SegmentStep::Hold)
        }
        Fed::Requests(requests) => {
            let opened = PacketHeader { ts_ns: conns.opened_at(&key).unwrap_or(h.ts_ns), ..*h };
            for r in &requests {
                let Some(v) = engine.request_verdict(&opened, r, defaults) else { continue };
                *out = PacketVerdict::judged(&v);
                out.http = HTTP_REQUEST;
                if !v.allow {
                    conns.forget(&key);
                    return Some(SegmentStep::Cut);
                }
            }
            Some(SegmentStep::Pass)
        }
        Fed::Broken(e) => {
            *out = PacketVerdict { allow: 0, reason: PACKET_POLICY, ..Default::default() };
            out.http = HTTP_ERROR + e as u8;
            Some(SegmentStep::Cut)
        }
    }
}
