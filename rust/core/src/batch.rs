//! The header batch: the one data structure that all three layers share.
//!
//! The Cython decoder (`native/`) writes one [`PacketHeader`] per packet into a contiguous array;
//! the engine reads that array without copying and without the GIL; Python sees the same bytes as a
//! numpy structured array (`pyclassify.batch.HEADER_DTYPE`). This file is the one definition:
//! `native/header_batch.h` and `.pxd` are generated from it (`crate::abi`), numpy's dtype is built
//! from the layout `pyclassify._engine` exports, and `tests/test_batch_abi.py` holds the C
//! compiler's and numpy's layouts to this one field by field (name, offset, size).
//!
//! Layout rules, so that the struct means the same thing in Rust, C and numpy:
//! - 64 bytes: one cache line per packet, and a power of two so batch indexing is a shift.
//! - No implicit padding: fields are ordered by decreasing alignment and tile the struct exactly,
//!   so every bit pattern is a valid header and bytes can be reinterpreted freely.
//! - Integers are in host byte order (the decoder converts from network order once); addresses
//!   are raw network-order bytes, IPv4 stored IPv4-mapped (`::ffff:a.b.c.d`) so that one
//!   16-byte comparison path serves both families.
//! - Changing this struct is an ABI change: bump `capi::ENGINE_ABI_VERSION` and regenerate the
//!   headers (`cargo run -p pyclassify-core --bin abi-headers`).

use core::mem::size_of;

/// Packet is a fragment (IPv4 MF/offset, or IPv6 Fragment header).
pub const FLAG_FRAGMENT: u8 = 1;
/// Packet is the first fragment (offset 0): the only one that carries L4 ports.
pub const FLAG_FIRST_FRAGMENT: u8 = 2;
/// Capture was cut short (snaplen) or the packet ended before a header it announced.
pub const FLAG_TRUNCATED: u8 = 4;
/// Packet could not be decoded; `error_kind` says why. The engine never judges such a packet
/// by its (partial) fields.
pub const FLAG_MALFORMED: u8 = 8;
/// ICMP/ICMPv6 error (unreachable, time exceeded, ...) quoting another flow; the quoted flow's
/// addresses and ports are what conntrack looks up.
pub const FLAG_ICMP_ERROR: u8 = 16;
/// `sport`/`dport` are meaningful (TCP, UDP, SCTP, first or unfragmented packet).
pub const FLAG_HAS_PORTS: u8 = 32;

/// All flag bits as `(name, value, meaning)`, for the generated C header and cross-layer checks.
pub const FLAGS: &[(&str, u8, &str)] = &[
    ("FLAG_FRAGMENT", FLAG_FRAGMENT, "a fragment (IPv4 MF/offset or IPv6 Fragment header)"),
    ("FLAG_FIRST_FRAGMENT", FLAG_FIRST_FRAGMENT, "the first fragment: the only one with L4 ports"),
    ("FLAG_TRUNCATED", FLAG_TRUNCATED, "ended before a header it announced (snaplen, short read)"),
    ("FLAG_MALFORMED", FLAG_MALFORMED, "could not be decoded; error_kind says why"),
    ("FLAG_ICMP_ERROR", FLAG_ICMP_ERROR, "ICMP error quoting another flow"),
    ("FLAG_HAS_PORTS", FLAG_HAS_PORTS, "sport/dport are meaningful"),
];

/// `PacketHeader::error_kind` of a frame that is not IP (ARP, LLDP, an unknown SLL protocol or
/// null family): nothing for policy to judge.
pub const ERR_UNKNOWN_ETHERTYPE: u8 = 7;

