/*
 * Generated from the Rust engine by rust/core/src/abi/headers.rs: do not edit.
 * Regenerate with `cargo run --manifest-path rust/Cargo.toml -p pyclassify-core --bin abi-headers`;
 * `cargo test` fails while this file differs from what the generator writes.
 *
 * The Rust engine's C ABI (rust/core/src/capi.rs): the function table and engine handle that
 * `pyclassify._engine.Engine.capsule()` hands out in a PyCapsule. Native loops call it without
 * the GIL. Opaque types: the engine and the connection tracker are Rust objects, only ever
 * passed back.
 */
#ifndef PYCLASSIFY_ENGINE_API_H
#define PYCLASSIFY_ENGINE_API_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "header_batch.h"

/* Bumped on any change to the table or the records it passes; EngineClient checks it. */
#define PC_ENGINE_ABI_VERSION 9
#define PC_ENGINE_CAPSULE "pyclassify._engine.EngineRef"

#define PC_CAPI_OK 0
#define PC_CAPI_NULL (-1)
#define PC_CAPI_PANIC (-2)

/* QuotedTuple.flags: the quoted header was decoded far enough to give the tuple. */
#define PC_QUOTE_VALID 1u

/* pc_verdict.http codes (engine::records). */
#define PC_HTTP_AWAITS 1
#define PC_HTTP_REQUEST 2
#define PC_HTTP_TABLE_FULL 15
#define PC_HTTP_ERROR 16

typedef struct pc_engine pc_engine;       /* Rust Engine */
typedef struct pc_conntrack pc_conntrack; /* Rust ConnTrack */
typedef struct pc_http pc_http;           /* Rust HttpConns */

/* pyclassify_core::conntrack::key::QuotedTuple: 40 bytes, 2-aligned. */
typedef struct pc_quote {
    uint8_t src_addr[16];    /*  0: Source address of the quoted packet (the sender of the packet that caused the error). */
    uint8_t dst_addr[16];    /* 16: Destination address of the quoted packet. */
    uint16_t sport;          /* 32: Quoted source port; for a quoted ICMP query, its identifier. */
    uint16_t dport;          /* 34: Quoted destination port; 0 for a quoted ICMP query. */
    uint8_t protocol;        /* 36: Quoted IP protocol. */
    uint8_t icmp_type;       /* 37: Quoted ICMP type (for a quoted ICMP query), else 0. */
    uint8_t flags;           /* 38: `QUOTED_VALID` when the decoder found a complete quoted header (ports included). */
    uint8_t reserved;        /* 39: Always 0. */
} pc_quote;

/* pyclassify_core::engine::records::SideVerdict: 20 bytes, 4-aligned. */
typedef struct pc_side_verdict {
    uint8_t present;         /*  0: 1 when this direction was judged. */
    uint8_t allow;           /*  1 */
    uint8_t reason;          /*  2: Why: 0 rule, 1 end of tier, 2 profile, 3 default (`pyclassify.engine.REASONS`). */
    uint8_t source_kind;     /*  3: 0 none, 1 policy, 2 profile. */
    int32_t tier;            /*  4: Tier index, -1 when absent. */
    int32_t source;          /*  8: Policy or profile index, -1 when absent. */
    int32_t rule;            /* 12: Rule index, -1 when absent. */
    uint8_t logs;            /* 16: How many Log rules this direction passed before its decision (at most 255); which ones, the engine's explanation of the flow says (`NativeEngine.evaluate`). */
    uint8_t awaits;          /* 17: 1 when denied but an `http` rule before the decision awaits the connection's request (`Decision::awaits_request`). */
    uint8_t reserved[2];     /* 18: Always 0. */
} pc_side_verdict;

/* pyclassify_core::engine::records::PacketVerdict: 44 bytes, 4-aligned. */
typedef struct pc_verdict {
    uint8_t allow;           /*  0 */
    uint8_t reason;          /*  1: `PACKET_POLICY`, `PACKET_ESTABLISHED`, `PACKET_MALFORMED`, `PACKET_INVALID`, `PACKET_DENIED_CONNECTION` or `PACKET_NOT_IP`. */
    uint8_t ct_state;        /*  2: Connection-tracking state code (`conntrack::code`), 0 without tracking. */
    uint8_t http;            /*  3: HTTP (`http` rules): `HTTP_NONE`; `HTTP_AWAITS` admitted provisionally (or, untracked, denied unless a request matches); `HTTP_REQUEST` judged with the request this packet completed; `HTTP_OUT_OF_ORDER` held back; `HTTP_TABLE_FULL` not followed, cut; `HTTP_ERROR + k`: denied, the stream broke (`http::HTTP_ERROR_NAMES[k]`). */
    pc_side_verdict egress;  /*  4 */
    pc_side_verdict ingress; /* 24 */
} pc_verdict;

