//! Flow keys: what a packet's header says about the connection it belongs to.
//!
//! A connection is stored once under a *canonical* key that both directions compute; the entry
//! remembers which side opened it. Packets are turned into `(canonical key, side)` pairs here.

use core::hash::{Hash, Hasher};

use crate::batch::{PacketHeader, FLAG_HAS_PORTS, FLAG_ICMP_ERROR, FLAG_MALFORMED};

/// IP protocol numbers the tracker knows.
pub const PROTO_ICMP: u8 = 1;
/// TCP.
pub const PROTO_TCP: u8 = 6;
/// UDP.
pub const PROTO_UDP: u8 = 17;
/// ICMPv6.
pub const PROTO_ICMPV6: u8 = 58;

/// TCP flag bits of `PacketHeader::tcp_flags`.
pub const TCP_FIN: u8 = 0x01;
/// SYN.
pub const TCP_SYN: u8 = 0x02;
/// RST.
pub const TCP_RST: u8 = 0x04;
/// ACK.
pub const TCP_ACK: u8 = 0x10;

/// A connection's 5-tuple in its *original* direction (as the side that opened it sent it).
///
/// Addresses are the 16 network-order bytes of the header read as a big-endian `u128`, IPv4
/// IPv4-mapped (`::ffff:a.b.c.d`), so numeric order is address order.
///
/// For ICMP/ICMPv6 query flows (echo and the other request/reply pairs) `sport` is the query
/// identifier and `dport` is the *request* type shifted left by 8 (`8 << 8` for an IPv4 echo,
/// `128 << 8` for an ICMPv6 echo), so a policy judge can read the ICMP type from it.
/// For protocols without ports (and non-first fragments without ports) both ports are 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct FlowKey {
    /// Source address (original direction).
    pub src: u128,
    /// Destination address (original direction).
    pub dst: u128,
    /// Source port, or the ICMP query identifier.
    pub sport: u16,
    /// Destination port, or the ICMP request type << 8.
    pub dport: u16,
    /// IP protocol number.
    pub proto: u8,
}

impl Hash for FlowKey {
    /// One `write` of 37 bytes: SipHash then runs over whole 8-byte words without the per-field
    /// bookkeeping of a derived `Hash` (5 separate writes).
    fn hash<H: Hasher>(&self, state: &mut H) {
        let mut buf = [0u8; 37];
        buf[..16].copy_from_slice(&self.src.to_ne_bytes());
        buf[16..32].copy_from_slice(&self.dst.to_ne_bytes());
        buf[32..34].copy_from_slice(&self.sport.to_ne_bytes());
        buf[34..36].copy_from_slice(&self.dport.to_ne_bytes());
        buf[36] = self.proto;
        state.write(&buf);
    }
}

impl FlowKey {
    /// The same flow seen from the other end.
    pub fn reversed(&self) -> FlowKey {
        FlowKey { src: self.dst, dst: self.src, sport: self.dport, dport: self.sport, proto: self.proto }
    }

    /// Key of a TCP/UDP/other flow from raw addresses (network-order bytes) and ports.
    pub fn new(src: [u8; 16], dst: [u8; 16], sport: u16, dport: u16, proto: u8) -> FlowKey {
        FlowKey { src: u128::from_be_bytes(src), dst: u128::from_be_bytes(dst), sport, dport, proto }
    }

    /// Source address as 16 network-order bytes.
    pub fn src_bytes(&self) -> [u8; 16] {
        self.src.to_be_bytes()
    }

    /// Destination address as 16 network-order bytes.
    pub fn dst_bytes(&self) -> [u8; 16] {
        self.dst.to_be_bytes()
    }
}

crate::abi_record! {
/// The tuple an ICMP error quotes: the header of the packet that caused the error, as the decoder
/// read it from the error's payload. It is delivered beside the header batch (a parallel array,
/// one per header; only rows with `FLAG_ICMP_ERROR` read theirs) because the 64-byte
/// [`PacketHeader`] has no room for a second tuple.
///
/// 40 bytes, no implicit padding; integers in host byte order, addresses network order
/// (IPv4-mapped), like [`PacketHeader`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct QuotedTuple as "pc_quote" {
    /// Source address of the quoted packet (the sender of the packet that caused the error).
    pub src_addr: [u8; 16],
    /// Destination address of the quoted packet.
    pub dst_addr: [u8; 16],
    /// Quoted source port; for a quoted ICMP query, its identifier.
    pub sport: u16,
    /// Quoted destination port; 0 for a quoted ICMP query.
    pub dport: u16,
    /// Quoted IP protocol.
    pub protocol: u8,
    /// Quoted ICMP type (for a quoted ICMP query), else 0.
    pub icmp_type: u8,
    /// `QUOTED_VALID` when the decoder found a complete quoted header (ports included).
    pub flags: u8,
    /// Always 0.
    pub reserved: u8,
}
}

