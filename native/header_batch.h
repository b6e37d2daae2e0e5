/*
 * Generated from the Rust engine by rust/core/src/abi/headers.rs: do not edit.
 * Regenerate with `cargo run --manifest-path rust/Cargo.toml -p pyclassify-core --bin abi-headers`;
 * `cargo test` fails while this file differs from what the generator writes.
 *
 * The header batch: one decoded packet per 64-byte PacketHeader (rust/core/src/batch.rs).
 * The decoder writes arrays of it; the engine reads them in place through the C ABI, without
 * the GIL; numpy sees them as pyclassify.batch.HEADER_DTYPE.
 *
 * Layout rules: 64 bytes (one cache line); no implicit padding (fields by decreasing alignment
 * tile the struct); integers in host byte order; addresses as raw network-order bytes with IPv4
 * stored IPv4-mapped (::ffff:a.b.c.d). A packet found inside a tunnel has its outer header in a
 * pc_outer beside it, in a parallel array.
 */
#ifndef PYCLASSIFY_HEADER_BATCH_H
#define PYCLASSIFY_HEADER_BATCH_H

#include <stddef.h>
#include <stdint.h>

/* Bits of PacketHeader.flags. */
#define PC_FLAG_FRAGMENT 1u /* a fragment (IPv4 MF/offset or IPv6 Fragment header) */
#define PC_FLAG_FIRST_FRAGMENT 2u /* the first fragment: the only one with L4 ports */
#define PC_FLAG_TRUNCATED 4u /* ended before a header it announced (snaplen, short read) */
#define PC_FLAG_MALFORMED 8u /* could not be decoded; error_kind says why */
#define PC_FLAG_ICMP_ERROR 16u /* ICMP error quoting another flow */
#define PC_FLAG_HAS_PORTS 32u /* sport/dport are meaningful */

/* Values of PacketHeader.error_kind: why a packet was not (fully) decoded. Every kind but
 * PC_ERR_FRAGMENT_UNMATCHED also sets PC_FLAG_MALFORMED; the PC_ERR_TRUNCATED_* kinds also set
 * PC_FLAG_TRUNCATED. */
enum pc_error_kind {
    PC_ERR_NONE = 0, /* decoded */
    PC_ERR_TRUNCATED_LINK = 1, /* shorter than its link-layer header */
    PC_ERR_TRUNCATED_IP = 2, /* shorter than its IP header or an IPv6 extension header */
    PC_ERR_TRUNCATED_L4 = 3, /* shorter than its TCP/UDP/UDP-Lite/SCTP/ICMP header */
    PC_ERR_BAD_IP_VERSION = 4, /* IP version nibble not 4/6 (or not the link type's) */
    PC_ERR_BAD_IHL = 5, /* IPv4 header length below 20 bytes */
    PC_ERR_BAD_TOTAL_LENGTH = 6, /* IP total/payload length shorter than the header or longer than the frame */
    PC_ERR_UNKNOWN_ETHERTYPE = 7, /* not IP: ethertype/SLL protocol/null family unknown (ARP, LLDP, ...) */
    PC_ERR_UNKNOWN_LINKTYPE = 8, /* a link type the decoder does not know */
    PC_ERR_TOO_MANY_EXT_HEADERS = 9, /* IPv6 extension header chain longer than the bound */
    PC_ERR_TOO_MANY_VLAN_TAGS = 10, /* more 802.1Q/802.1ad tags than the bound */
    PC_ERR_BAD_L4_HEADER = 11, /* TCP data offset below 5, UDP length below 8 */
    PC_ERR_FRAGMENT_OVERLAP = 12, /* a later fragment overlapping the L4 header (RFC 1858) */
    PC_ERR_FRAGMENT_UNMATCHED = 13, /* later fragment whose first fragment is not in the table (unseen or evicted): no ports */
    PC_ERR_TRUNCATED_TUNNEL = 14, /* shorter than its tunnel header (VXLAN, Geneve, GRE) */
    PC_ERR_TUNNEL_UNSUPPORTED = 15, /* a tunnel header it cannot read (GRE version, routing or payload type; Geneve version, critical options or payload type; VXLAN without a VNI) */
    PC_ERR_TUNNEL_TOO_DEEP = 16, /* tunnels nested deeper than the bound */
    PC_ERR_TUNNEL_FRAGMENT = 17, /* a fragment of a tunnel packet: its inner packet is not whole */
    PC_ERR_COUNT = 18
};