/* pyclassify_core::capi::RevokedFlow: 40 bytes, 2-aligned. */
typedef struct pc_revoked_flow {
    uint8_t src_addr[16];    /*  0: Network order; IPv4 as IPv4-mapped IPv6. */
    uint8_t dst_addr[16];    /* 16: Network order; IPv4 as IPv4-mapped IPv6. */
    uint16_t sport;          /* 32 */
    uint16_t dport;          /* 34 */
    uint8_t protocol;        /* 36 */
    uint8_t ip_version;      /* 37 */
    uint8_t reserved[2];     /* 38: Always 0. */
} pc_revoked_flow;

/* The function table (capi::EngineApi). */
typedef struct pc_engine_api {
    uint32_t abi_version;
    uint32_t header_size;
    uint32_t verdict_size;
    uint32_t quote_size;
    uint32_t revoked_size;
    /* judges n headers into out (ct may be NULL for per-packet judgement, quotes may be NULL) */
    int32_t (*judge)(const pc_engine *engine, pc_conntrack *ct, const PacketHeader *headers, const pc_quote *quotes, size_t n, pc_verdict *out, uint8_t pod_allow, uint8_t host_allow);
    /* judges n headers of routed traffic by a host endpoint's forward hook (applyOnForward policy) into out: endpoint (< 0: none) is the subject of the side the packet crosses (ingress: it arrived by its interface) */
    int32_t (*judge_via)(const pc_engine *engine, const PacketHeader *headers, size_t n, int64_t endpoint, uint8_t ingress, pc_verdict *out, uint8_t pod_allow, uint8_t host_allow);
    /* a new connection tracker (NULL on a bad configuration) */
    pc_conntrack * (*ct_new)(size_t max_entries, uint8_t tcp_loose);
    /* frees a tracker of ct_new */
    void (*ct_free)(pc_conntrack *ct);
    /* the number of tracked connections */
    size_t (*ct_len)(const pc_conntrack *ct);
    /* writes the first n of the tracker's counters (CT_STATS_NAMES order) to out; returns how many it keeps */
    size_t (*ct_stats)(const pc_conntrack *ct, uint64_t *out, size_t n);
    /* expires idle entries, at most budget slots examined; returns how many were removed */
    size_t (*ct_expire)(pc_conntrack *ct, uint64_t now_ns, size_t budget);
    /* re-judges every tracked connection, removes the denied ones, writes up to cap to out; returns how many were revoked (may exceed cap), or < 0 */
    ssize_t (*ct_revalidate)(pc_conntrack *ct, const pc_engine *engine, uint8_t pod_allow, uint8_t host_allow, uint64_t now_ns, pc_revoked_flow *out, size_t cap);
    /* learns the DNS answers of one UDP payload (tcp: one TCP payload of length-prefixed messages) into the engine's domain facts; returns how many new facts, or < 0; *error: 0, or 1 + the DNS_ERROR_NAMES index */
    int32_t (*dns_learn)(const pc_engine *engine, const uint8_t *payload, size_t len, uint64_t now_ns, uint8_t tcp, uint8_t *error);
    /* a table of at most cap connections admitted provisionally by http rules (thread-safe: the loops that admit connections and the one that reads them share it) */
    pc_http * (*http_new)(size_t cap);
    /* frees a table of http_new */
    void (*http_free)(pc_http *conns);
    /* follows the connection a SYN opens, admitted provisionally; next_seq: its client's first byte (the SYN's sequence number + 1); returns 1, 0 when the table is full (deny it), or < 0 */
    int32_t (*http_watch)(pc_http *conns, const PacketHeader *syn, uint32_t next_seq);
    /* one client-to-server TCP segment of a connection http_watch follows: reads it, judges each request it completes into out; returns 1 to let it pass, 2 to drop it alone (after a gap in what was read), 0 to cut the connection (a request denied, the stream broken, a connection not followed), or < 0 */
    int32_t (*http_judge)(const pc_engine *engine, pc_http *conns, const PacketHeader *header, uint32_t seq, const uint8_t *payload, size_t len, uint8_t pod_allow, uint8_t host_allow, pc_verdict *out);
    /* judge with this tracker and http rules read in line (the AF_PACKET bridge): each header's TCP payload (payloads[i], lens[i] bytes, its first byte's sequence number seqs[i]; null or 0: none); a new connection whose verdict awaits its request is admitted provisionally and followed in conns, each request judged at the packet that completes it, the connection revoked at the first denied (out: http REQUEST or ERROR+k, allow 0); returns 0 or < 0 */
    int32_t (*judge_http)(const pc_engine *engine, pc_conntrack *ct, pc_http *conns, const PacketHeader *headers, const pc_quote *quotes, const uint8_t *const *payloads, const uint32_t *lens, const uint32_t *seqs, size_t n, pc_verdict *out, uint8_t pod_allow, uint8_t host_allow);
} pc_engine_api;