/// `QuotedTuple::flags`: the quoted header was decoded far enough to give the tuple.
pub const QUOTED_VALID: u8 = 1;

const _: () = assert!(core::mem::size_of::<QuotedTuple>() == 40);
const _: () = assert!(core::mem::align_of::<QuotedTuple>() == 2);

/// Which protocol family of timeouts and state a flow uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    Tcp,
    Udp,
    Icmp,
    Generic,
}

/// What a packet means to the tracker, before looking anything up.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Parsed {
    /// A packet of a trackable flow.
    Flow {
        /// Canonical key (both directions compute the same one).
        canon: FlowKey,
        /// The packet was sent by the canonical key's `src` side.
        from_a: bool,
        class: Class,
        /// TCP flags (0 for other protocols).
        tcp_flags: u8,
        /// For ICMP: the packet is a query *reply* (can never open a flow).
        icmp_reply: bool,
    },
    /// An ICMP error: related to the flow its quoted tuple names.
    IcmpError,
    /// Not tracked (ICMPv6 neighbour discovery, router messages, ...): judge per packet.
    Untracked,
    /// Cannot be tracked.
    Invalid(InvalidReason),
}

/// Why a packet is [`super::CtState::Invalid`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InvalidReason {
    /// The decoder flagged the packet malformed.
    Malformed,
    /// Not IPv4/IPv6, or the ICMP version does not match the IP version.
    NotIp,
    /// TCP/UDP without ports (a fragment whose first fragment the decoder did not see).
    NoPorts,
    /// A TCP packet that cannot open a connection (no SYN; or loose pickup is off) and
    /// belongs to none.
    TcpNoConnection,
    /// A TCP packet that does not fit the connection's state (e.g. SYN-ACK from the opener).
    TcpBadTransition,
    /// An ICMP reply that answers no tracked request.
    IcmpNoRequest,
    /// An ICMP error without a (valid) quoted tuple.
    IcmpErrorNoQuote,
    /// An ICMP error whose quoted tuple matches no tracked flow, or is not addressed to the
    /// quoted packet's sender.
    IcmpErrorUnrelated,
    /// `FLAG_ICMP_ERROR` on a packet whose type is not an ICMP error type.
    IcmpErrorBadType,
    /// A packet of a connection a policy change revoked ([`super::ConnTrack::revalidate`]), in
    /// either direction.
    Revoked,
}

impl InvalidReason {
    /// Short stable name (metrics, logs, Python).
    pub fn as_str(self) -> &'static str {
        match self {
            InvalidReason::Malformed => "malformed",
            InvalidReason::NotIp => "not-ip",
            InvalidReason::NoPorts => "no-ports",
            InvalidReason::TcpNoConnection => "tcp-no-connection",
            InvalidReason::TcpBadTransition => "tcp-bad-transition",
            InvalidReason::IcmpNoRequest => "icmp-no-request",
            InvalidReason::IcmpErrorNoQuote => "icmp-error-no-quote",
            InvalidReason::IcmpErrorUnrelated => "icmp-error-unrelated",
            InvalidReason::IcmpErrorBadType => "icmp-error-bad-type",
            InvalidReason::Revoked => "revoked",
        }
    }
}

/// ICMP query request types and their reply types: `(request, reply)`.
const ICMP4_QUERIES: &[(u8, u8)] = &[(8, 0), (13, 14), (15, 16), (17, 18)];
const ICMP6_QUERIES: &[(u8, u8)] = &[(128, 129), (139, 140)];

/// `Some((request_type, is_reply))` when `ty` is a query request or reply.
fn icmp_query(proto: u8, ty: u8) -> Option<(u8, bool)> {
    let table = if proto == PROTO_ICMP { ICMP4_QUERIES } else { ICMP6_QUERIES };
    for &(req, rep) in table {
        if ty == req {
            return Some((req, false));
        }
        if ty == rep {
            return Some((req, true));
        }
    }
    None
}

/// ICMP error types that quote the offending packet: v4 destination unreachable, source
/// quench, redirect, time exceeded, parameter problem; v6 destination unreachable, packet too
/// big, time exceeded, parameter problem.
pub fn is_icmp_error_type(proto: u8, ty: u8) -> bool {
    match proto {
        PROTO_ICMP => matches!(ty, 3 | 4 | 5 | 11 | 12),
        PROTO_ICMPV6 => matches!(ty, 1..=4),
        _ => false,
    }
}