/* Values of PacketHeader.encap and pc_outer.encap: the tunnel a packet was found in. */
enum pc_encap_kind {
    PC_ENCAP_NONE = 0, /* not inside a tunnel */
    PC_ENCAP_VXLAN = 1, /* VXLAN: Ethernet in UDP (RFC 7348) */
    PC_ENCAP_GENEVE = 2, /* Geneve: Ethernet or IP in UDP (RFC 8926) */
    PC_ENCAP_IPIP = 3, /* IPv4 in IP (protocol 4) */
    PC_ENCAP_IP6IP = 4, /* IPv6 in IP (protocol 41) */
    PC_ENCAP_GRE = 5, /* GRE (protocol 47): Ethernet, IPv4 or IPv6 */
    PC_ENCAP_COUNT = 6
};

/* pc_outer.flags: vni holds the VXLAN/Geneve VNI or the GRE key. */
#define PC_OUTER_HAS_KEY 1u

/* One field of a record as the C compiler lays it out, for the cross-layer ABI test. */
typedef struct pc_field {
    const char *name;
    size_t offset;
    size_t size;
} pc_field;

typedef struct pc_record_layout {
    const char *name;
    size_t size;
    size_t nfields;
    const pc_field *fields;
} pc_record_layout;

/* pyclassify_core::batch::PacketHeader: 64 bytes, 8-aligned. */
typedef struct PacketHeader {
    uint64_t ts_ns;          /*  0: Capture or receive timestamp, nanoseconds since the Unix epoch. */
    uint8_t src_addr[16];    /*  8: Source address, network byte order; IPv4 as IPv4-mapped IPv6. */
    uint8_t dst_addr[16];    /* 24: Destination address, network byte order; IPv4 as IPv4-mapped IPv6. */
    uint32_t pkt_len;        /* 40: Length of the packet on the wire (not the captured length). */
    uint32_t ifindex;        /* 44: Interface index or port id the packet arrived on (NFQUEUE indev, bridge side, pcap: 0). */
    uint16_t sport;          /* 48: L4 source port, host byte order; valid when `FLAG_HAS_PORTS` is set. */
    uint16_t dport;          /* 50: L4 destination port, host byte order; valid when `FLAG_HAS_PORTS` is set. */
    uint8_t ip_version;      /* 52: 4 or 6; 0 when the packet is not IP. */
    uint8_t protocol;        /* 53: IP protocol number of the L4 header (after IPv6 extension headers). */
    uint8_t tcp_flags;       /* 54: TCP flags byte (FIN=1, SYN=2, RST=4, PSH=8, ACK=16, ...); 0 for other protocols. */
    uint8_t flags;           /* 55: `FLAG_*` bits. */
    uint8_t icmp_type;       /* 56: ICMP/ICMPv6 type; 0 for other protocols. */
    uint8_t icmp_code;       /* 57: ICMP/ICMPv6 code; 0 for other protocols. */
    uint8_t error_kind;      /* 58: Decode error reason, 0 = none (meaningful with `FLAG_MALFORMED` or `FLAG_TRUNCATED`). */
    uint8_t encap;           /* 59: The tunnel the packet was found in (`ENCAP_*`; 0: none). When set, the other fields describe the inner packet and the [`OuterHeader`] beside it the outer one; with `FLAG_MALFORMED`, the tunnel could not be read far enough to judge its inner packet. */
    uint32_t frag_id;        /* 60: IP fragment identification (IPv4 16-bit id widened, or IPv6 32-bit id). */
} PacketHeader;

/* pyclassify_core::batch::OuterHeader: 48 bytes, 4-aligned. */
typedef struct pc_outer {
    uint8_t src_addr[16];    /*  0: Source address of the outermost IP header, network order; IPv4 as IPv4-mapped IPv6. */
    uint8_t dst_addr[16];    /* 16: Destination address of the outermost IP header, network order; IPv4 as IPv4-mapped IPv6. */
    uint32_t vni;            /* 32: VXLAN or Geneve network identifier, or GRE key; valid with `OUTER_HAS_KEY`. */
    uint16_t sport;          /* 36: UDP source port of a VXLAN or Geneve tunnel; 0 for IP in IP and GRE. */
    uint16_t dport;          /* 38: UDP destination port of a VXLAN or Geneve tunnel; 0 for IP in IP and GRE. */
    uint16_t payload_type;   /* 40: What the tunnel header says it carries: an ethertype (0x6558 Ethernet, 0x0800, 0x86DD). */
    uint8_t ip_version;      /* 42: 4 or 6: the outermost IP header's version. */
    uint8_t protocol;        /* 43: The outermost IP header's protocol (17 UDP, 4, 41, 47). */
    uint8_t encap;           /* 44: `ENCAP_*` of the outermost tunnel (as `PacketHeader::encap`). */
    uint8_t depth;           /* 45: How many tunnels were opened to reach the inner packet (2 or more: nested). */
    uint8_t flags;           /* 46: `OUTER_*` bits. */
    uint8_t reserved;        /* 47: Always 0. */
} pc_outer;