/// Values of `PacketHeader::error_kind` as `(name, value, meaning)`, in value order: why the
/// decoder did not (fully) decode a packet. Every kind but `ERR_FRAGMENT_UNMATCHED` comes with
/// `FLAG_MALFORMED`; the `ERR_TRUNCATED_*` kinds also with `FLAG_TRUNCATED`.
pub const ERROR_KINDS: &[(&str, u8, &str)] = &[
    ("ERR_NONE", 0, "decoded"),
    ("ERR_TRUNCATED_LINK", 1, "shorter than its link-layer header"),
    ("ERR_TRUNCATED_IP", 2, "shorter than its IP header or an IPv6 extension header"),
    ("ERR_TRUNCATED_L4", 3, "shorter than its TCP/UDP/UDP-Lite/SCTP/ICMP header"),
    ("ERR_BAD_IP_VERSION", 4, "IP version nibble not 4/6 (or not the link type's)"),
    ("ERR_BAD_IHL", 5, "IPv4 header length below 20 bytes"),
    ("ERR_BAD_TOTAL_LENGTH", 6, "IP total/payload length shorter than the header or longer than the frame"),
    ("ERR_UNKNOWN_ETHERTYPE", ERR_UNKNOWN_ETHERTYPE, "not IP: ethertype/SLL protocol/null family unknown (ARP, LLDP, ...)"),
    ("ERR_UNKNOWN_LINKTYPE", 8, "a link type the decoder does not know"),
    ("ERR_TOO_MANY_EXT_HEADERS", 9, "IPv6 extension header chain longer than the bound"),
    ("ERR_TOO_MANY_VLAN_TAGS", 10, "more 802.1Q/802.1ad tags than the bound"),
    ("ERR_BAD_L4_HEADER", 11, "TCP data offset below 5, UDP length below 8"),
    ("ERR_FRAGMENT_OVERLAP", 12, "a later fragment overlapping the L4 header (RFC 1858)"),
    ("ERR_FRAGMENT_UNMATCHED", 13, "later fragment whose first fragment is not in the table (unseen or evicted): no ports"),
    ("ERR_TRUNCATED_TUNNEL", 14, "shorter than its tunnel header (VXLAN, Geneve, GRE)"),
    ("ERR_TUNNEL_UNSUPPORTED", 15, "a tunnel header it cannot read (GRE version, routing or payload type; Geneve version, critical options or payload type; VXLAN without a VNI)"),
    ("ERR_TUNNEL_TOO_DEEP", 16, "tunnels nested deeper than the bound"),
    ("ERR_TUNNEL_FRAGMENT", 17, "a fragment of a tunnel packet: its inner packet is not whole"),
];

/// `PacketHeader::encap`: not found inside a tunnel.
pub const ENCAP_NONE: u8 = 0;
/// VXLAN (RFC 7348): Ethernet in UDP, to a VXLAN port (4789; Linux's and Flannel's/Cilium's 8472).
pub const ENCAP_VXLAN: u8 = 1;
/// Geneve (RFC 8926): Ethernet or IP in UDP, to a Geneve port (6081).
pub const ENCAP_GENEVE: u8 = 2;
/// IPv4 in IP (IP protocol 4; Calico's IPIP).
pub const ENCAP_IPIP: u8 = 3;
/// IPv6 in IP (IP protocol 41).
pub const ENCAP_IP6IP: u8 = 4;
/// GRE (RFC 2784/2890, IP protocol 47): Ethernet (0x6558), IPv4 or IPv6.
pub const ENCAP_GRE: u8 = 5;

/// Values of `PacketHeader::encap` as `(name, value, meaning)`, in value order.
pub const ENCAP_KINDS: &[(&str, u8, &str)] = &[
    ("ENCAP_NONE", ENCAP_NONE, "not inside a tunnel"),
    ("ENCAP_VXLAN", ENCAP_VXLAN, "VXLAN: Ethernet in UDP (RFC 7348)"),
    ("ENCAP_GENEVE", ENCAP_GENEVE, "Geneve: Ethernet or IP in UDP (RFC 8926)"),
    ("ENCAP_IPIP", ENCAP_IPIP, "IPv4 in IP (protocol 4)"),
    ("ENCAP_IP6IP", ENCAP_IP6IP, "IPv6 in IP (protocol 41)"),
    ("ENCAP_GRE", ENCAP_GRE, "GRE (protocol 47): Ethernet, IPv4 or IPv6"),
];