typedef struct pc_engine_ref {
    const pc_engine_api *api;
    const pc_engine *engine;
} pc_engine_ref;

_Static_assert(sizeof(pc_quote) == 40, "pc_quote size");
_Static_assert(_Alignof(pc_quote) == 2, "pc_quote alignment");
_Static_assert(offsetof(pc_quote, src_addr) == 0, "pc_quote.src_addr offset");
_Static_assert(offsetof(pc_quote, dst_addr) == 16, "pc_quote.dst_addr offset");
_Static_assert(offsetof(pc_quote, sport) == 32, "pc_quote.sport offset");
_Static_assert(offsetof(pc_quote, dport) == 34, "pc_quote.dport offset");
_Static_assert(offsetof(pc_quote, protocol) == 36, "pc_quote.protocol offset");
_Static_assert(offsetof(pc_quote, icmp_type) == 37, "pc_quote.icmp_type offset");
_Static_assert(offsetof(pc_quote, flags) == 38, "pc_quote.flags offset");
_Static_assert(offsetof(pc_quote, reserved) == 39, "pc_quote.reserved offset");

_Static_assert(sizeof(pc_side_verdict) == 20, "pc_side_verdict size");
_Static_assert(_Alignof(pc_side_verdict) == 4, "pc_side_verdict alignment");
_Static_assert(offsetof(pc_side_verdict, present) == 0, "pc_side_verdict.present offset");
_Static_assert(offsetof(pc_side_verdict, allow) == 1, "pc_side_verdict.allow offset");
_Static_assert(offsetof(pc_side_verdict, reason) == 2, "pc_side_verdict.reason offset");
_Static_assert(offsetof(pc_side_verdict, source_kind) == 3, "pc_side_verdict.source_kind offset");
_Static_assert(offsetof(pc_side_verdict, tier) == 4, "pc_side_verdict.tier offset");
_Static_assert(offsetof(pc_side_verdict, source) == 8, "pc_side_verdict.source offset");
_Static_assert(offsetof(pc_side_verdict, rule) == 12, "pc_side_verdict.rule offset");
_Static_assert(offsetof(pc_side_verdict, logs) == 16, "pc_side_verdict.logs offset");
_Static_assert(offsetof(pc_side_verdict, awaits) == 17, "pc_side_verdict.awaits offset");
_Static_assert(offsetof(pc_side_verdict, reserved) == 18, "pc_side_verdict.reserved offset");

_Static_assert(sizeof(pc_verdict) == 44, "pc_verdict size");
_Static_assert(_Alignof(pc_verdict) == 4, "pc_verdict alignment");
_Static_assert(offsetof(pc_verdict, allow) == 0, "pc_verdict.allow offset");
_Static_assert(offsetof(pc_verdict, reason) == 1, "pc_verdict.reason offset");
_Static_assert(offsetof(pc_verdict, ct_state) == 2, "pc_verdict.ct_state offset");
_Static_assert(offsetof(pc_verdict, http) == 3, "pc_verdict.http offset");
_Static_assert(offsetof(pc_verdict, egress) == 4, "pc_verdict.egress offset");
_Static_assert(offsetof(pc_verdict, ingress) == 24, "pc_verdict.ingress offset");

_Static_assert(sizeof(pc_revoked_flow) == 40, "pc_revoked_flow size");
_Static_assert(_Alignof(pc_revoked_flow) == 2, "pc_revoked_flow alignment");
_Static_assert(offsetof(pc_revoked_flow, src_addr) == 0, "pc_revoked_flow.src_addr offset");
_Static_assert(offsetof(pc_revoked_flow, dst_addr) == 16, "pc_revoked_flow.dst_addr offset");
_Static_assert(offsetof(pc_revoked_flow, sport) == 32, "pc_revoked_flow.sport offset");
_Static_assert(offsetof(pc_revoked_flow, dport) == 34, "pc_revoked_flow.dport offset");
_Static_assert(offsetof(pc_revoked_flow, protocol) == 36, "pc_revoked_flow.protocol offset");
_Static_assert(offsetof(pc_revoked_flow, ip_version) == 37, "pc_revoked_flow.ip_version offset");
_Static_assert(offsetof(pc_revoked_flow, reserved) == 38, "pc_revoked_flow.reserved offset");

_Static_assert(sizeof(pc_engine_api) == 136, "pc_engine_api size");