_Static_assert(sizeof(PacketHeader) == 64, "PacketHeader size");
_Static_assert(_Alignof(PacketHeader) == 8, "PacketHeader alignment");
_Static_assert(offsetof(PacketHeader, ts_ns) == 0, "PacketHeader.ts_ns offset");
_Static_assert(offsetof(PacketHeader, src_addr) == 8, "PacketHeader.src_addr offset");
_Static_assert(offsetof(PacketHeader, dst_addr) == 24, "PacketHeader.dst_addr offset");
_Static_assert(offsetof(PacketHeader, pkt_len) == 40, "PacketHeader.pkt_len offset");
_Static_assert(offsetof(PacketHeader, ifindex) == 44, "PacketHeader.ifindex offset");
_Static_assert(offsetof(PacketHeader, sport) == 48, "PacketHeader.sport offset");
_Static_assert(offsetof(PacketHeader, dport) == 50, "PacketHeader.dport offset");
_Static_assert(offsetof(PacketHeader, ip_version) == 52, "PacketHeader.ip_version offset");
_Static_assert(offsetof(PacketHeader, protocol) == 53, "PacketHeader.protocol offset");
_Static_assert(offsetof(PacketHeader, tcp_flags) == 54, "PacketHeader.tcp_flags offset");
_Static_assert(offsetof(PacketHeader, flags) == 55, "PacketHeader.flags offset");
_Static_assert(offsetof(PacketHeader, icmp_type) == 56, "PacketHeader.icmp_type offset");
_Static_assert(offsetof(PacketHeader, icmp_code) == 57, "PacketHeader.icmp_code offset");
_Static_assert(offsetof(PacketHeader, error_kind) == 58, "PacketHeader.error_kind offset");
_Static_assert(offsetof(PacketHeader, encap) == 59, "PacketHeader.encap offset");
_Static_assert(offsetof(PacketHeader, frag_id) == 60, "PacketHeader.frag_id offset");

_Static_assert(sizeof(pc_outer) == 48, "pc_outer size");
_Static_assert(_Alignof(pc_outer) == 4, "pc_outer alignment");
_Static_assert(offsetof(pc_outer, src_addr) == 0, "pc_outer.src_addr offset");
_Static_assert(offsetof(pc_outer, dst_addr) == 16, "pc_outer.dst_addr offset");
_Static_assert(offsetof(pc_outer, vni) == 32, "pc_outer.vni offset");
_Static_assert(offsetof(pc_outer, sport) == 36, "pc_outer.sport offset");
_Static_assert(offsetof(pc_outer, dport) == 38, "pc_outer.dport offset");
_Static_assert(offsetof(pc_outer, payload_type) == 40, "pc_outer.payload_type offset");
_Static_assert(offsetof(pc_outer, ip_version) == 42, "pc_outer.ip_version offset");
_Static_assert(offsetof(pc_outer, protocol) == 43, "pc_outer.protocol offset");
_Static_assert(offsetof(pc_outer, encap) == 44, "pc_outer.encap offset");
_Static_assert(offsetof(pc_outer, depth) == 45, "pc_outer.depth offset");
_Static_assert(offsetof(pc_outer, flags) == 46, "pc_outer.flags offset");
_Static_assert(offsetof(pc_outer, reserved) == 47, "pc_outer.reserved offset");

