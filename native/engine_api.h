/* The Rust engine's C ABI (rust/core/src/capi.rs): the function table and engine handle that
 * `pyclassify._engine.Engine.capsule()` hands out in a PyCapsule named
 * "pyclassify._engine.EngineRef". Native loops call it without the GIL. Opaque types: the
 * engine and the connection tracker are Rust objects, only ever passed back. */
#ifndef PYCLASSIFY_ENGINE_API_H
#define PYCLASSIFY_ENGINE_API_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "header_batch.h"

#define PC_ENGINE_ABI_VERSION 1
#define PC_ENGINE_CAPSULE "pyclassify._engine.EngineRef"

#define PC_CAPI_OK 0
#define PC_CAPI_NULL (-1)
#define PC_CAPI_PANIC (-2)

typedef struct pc_engine pc_engine;      /* Rust Engine */
typedef struct pc_conntrack pc_conntrack; /* Rust ConnTrack */

/* An ICMP error's quoted flow (pyclassify.capture.QUOTE_DTYPE, conntrack QuotedTuple). */
typedef struct {
    uint8_t src_addr[16];
    uint8_t dst_addr[16];
    uint16_t sport;
    uint16_t dport;
    uint8_t protocol;
    uint8_t icmp_type;
    uint8_t flags;
    uint8_t reserved;
} pc_quote;

/* One direction's decision (pyclassify.engine.SIDE_DTYPE). */
typedef struct {
    uint8_t present;
    uint8_t allow;
    uint8_t reason;
    uint8_t source_kind;
    int32_t tier;
    int32_t source;
    int32_t rule;
} pc_side_verdict;

/* The per-packet output record (pyclassify.engine.VERDICT_DTYPE). */
typedef struct {
    uint8_t allow;
    uint8_t reason;
    uint8_t ct_state;
    uint8_t reserved;
    pc_side_verdict egress;
    pc_side_verdict ingress;
} pc_verdict;

/* A connection revoked by revalidation, original direction. */
typedef struct {
    uint8_t src_addr[16];
    uint8_t dst_addr[16];
    uint16_t sport;
    uint16_t dport;
    uint8_t protocol;
    uint8_t ip_version;
    uint8_t reserved[2];
} pc_revoked_flow;

typedef struct {
    uint32_t abi_version;
    uint32_t header_size;
    uint32_t verdict_size;
    uint32_t quote_size;
    int32_t (*judge)(const pc_engine *engine, pc_conntrack *ct, const PacketHeader *headers,
                     const pc_quote *quotes, size_t n, pc_verdict *out, uint8_t pod_allow,
                     uint8_t host_allow);
    pc_conntrack *(*ct_new)(size_t max_entries, uint8_t tcp_loose);
    void (*ct_free)(pc_conntrack *ct);
    size_t (*ct_len)(const pc_conntrack *ct);
    size_t (*ct_expire)(pc_conntrack *ct, uint64_t now_ns, size_t budget);
    ssize_t (*ct_revalidate)(pc_conntrack *ct, const pc_engine *engine, uint8_t pod_allow,
                             uint8_t host_allow, uint64_t now_ns, pc_revoked_flow *out,
                             size_t cap);
} pc_engine_api;

typedef struct {
    const pc_engine_api *api;
    const pc_engine *engine;
} pc_engine_ref;

_Static_assert(sizeof(pc_quote) == 40, "pc_quote is 40 bytes");
_Static_assert(sizeof(pc_side_verdict) == 16, "pc_side_verdict is 16 bytes");
_Static_assert(sizeof(pc_verdict) == 36, "pc_verdict is 36 bytes");
_Static_assert(sizeof(pc_revoked_flow) == 40, "pc_revoked_flow is 40 bytes");

#endif
