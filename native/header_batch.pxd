# cython: language_level=3
# Generated from the Rust engine by rust/core/src/abi/headers.rs: do not edit.
# Regenerate with `cargo run --manifest-path rust/Cargo.toml -p pyclassify-core --bin abi-headers`;
# `cargo test` fails while this file differs from what the generator writes.
# Declarations of native/header_batch.h, the header batch shared with the Rust engine and numpy.
from libc.stdint cimport int32_t, uint8_t, uint16_t, uint32_t, uint64_t


cdef extern from "header_batch.h" nogil:
    enum:
        PC_FLAG_FRAGMENT
        PC_FLAG_FIRST_FRAGMENT
        PC_FLAG_TRUNCATED
        PC_FLAG_MALFORMED
        PC_FLAG_ICMP_ERROR
        PC_FLAG_HAS_PORTS
        PC_OUTER_HAS_KEY

    ctypedef struct PacketHeader:
        uint64_t ts_ns
        uint8_t src_addr[16]
        uint8_t dst_addr[16]
        uint32_t pkt_len
        uint32_t ifindex
        uint16_t sport
        uint16_t dport
        uint8_t ip_version
        uint8_t protocol
        uint8_t tcp_flags
        uint8_t flags
        uint8_t icmp_type
        uint8_t icmp_code
        uint8_t error_kind
        uint8_t encap
        uint32_t frag_id

    ctypedef struct pc_outer:
        uint8_t src_addr[16]
        uint8_t dst_addr[16]
        uint32_t vni
        uint16_t sport
        uint16_t dport
        uint16_t payload_type
        uint8_t ip_version
        uint8_t protocol
        uint8_t encap
        uint8_t depth
        uint8_t flags
        uint8_t reserved

    ctypedef struct FlowCounts:
        uint64_t first_ns
        uint64_t last_ns
        uint64_t packets
        uint64_t bytes
        uint64_t flows
        uint64_t position
        uint32_t src_name
        uint32_t dst_name
        uint8_t reported
        uint8_t orientation
        uint8_t has_src
        uint8_t has_dst
        uint8_t reported_at
        uint8_t reserved[3]

    ctypedef struct pc_field:
        const char *name
        size_t offset
        size_t size

    ctypedef struct pc_record_layout:
        const char *name
        size_t size
        size_t nfields
        const pc_field *fields

    const pc_field *pc_header_fields(size_t *n)
    const pc_record_layout *pc_header_batch_layouts(size_t *n)

    enum pc_error_kind:
        PC_ERR_NONE
        PC_ERR_TRUNCATED_LINK
        PC_ERR_TRUNCATED_IP
        PC_ERR_TRUNCATED_L4
        PC_ERR_BAD_IP_VERSION
        PC_ERR_BAD_IHL
        PC_ERR_BAD_TOTAL_LENGTH
        PC_ERR_UNKNOWN_ETHERTYPE
        PC_ERR_UNKNOWN_LINKTYPE
        PC_ERR_TOO_MANY_EXT_HEADERS
        PC_ERR_TOO_MANY_VLAN_TAGS
        PC_ERR_BAD_L4_HEADER
        PC_ERR_FRAGMENT_OVERLAP
        PC_ERR_FRAGMENT_UNMATCHED
        PC_ERR_TRUNCATED_TUNNEL
        PC_ERR_TUNNEL_UNSUPPORTED
        PC_ERR_TUNNEL_TOO_DEEP
        PC_ERR_TUNNEL_FRAGMENT
        PC_ERR_COUNT

    enum pc_encap_kind:
        PC_ENCAP_NONE
        PC_ENCAP_VXLAN
        PC_ENCAP_GENEVE
        PC_ENCAP_IPIP
        PC_ENCAP_IP6IP
        PC_ENCAP_GRE
        PC_ENCAP_COUNT