/* A flow record's counts, parallel to the header it is judged as (rust/core/src/records). */
/* pyclassify_core::records::FlowCounts: 64 bytes, 8-aligned. */
typedef struct FlowCounts {
    uint64_t first_ns;       /*  0: First time the record covers, nanoseconds since the Unix epoch (0: unknown). */
    uint64_t last_ns;        /*  8: Last time the record covers, nanoseconds since the Unix epoch (0: unknown). */
    uint64_t packets;        /* 16: Packets the record counted, both directions (0: not counted). */
    uint64_t bytes;          /* 24: Bytes the record counted, both directions (0: not counted). */
    uint64_t flows;          /* 32: Connections the record stands for (1 for a single connection). */
    uint64_t position;       /* 40: Where the record is in its input: line number (text, from 1) or byte offset (binary). */
    uint32_t src_name;       /* 48: The source's name in the reader's name table (records that name endpoints rather than, or besides, addresses), or `NO_NAME`. */
    uint32_t dst_name;       /* 52: The destination's name in the reader's name table, or `NO_NAME`. */
    uint8_t reported;        /* 56: The verdict the record reports: 0 none, 1 allowed, 2 denied, 3 another (audit, pass, error). */
    uint8_t orientation;     /* 57: 0 as recorded, 1 stated as the opening direction, 2 turned around (was the reply). */
    uint8_t has_src;         /* 58: 1 when the header's source address is known (else only a name may place it). */
    uint8_t has_dst;         /* 59: 1 when the header's destination address is known. */
    uint8_t reported_at;     /* 60: Where the datapath gave `reported`: 0 the connection, 1 the source's egress, 2 the destination's ingress (Hubble's `traffic_direction`, Calico's `reporter`). */
    uint8_t reserved[3];     /* 61: Explicit padding, always 0. */
} FlowCounts;

_Static_assert(sizeof(FlowCounts) == 64, "FlowCounts size");
_Static_assert(_Alignof(FlowCounts) == 8, "FlowCounts alignment");
_Static_assert(offsetof(FlowCounts, first_ns) == 0, "FlowCounts.first_ns offset");
_Static_assert(offsetof(FlowCounts, last_ns) == 8, "FlowCounts.last_ns offset");
_Static_assert(offsetof(FlowCounts, packets) == 16, "FlowCounts.packets offset");
_Static_assert(offsetof(FlowCounts, bytes) == 24, "FlowCounts.bytes offset");
_Static_assert(offsetof(FlowCounts, flows) == 32, "FlowCounts.flows offset");
_Static_assert(offsetof(FlowCounts, position) == 40, "FlowCounts.position offset");
_Static_assert(offsetof(FlowCounts, src_name) == 48, "FlowCounts.src_name offset");
_Static_assert(offsetof(FlowCounts, dst_name) == 52, "FlowCounts.dst_name offset");
_Static_assert(offsetof(FlowCounts, reported) == 56, "FlowCounts.reported offset");
_Static_assert(offsetof(FlowCounts, orientation) == 57, "FlowCounts.orientation offset");
_Static_assert(offsetof(FlowCounts, has_src) == 58, "FlowCounts.has_src offset");
_Static_assert(offsetof(FlowCounts, has_dst) == 59, "FlowCounts.has_dst offset");
_Static_assert(offsetof(FlowCounts, reported_at) == 60, "FlowCounts.reported_at offset");
_Static_assert(offsetof(FlowCounts, reserved) == 61, "FlowCounts.reserved offset");