static const pc_field pc_fields_pc_quote[] = {
    {"src_addr", offsetof(pc_quote, src_addr), sizeof(((pc_quote *)0)->src_addr)},
    {"dst_addr", offsetof(pc_quote, dst_addr), sizeof(((pc_quote *)0)->dst_addr)},
    {"sport", offsetof(pc_quote, sport), sizeof(((pc_quote *)0)->sport)},
    {"dport", offsetof(pc_quote, dport), sizeof(((pc_quote *)0)->dport)},
    {"protocol", offsetof(pc_quote, protocol), sizeof(((pc_quote *)0)->protocol)},
    {"icmp_type", offsetof(pc_quote, icmp_type), sizeof(((pc_quote *)0)->icmp_type)},
    {"flags", offsetof(pc_quote, flags), sizeof(((pc_quote *)0)->flags)},
    {"reserved", offsetof(pc_quote, reserved), sizeof(((pc_quote *)0)->reserved)},
};
static const pc_field pc_fields_pc_side_verdict[] = {
    {"present", offsetof(pc_side_verdict, present), sizeof(((pc_side_verdict *)0)->present)},
    {"allow", offsetof(pc_side_verdict, allow), sizeof(((pc_side_verdict *)0)->allow)},
    {"reason", offsetof(pc_side_verdict, reason), sizeof(((pc_side_verdict *)0)->reason)},
    {"source_kind", offsetof(pc_side_verdict, source_kind), sizeof(((pc_side_verdict *)0)->source_kind)},
    {"tier", offsetof(pc_side_verdict, tier), sizeof(((pc_side_verdict *)0)->tier)},
    {"source", offsetof(pc_side_verdict, source), sizeof(((pc_side_verdict *)0)->source)},
    {"rule", offsetof(pc_side_verdict, rule), sizeof(((pc_side_verdict *)0)->rule)},
    {"logs", offsetof(pc_side_verdict, logs), sizeof(((pc_side_verdict *)0)->logs)},
    {"awaits", offsetof(pc_side_verdict, awaits), sizeof(((pc_side_verdict *)0)->awaits)},
    {"reserved", offsetof(pc_side_verdict, reserved), sizeof(((pc_side_verdict *)0)->reserved)},
};
static const pc_field pc_fields_pc_verdict[] = {
    {"allow", offsetof(pc_verdict, allow), sizeof(((pc_verdict *)0)->allow)},
    {"reason", offsetof(pc_verdict, reason), sizeof(((pc_verdict *)0)->reason)},
    {"ct_state", offsetof(pc_verdict, ct_state), sizeof(((pc_verdict *)0)->ct_state)},
    {"http", offsetof(pc_verdict, http), sizeof(((pc_verdict *)0)->http)},
    {"egress", offsetof(pc_verdict, egress), sizeof(((pc_verdict *)0)->egress)},
    {"ingress", offsetof(pc_verdict, ingress), sizeof(((pc_verdict *)0)->ingress)},
};
static const pc_field pc_fields_pc_revoked_flow[] = {
    {"src_addr", offsetof(pc_revoked_flow, src_addr), sizeof(((pc_revoked_flow *)0)->src_addr)},
    {"dst_addr", offsetof(pc_revoked_flow, dst_addr), sizeof(((pc_revoked_flow *)0)->dst_addr)},
    {"sport", offsetof(pc_revoked_flow, sport), sizeof(((pc_revoked_flow *)0)->sport)},
    {"dport", offsetof(pc_revoked_flow, dport), sizeof(((pc_revoked_flow *)0)->dport)},
    {"protocol", offsetof(pc_revoked_flow, protocol), sizeof(((pc_revoked_flow *)0)->protocol)},
    {"ip_version", offsetof(pc_revoked_flow, ip_version), sizeof(((pc_revoked_flow *)0)->ip_version)},
    {"reserved", offsetof(pc_revoked_flow, reserved), sizeof(((pc_revoked_flow *)0)->reserved)},
};

/* The layouts of this header's records as the C compiler sees them; *n receives the count. */
static inline const pc_record_layout *pc_engine_api_layouts(size_t *n) {
    static const pc_record_layout records[] = {
        {"pc_quote", sizeof(pc_quote), sizeof(pc_fields_pc_quote) / sizeof(pc_field), pc_fields_pc_quote},
        {"pc_side_verdict", sizeof(pc_side_verdict), sizeof(pc_fields_pc_side_verdict) / sizeof(pc_field), pc_fields_pc_side_verdict},
        {"pc_verdict", sizeof(pc_verdict), sizeof(pc_fields_pc_verdict) / sizeof(pc_field), pc_fields_pc_verdict},
        {"pc_revoked_flow", sizeof(pc_revoked_flow), sizeof(pc_fields_pc_revoked_flow) / sizeof(pc_field), pc_fields_pc_revoked_flow},
    };
    *n = sizeof(records) / sizeof(records[0]);
    return records;
}

#endif /* PYCLASSIFY_ENGINE_API_H */