/// `OuterHeader::flags`: `vni` holds the VXLAN/Geneve VNI or the GRE key.
pub const OUTER_HAS_KEY: u8 = 1;

crate::abi_record! {
/// One decoded packet's L3/L4 header summary, as the decoder writes it and the engine reads it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PacketHeader as "PacketHeader" {
    /// Capture or receive timestamp, nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// Source address, network byte order; IPv4 as IPv4-mapped IPv6.
    pub src_addr: [u8; 16],
    /// Destination address, network byte order; IPv4 as IPv4-mapped IPv6.
    pub dst_addr: [u8; 16],
    /// Length of the packet on the wire (not the captured length).
    pub pkt_len: u32,
    /// Interface index or port id the packet arrived on (NFQUEUE indev, bridge side, pcap: 0).
    pub ifindex: u32,
    /// L4 source port, host byte order; valid when `FLAG_HAS_PORTS` is set.
    pub sport: u16,
    /// L4 destination port, host byte order; valid when `FLAG_HAS_PORTS` is set.
    pub dport: u16,
    /// 4 or 6; 0 when the packet is not IP.
    pub ip_version: u8,
    /// IP protocol number of the L4 header (after IPv6 extension headers).
    pub protocol: u8,
    /// TCP flags byte (FIN=1, SYN=2, RST=4, PSH=8, ACK=16, ...); 0 for other protocols.
    pub tcp_flags: u8,
    /// `FLAG_*` bits.
    pub flags: u8,
    /// ICMP/ICMPv6 type; 0 for other protocols.
    pub icmp_type: u8,
    /// ICMP/ICMPv6 code; 0 for other protocols.
    pub icmp_code: u8,
    /// Decode error reason, 0 = none (meaningful with `FLAG_MALFORMED` or `FLAG_TRUNCATED`).
    pub error_kind: u8,
    /// The tunnel the packet was found in (`ENCAP_*`; 0: none). When set, the other fields
    /// describe the inner packet and the [`OuterHeader`] beside it the outer one; with
    /// `FLAG_MALFORMED`, the tunnel could not be read far enough to judge its inner packet.
    pub encap: u8,
    /// IP fragment identification (IPv4 16-bit id widened, or IPv6 32-bit id).
    pub frag_id: u32,
}
}

crate::abi_record! {
/// The outer header of a packet found inside a tunnel, beside its [`PacketHeader`] in a parallel
/// array (the 64-byte header has no room for a second address pair). The decoder writes it only
/// where `PacketHeader::encap` is set; elsewhere its bytes mean nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct OuterHeader as "pc_outer" {
    /// Source address of the outermost IP header, network order; IPv4 as IPv4-mapped IPv6.
    pub src_addr: [u8; 16],
    /// Destination address of the outermost IP header, network order; IPv4 as IPv4-mapped IPv6.
    pub dst_addr: [u8; 16],
    /// VXLAN or Geneve network identifier, or GRE key; valid with `OUTER_HAS_KEY`.
    pub vni: u32,
    /// UDP source port of a VXLAN or Geneve tunnel; 0 for IP in IP and GRE.
    pub sport: u16,
    /// UDP destination port of a VXLAN or Geneve tunnel; 0 for IP in IP and GRE.
    pub dport: u16,
    /// What the tunnel header says it carries: an ethertype (0x6558 Ethernet, 0x0800, 0x86DD).
    pub payload_type: u16,
    /// 4 or 6: the outermost IP header's version.
    pub ip_version: u8,
    /// The outermost IP header's protocol (17 UDP, 4, 41, 47).
    pub protocol: u8,
    /// `ENCAP_*` of the outermost tunnel (as `PacketHeader::encap`).
    pub encap: u8,
    /// How many tunnels were opened to reach the inner packet (2 or more: nested).
    pub depth: u8,
    /// `OUTER_*` bits.
    pub flags: u8,
    /// Always 0.
    pub reserved: u8,
}
}