static const pc_field pc_fields_PacketHeader[] = {
    {"ts_ns", offsetof(PacketHeader, ts_ns), sizeof(((PacketHeader *)0)->ts_ns)},
    {"src_addr", offsetof(PacketHeader, src_addr), sizeof(((PacketHeader *)0)->src_addr)},
    {"dst_addr", offsetof(PacketHeader, dst_addr), sizeof(((PacketHeader *)0)->dst_addr)},
    {"pkt_len", offsetof(PacketHeader, pkt_len), sizeof(((PacketHeader *)0)->pkt_len)},
    {"ifindex", offsetof(PacketHeader, ifindex), sizeof(((PacketHeader *)0)->ifindex)},
    {"sport", offsetof(PacketHeader, sport), sizeof(((PacketHeader *)0)->sport)},
    {"dport", offsetof(PacketHeader, dport), sizeof(((PacketHeader *)0)->dport)},
    {"ip_version", offsetof(PacketHeader, ip_version), sizeof(((PacketHeader *)0)->ip_version)},
    {"protocol", offsetof(PacketHeader, protocol), sizeof(((PacketHeader *)0)->protocol)},
    {"tcp_flags", offsetof(PacketHeader, tcp_flags), sizeof(((PacketHeader *)0)->tcp_flags)},
    {"flags", offsetof(PacketHeader, flags), sizeof(((PacketHeader *)0)->flags)},
    {"icmp_type", offsetof(PacketHeader, icmp_type), sizeof(((PacketHeader *)0)->icmp_type)},
    {"icmp_code", offsetof(PacketHeader, icmp_code), sizeof(((PacketHeader *)0)->icmp_code)},
    {"error_kind", offsetof(PacketHeader, error_kind), sizeof(((PacketHeader *)0)->error_kind)},
    {"encap", offsetof(PacketHeader, encap), sizeof(((PacketHeader *)0)->encap)},
    {"frag_id", offsetof(PacketHeader, frag_id), sizeof(((PacketHeader *)0)->frag_id)},
};
static const pc_field pc_fields_pc_outer[] = {
    {"src_addr", offsetof(pc_outer, src_addr), sizeof(((pc_outer *)0)->src_addr)},
    {"dst_addr", offsetof(pc_outer, dst_addr), sizeof(((pc_outer *)0)->dst_addr)},
    {"vni", offsetof(pc_outer, vni), sizeof(((pc_outer *)0)->vni)},
    {"sport", offsetof(pc_outer, sport), sizeof(((pc_outer *)0)->sport)},
    {"dport", offsetof(pc_outer, dport), sizeof(((pc_outer *)0)->dport)},
    {"payload_type", offsetof(pc_outer, payload_type), sizeof(((pc_outer *)0)->payload_type)},
    {"ip_version", offsetof(pc_outer, ip_version), sizeof(((pc_outer *)0)->ip_version)},
    {"protocol", offsetof(pc_outer, protocol), sizeof(((pc_outer *)0)->protocol)},
    {"encap", offsetof(pc_outer, encap), sizeof(((pc_outer *)0)->encap)},
    {"depth", offsetof(pc_outer, depth), sizeof(((pc_outer *)0)->depth)},
    {"flags", offsetof(pc_outer, flags), sizeof(((pc_outer *)0)->flags)},
    {"reserved", offsetof(pc_outer, reserved), sizeof(((pc_outer *)0)->reserved)},
};
static const pc_field pc_fields_FlowCounts[] = {
    {"first_ns", offsetof(FlowCounts, first_ns), sizeof(((FlowCounts *)0)->first_ns)},
    {"last_ns", offsetof(FlowCounts, last_ns), sizeof(((FlowCounts *)0)->last_ns)},
    {"packets", offsetof(FlowCounts, packets), sizeof(((FlowCounts *)0)->packets)},
    {"bytes", offsetof(FlowCounts, bytes), sizeof(((FlowCounts *)0)->bytes)},
    {"flows", offsetof(FlowCounts, flows), sizeof(((FlowCounts *)0)->flows)},
    {"position", offsetof(FlowCounts, position), sizeof(((FlowCounts *)0)->position)},
    {"src_name", offsetof(FlowCounts, src_name), sizeof(((FlowCounts *)0)->src_name)},
    {"dst_name", offsetof(FlowCounts, dst_name), sizeof(((FlowCounts *)0)->dst_name)},
    {"reported", offsetof(FlowCounts, reported), sizeof(((FlowCounts *)0)->reported)},
    {"orientation", offsetof(FlowCounts, orientation), sizeof(((FlowCounts *)0)->orientation)},
    {"has_src", offsetof(FlowCounts, has_src), sizeof(((FlowCounts *)0)->has_src)},
    {"has_dst", offsetof(FlowCounts, has_dst), sizeof(((FlowCounts *)0)->has_dst)},
    {"reported_at", offsetof(FlowCounts, reported_at), sizeof(((FlowCounts *)0)->reported_at)},
    {"reserved", offsetof(FlowCounts, reserved), sizeof(((FlowCounts *)0)->reserved)},
};

/* The layouts of this header's records as the C compiler sees them; *n receives the count. */
static inline const pc_record_layout *pc_header_batch_layouts(size_t *n) {
    static const pc_record_layout records[] = {
        {"PacketHeader", sizeof(PacketHeader), sizeof(pc_fields_PacketHeader) / sizeof(pc_field), pc_fields_PacketHeader},
        {"pc_outer", sizeof(pc_outer), sizeof(pc_fields_pc_outer) / sizeof(pc_field), pc_fields_pc_outer},
        {"FlowCounts", sizeof(FlowCounts), sizeof(pc_fields_FlowCounts) / sizeof(pc_field), pc_fields_FlowCounts},
    };
    *n = sizeof(records) / sizeof(records[0]);
    return records;
}

/* Every field of PacketHeader in declaration order; *n receives the count. */
static inline const pc_field *pc_header_fields(size_t *n) {
    *n = sizeof(pc_fields_PacketHeader) / sizeof(pc_field);
    return pc_fields_PacketHeader;
}

#endif /* PYCLASSIFY_HEADER_BATCH_H */
