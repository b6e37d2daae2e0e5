# cython: language_level=3
# Generated from the Rust engine by rust/core/src/abi/headers.rs: do not edit.
# Regenerate with `cargo run --manifest-path rust/Cargo.toml -p pyclassify-core --bin abi-headers`;
# `cargo test` fails while this file differs from what the generator writes.
# Declarations of native/engine_api.h: the Rust engine's C function table (via a PyCapsule).
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

from header_batch cimport PacketHeader, pc_record_layout


cdef extern from "engine_api.h" nogil:
    enum:
        PC_ENGINE_ABI_VERSION
        PC_CAPI_OK
        PC_CAPI_NULL
        PC_CAPI_PANIC
        PC_QUOTE_VALID
        PC_HTTP_AWAITS
        PC_HTTP_REQUEST
        PC_HTTP_TABLE_FULL
        PC_HTTP_ERROR
    const char *PC_ENGINE_CAPSULE

    ctypedef struct pc_engine:
        pass
    ctypedef struct pc_conntrack:
        pass
    ctypedef struct pc_http:
        pass

    ctypedef struct pc_quote:
        uint8_t src_addr[16]
        uint8_t dst_addr[16]
        uint16_t sport
        uint16_t dport
        uint8_t protocol
        uint8_t icmp_type
        uint8_t flags
        uint8_t reserved

    ctypedef struct pc_side_verdict:
        uint8_t present
        uint8_t allow
        uint8_t reason
        uint8_t source_kind
        int32_t tier
        int32_t source
        int32_t rule
        uint8_t logs
        uint8_t awaits
        uint8_t reserved[2]

    ctypedef struct pc_verdict:
        uint8_t allow
        uint8_t reason
        uint8_t ct_state
        uint8_t http
        pc_side_verdict egress
        pc_side_verdict ingress

    ctypedef struct pc_revoked_flow:
        uint8_t src_addr[16]
        uint8_t dst_addr[16]
        uint16_t sport
        uint16_t dport
        uint8_t protocol
        uint8_t ip_version
        uint8_t reserved[2]

    ctypedef struct pc_engine_api:
        uint32_t abi_version
        uint32_t header_size
        uint32_t verdict_size
        uint32_t quote_size
        uint32_t revoked_size
        int32_t (*judge)(const pc_engine *engine, pc_conntrack *ct, const PacketHeader *headers, const pc_quote *quotes, size_t n, pc_verdict *out, uint8_t pod_allow, uint8_t host_allow) noexcept nogil
        int32_t (*judge_via)(const pc_engine *engine, const PacketHeader *headers, size_t n, int64_t endpoint, uint8_t ingress, pc_verdict *out, uint8_t pod_allow, uint8_t host_allow) noexcept nogil
        pc_conntrack * (*ct_new)(size_t max_entries, uint8_t tcp_loose) noexcept nogil
        void (*ct_free)(pc_conntrack *ct) noexcept nogil
        size_t (*ct_len)(const pc_conntrack *ct) noexcept nogil
        size_t (*ct_stats)(const pc_conntrack *ct, uint64_t *out, size_t n) noexcept nogil
        size_t (*ct_expire)(pc_conntrack *ct, uint64_t now_ns, size_t budget) noexcept nogil
        ssize_t (*ct_revalidate)(pc_conntrack *ct, const pc_engine *engine, uint8_t pod_allow, uint8_t host_allow, uint64_t now_ns, pc_revoked_flow *out, size_t cap) noexcept nogil
        int32_t (*dns_learn)(const pc_engine *engine, const uint8_t *payload, size_t len, uint64_t now_ns, uint8_t tcp, uint8_t *error) noexcept nogil
        pc_http * (*http_new)(size_t cap) noexcept nogil
        void (*http_free)(pc_http *conns) noexcept nogil
        int32_t (*http_watch)(pc_http *conns, const PacketHeader *syn, uint32_t next_seq) noexcept nogil
        int32_t (*http_judge)(const pc_engine *engine, pc_http *conns, const PacketHeader *header, uint32_t seq, const uint8_t *payload, size_t len, uint8_t pod_allow, uint8_t host_allow, pc_verdict *out) noexcept nogil
        int32_t (*judge_http)(const pc_engine *engine, pc_conntrack *ct, pc_http *conns, const PacketHeader *headers, const pc_quote *quotes, const uint8_t *const *payloads, const uint32_t *lens, const uint32_t *seqs, size_t n, pc_verdict *out, uint8_t pod_allow, uint8_t host_allow) noexcept nogil

    ctypedef struct pc_engine_ref:
        const pc_engine_api *api
        const pc_engine *engine

    const pc_record_layout *pc_engine_api_layouts(size_t *n)