/// Canonical key of a port flow: the (address, port) pair that sorts first is `src`.
#[inline]
pub(crate) fn canon_ports(src: u128, dst: u128, sport: u16, dport: u16, proto: u8) -> (FlowKey, bool) {
    if (src, sport) <= (dst, dport) {
        (FlowKey { src, dst, sport, dport, proto }, true)
    } else {
        (FlowKey { src: dst, dst: src, sport: dport, dport: sport, proto }, false)
    }
}

/// Canonical key of an ICMP query: always (requester, responder, id, request type << 8).
#[inline]
fn canon_icmp(src: u128, dst: u128, id: u16, req_type: u8, reply: bool, proto: u8) -> (FlowKey, bool) {
    let dport = u16::from(req_type) << 8;
    if reply {
        (FlowKey { src: dst, dst: src, sport: id, dport, proto }, false)
    } else {
        (FlowKey { src, dst, sport: id, dport, proto }, true)
    }
}

fn icmp_proto_matches_version(proto: u8, version: u8) -> bool {
    (proto == PROTO_ICMP && version == 4) || (proto == PROTO_ICMPV6 && version == 6)
}

/// Reads one header. Never panics: every bit pattern is a valid `PacketHeader`.
///
/// ICMP queries: the decoder puts the query identifier in `sport` (and leaves
/// `FLAG_HAS_PORTS` clear); see the module documentation.
pub(crate) fn parse(hdr: &PacketHeader) -> Parsed {
    if hdr.flags & FLAG_MALFORMED != 0 {
        return Parsed::Invalid(InvalidReason::Malformed);
    }
    if hdr.ip_version != 4 && hdr.ip_version != 6 {
        return Parsed::Invalid(InvalidReason::NotIp);
    }
    let src = u128::from_be_bytes(hdr.src_addr);
    let dst = u128::from_be_bytes(hdr.dst_addr);
    let proto = hdr.protocol;
    let has_ports = hdr.flags & FLAG_HAS_PORTS != 0;
    match proto {
        PROTO_TCP | PROTO_UDP => {
            if !has_ports {
                return Parsed::Invalid(InvalidReason::NoPorts);
            }
            let (canon, from_a) = canon_ports(src, dst, hdr.sport, hdr.dport, proto);
            let (class, tcp_flags) = if proto == PROTO_TCP { (Class::Tcp, hdr.tcp_flags) } else { (Class::Udp, 0) };
            Parsed::Flow { canon, from_a, class, tcp_flags, icmp_reply: false }
        }
        PROTO_ICMP | PROTO_ICMPV6 => {
            if !icmp_proto_matches_version(proto, hdr.ip_version) {
                return Parsed::Invalid(InvalidReason::NotIp);
            }
            if hdr.flags & FLAG_ICMP_ERROR != 0 {
                return if is_icmp_error_type(proto, hdr.icmp_type) {
                    Parsed::IcmpError
                } else {
                    Parsed::Invalid(InvalidReason::IcmpErrorBadType)
                };
            }
            if is_icmp_error_type(proto, hdr.icmp_type) {
                // An error the decoder could not pair with a quoted header.
                return Parsed::Invalid(InvalidReason::IcmpErrorNoQuote);
            }
            match icmp_query(proto, hdr.icmp_type) {
                Some((req, reply)) => {
                    let (canon, from_a) = canon_icmp(src, dst, hdr.sport, req, reply, proto);
                    Parsed::Flow { canon, from_a, class: Class::Icmp, tcp_flags: 0, icmp_reply: reply }
                }
                None => Parsed::Untracked,
            }
        }
        _ => {
            let (sport, dport) = if has_ports { (hdr.sport, hdr.dport) } else { (0, 0) };
            let (canon, from_a) = canon_ports(src, dst, sport, dport, proto);
            Parsed::Flow { canon, from_a, class: Class::Generic, tcp_flags: 0, icmp_reply: false }
        }
    }
}

/// Canonical key of the flow an ICMP error quotes, and whether the quoted packet was sent by
/// the key's `src` side. `None` when the quote is unusable.
pub(crate) fn parse_quoted(q: &QuotedTuple) -> Option<(FlowKey, bool)> {
    if q.flags & QUOTED_VALID == 0 {
        return None;
    }
    let src = u128::from_be_bytes(q.src_addr);
    let dst = u128::from_be_bytes(q.dst_addr);
    match q.protocol {
        PROTO_ICMP | PROTO_ICMPV6 => {
            let (req, reply) = icmp_query(q.protocol, q.icmp_type)?;
            Some(canon_icmp(src, dst, q.sport, req, reply, q.protocol))
        }
        proto => Some(canon_ports(src, dst, q.sport, q.dport, proto)),
    }
}