const _: () = assert!(size_of::<OuterHeader>() == 48);

/// Size of one header in bytes; the stride of a batch.
pub const HEADER_SIZE: usize = size_of::<PacketHeader>();

// Fail the build, not just the tests, if the layout ever drifts.
const _: () = assert!(HEADER_SIZE == 64);
const _: () = assert!(core::mem::align_of::<PacketHeader>() == 8);

/// Every field of [`PacketHeader`] in declaration order as `(name, offset, size)`, as the
/// compiler lays it out.
pub fn fields() -> Vec<(&'static str, usize, usize)> {
    use crate::abi::AbiRecord;
    PacketHeader::RECORD.fields.iter().map(|f| (f.name, f.offset, f.size)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_is_one_cache_line() {
        assert_eq!(size_of::<PacketHeader>(), 64);
        assert_eq!(HEADER_SIZE, 64);
        assert_eq!(core::mem::align_of::<PacketHeader>(), 8);
    }

    #[test]
    fn offsets_are_the_documented_abi() {
        let expected: &[(&str, usize, usize)] = &[
            ("ts_ns", 0, 8),
            ("src_addr", 8, 16),
            ("dst_addr", 24, 16),
            ("pkt_len", 40, 4),
            ("ifindex", 44, 4),
            ("sport", 48, 2),
            ("dport", 50, 2),
            ("ip_version", 52, 1),
            ("protocol", 53, 1),
            ("tcp_flags", 54, 1),
            ("flags", 55, 1),
            ("icmp_type", 56, 1),
            ("icmp_code", 57, 1),
            ("error_kind", 58, 1),
            ("encap", 59, 1),
            ("frag_id", 60, 4),
        ];
        assert_eq!(fields(), expected);
    }

    #[test]
    fn no_implicit_padding() {
        // Fields tile the struct exactly: each starts where the previous one ends.
        let mut end = 0;
        for (name, offset, size) in fields() {
            assert_eq!(offset, end, "gap before {name}");
            end = offset + size;
        }
        assert_eq!(end, HEADER_SIZE);
    }

    #[test]
    fn flags_are_distinct_bits() {
        let mut seen = 0u8;
        for &(name, bit, _) in FLAGS {
            assert_eq!(bit.count_ones(), 1, "{name} is not one bit");
            assert_eq!(seen & bit, 0, "{name} reuses a bit");
            seen |= bit;
        }
        assert_eq!(FLAGS.len(), 6);
    }

    #[test]
    fn error_kinds_are_numbered_in_order() {
        for (i, &(name, value, _)) in ERROR_KINDS.iter().enumerate() {
            assert_eq!(value as usize, i, "{name}");
            assert!(name.starts_with("ERR_"));
        }
    }

    #[test]
    fn encap_kinds_are_numbered_in_order() {
        for (i, &(name, value, _)) in ENCAP_KINDS.iter().enumerate() {
            assert_eq!(value as usize, i, "{name}");
            assert!(name.starts_with("ENCAP_"));
        }
    }

    #[test]
    fn field_bytes_land_at_their_offsets() {
        let h = PacketHeader {
            ts_ns: 0x0102_0304_0506_0708,
            dport: 0xBEEF,
            frag_id: 0xCAFE_F00D,
            protocol: 17,
            ..Default::default()
        };
        // SAFETY: PacketHeader is repr(C), 64 bytes, no padding: all its bytes are initialized.
        let bytes: &[u8; 64] = unsafe { &*(&h as *const PacketHeader as *const [u8; 64]) };
        assert_eq!(bytes[0..8], 0x0102_0304_0506_0708u64.to_ne_bytes());
        assert_eq!(bytes[50..52], 0xBEEFu16.to_ne_bytes());
        assert_eq!(bytes[53], 17);
        assert_eq!(bytes[60..64], 0xCAFE_F00Du32.to_ne_bytes());
    }
}
