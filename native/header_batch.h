/*
 * The header batch: one decoded packet per 64-byte PacketHeader.
 *
 * The same struct as rust/core/src/batch.rs (#[repr(C)]) and pyclassify/batch.py (numpy dtype);
 * tests/test_batch_abi.py asserts the three agree field by field. The decoder writes arrays of
 * this struct; the engine reads them in place through the C ABI, without the GIL.
 *
 * Layout rules: 64 bytes (one cache line); no implicit padding (fields by decreasing alignment,
 * `reserved` fills the spare byte); integers in host byte order; addresses as raw network-order
 * bytes with IPv4 stored IPv4-mapped (::ffff:a.b.c.d). Changing it is an ABI change: update all
 * three definitions together.
 */
#ifndef PYCLASSIFY_HEADER_BATCH_H
#define PYCLASSIFY_HEADER_BATCH_H

#include <stddef.h>
#include <stdint.h>

/* Bits of PacketHeader.flags. */
#define PC_FLAG_FRAGMENT 1u        /* a fragment (IPv4 MF/offset or IPv6 Fragment header) */
#define PC_FLAG_FIRST_FRAGMENT 2u  /* the first fragment: the only one with L4 ports */
#define PC_FLAG_TRUNCATED 4u       /* ended before a header it announced (snaplen, short read) */
#define PC_FLAG_MALFORMED 8u       /* could not be decoded; error_kind says why */
#define PC_FLAG_ICMP_ERROR 16u     /* ICMP error quoting another flow */
#define PC_FLAG_HAS_PORTS 32u      /* sport/dport are meaningful */

/* Values of PacketHeader.error_kind: why a packet was not (fully) decoded. Mirrored in
 * pyclassify/batch.py (ERROR_KINDS). Every kind but PC_ERR_FRAGMENT_UNMATCHED also sets
 * PC_FLAG_MALFORMED; the PC_ERR_TRUNCATED_* kinds also set PC_FLAG_TRUNCATED. */
enum pc_error_kind {
    PC_ERR_NONE = 0,
    PC_ERR_TRUNCATED_LINK = 1,        /* shorter than its link-layer header */
    PC_ERR_TRUNCATED_IP = 2,          /* shorter than its IP header or an IPv6 extension header */
    PC_ERR_TRUNCATED_L4 = 3,          /* shorter than its TCP/UDP/UDP-Lite/SCTP/ICMP header */
    PC_ERR_BAD_IP_VERSION = 4,        /* IP version nibble not 4/6 (or not the link type's) */
    PC_ERR_BAD_IHL = 5,               /* IPv4 header length below 20 bytes */
    PC_ERR_BAD_TOTAL_LENGTH = 6,      /* IP total/payload length shorter than the header or longer than the frame */
    PC_ERR_UNKNOWN_ETHERTYPE = 7,     /* not IP: ethertype/SLL protocol/null family unknown (ARP, LLDP, ...) */
    PC_ERR_UNKNOWN_LINKTYPE = 8,      /* a link type the decoder does not know */
    PC_ERR_TOO_MANY_EXT_HEADERS = 9,  /* IPv6 extension header chain longer than the bound */
    PC_ERR_TOO_MANY_VLAN_TAGS = 10,   /* more 802.1Q/802.1ad tags than the bound */
    PC_ERR_BAD_L4_HEADER = 11,        /* TCP data offset below 5, UDP length below 8 */
    PC_ERR_FRAGMENT_OVERLAP = 12,     /* a later fragment overlapping the L4 header (RFC 1858) */
    PC_ERR_FRAGMENT_UNMATCHED = 13,   /* later fragment whose first fragment is not in the table (unseen or evicted): no ports */
    PC_ERR_COUNT = 14
};

typedef struct PacketHeader {
    uint64_t ts_ns;        /*  0: timestamp, ns since the Unix epoch */
    uint8_t src_addr[16];  /*  8: network order; IPv4 as ::ffff:a.b.c.d */
    uint8_t dst_addr[16];  /* 24: network order; IPv4 as ::ffff:a.b.c.d */
    uint32_t pkt_len;      /* 40: length on the wire */
    uint32_t ifindex;      /* 44: interface index / port id */
    uint16_t sport;        /* 48: host order, valid with PC_FLAG_HAS_PORTS */
    uint16_t dport;        /* 50: host order, valid with PC_FLAG_HAS_PORTS */
    uint8_t ip_version;    /* 52: 4, 6, or 0 if not IP */
    uint8_t protocol;      /* 53: L4 protocol number */
    uint8_t tcp_flags;     /* 54: TCP flags byte */
    uint8_t flags;         /* 55: PC_FLAG_* bits */
    uint8_t icmp_type;     /* 56 */
    uint8_t icmp_code;     /* 57 */
    uint8_t error_kind;    /* 58: decode error reason, 0 = none */
    uint8_t reserved;      /* 59: explicit padding, always 0 */
    uint32_t frag_id;      /* 60: IP fragment identification */
} PacketHeader;

_Static_assert(sizeof(PacketHeader) == 64, "PacketHeader must be 64 bytes");
_Static_assert(_Alignof(PacketHeader) == 8, "PacketHeader must be 8-aligned");
_Static_assert(offsetof(PacketHeader, src_addr) == 8, "src_addr offset");
_Static_assert(offsetof(PacketHeader, pkt_len) == 40, "pkt_len offset");
_Static_assert(offsetof(PacketHeader, sport) == 48, "sport offset");
_Static_assert(offsetof(PacketHeader, flags) == 55, "flags offset");
_Static_assert(offsetof(PacketHeader, frag_id) == 60, "frag_id offset");

/* The layout as the C compiler sees it, for the cross-layer ABI test. */
typedef struct pc_field {
    const char *name;
    size_t offset;
    size_t size;
} pc_field;

#define PC_FIELD(f) {#f, offsetof(PacketHeader, f), sizeof(((PacketHeader *)0)->f)}

/* Every field of PacketHeader in declaration order; *n receives the count. */
static inline const pc_field *pc_header_fields(size_t *n) {
    static const pc_field fields[] = {
        PC_FIELD(ts_ns),     PC_FIELD(src_addr),  PC_FIELD(dst_addr),   PC_FIELD(pkt_len),
        PC_FIELD(ifindex),   PC_FIELD(sport),     PC_FIELD(dport),      PC_FIELD(ip_version),
        PC_FIELD(protocol),  PC_FIELD(tcp_flags), PC_FIELD(flags),      PC_FIELD(icmp_type),
        PC_FIELD(icmp_code), PC_FIELD(error_kind), PC_FIELD(reserved),  PC_FIELD(frag_id),
    };
    *n = sizeof(fields) / sizeof(fields[0]);
    return fields;
}

#endif /* PYCLASSIFY_HEADER_BATCH_H */
