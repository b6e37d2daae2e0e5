//! The engine's C ABI: a table of `extern "C"` functions that Cython's live loops (NFQUEUE,
//! AF_PACKET) call without the GIL and without Python objects per packet. The Python module
//! hands it out in a PyCapsule together with an engine handle (`rust/py/src/engine.rs`);
//! `native/engine_api.h` and `.pxd` are generated from this file and the records it passes
//! (`crate::abi`).
//!
//! No panic crosses this boundary: every entry point catches unwinding and returns an error code.

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::batch::PacketHeader;
use crate::conntrack::{ConnTrack, CtConfig, CtStats, FlowKey, QuotedTuple};
use std::sync::Mutex;

use crate::engine::forward::{classify_forward, Via};
use crate::engine::judge::{judge_segment, Segment, SegmentStep};
use crate::engine::{Defaults, Judge, PacketVerdict, Snapshot as Engine, HTTP_TABLE_FULL, PACKET_ESTABLISHED};
use crate::http::HttpConns;

/// The connections admitted provisionally by `http` rules, shared by the loops that admit them
/// (`http_watch`, at the SYN) and the HTTP loop that reads them (`http_judge`).
pub struct SharedHttp(Mutex<HttpConns>);

/// How long a watched HTTP connection may go without a client segment before a full table
/// forgets it (the kernel tracks the connection itself; this table only learns its end from a
/// FIN or RST of the client).
const HTTP_IDLE_NS: u64 = 300_000_000_000;

/// Bumped on any change to the table or the structs it passes. `EngineClient` (native/) refuses
/// an engine of another version, on creation and on every swap.
pub const ENGINE_ABI_VERSION: u32 = 9;

/// The name of the PyCapsule that carries an engine handle (`EngineRef`).
pub const ENGINE_CAPSULE: &std::ffi::CStr = c"pyclassify._engine.EngineRef";

/// Return codes.
pub const CAPI_OK: i32 = 0;
pub const CAPI_NULL: i32 = -1;
pub const CAPI_PANIC: i32 = -2;

crate::abi_record! {
/// A connection revoked by revalidation, in the original direction (40 bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RevokedFlow as "pc_revoked_flow" {
    /// Network order; IPv4 as IPv4-mapped IPv6.
    pub src_addr: [u8; 16],
    /// Network order; IPv4 as IPv4-mapped IPv6.
    pub dst_addr: [u8; 16],
    pub sport: u16,
    pub dport: u16,
    pub protocol: u8,
    pub ip_version: u8,
    /// Always 0.
    pub reserved: [u8; 2],
}
}

const _: () = assert!(std::mem::size_of::<RevokedFlow>() == 40);

/// The function pointers of [`EngineApi`] in order, as C declares them:
/// `(name, return type, parameters, doc)`. `crate::abi` writes `pc_engine_api` from this list; the
/// const assertion below and the C header's `_Static_assert` hold both to the same size.
pub const API_FUNCTIONS: &[(&str, &str, &str, &str)] = &[
    (
        "judge",
        "int32_t",
        "const pc_engine *engine, pc_conntrack *ct, const PacketHeader *headers, const pc_quote *quotes, \
         size_t n, pc_verdict *out, uint8_t pod_allow, uint8_t host_allow",
        "judges n headers into out (ct may be NULL for per-packet judgement, quotes may be NULL)",
    ),
    (
        "judge_via",
        "int32_t",
        "const pc_engine *engine, const PacketHeader *headers, size_t n, int64_t endpoint, uint8_t ingress, \
         pc_verdict *out, uint8_t pod_allow, uint8_t host_allow",
        "judges n headers of routed traffic by a host endpoint's forward hook (applyOnForward policy) into out: \
         endpoint (< 0: none) is the subject of the side the packet crosses (ingress: it arrived by its interface)",
    ),
    (
        "ct_new",
        "pc_conntrack *",
        "size_t max_entries, uint8_t tcp_loose",
        "a new connection tracker (NULL on a bad configuration)",
    ),
    ("ct_free", "void", "pc_conntrack *ct", "frees a tracker of ct_new"),
    ("ct_len", "size_t", "const pc_conntrack *ct", "the number of tracked connections"),
    (
        "ct_stats",
        "size_t",
        "const pc_conntrack *ct, uint64_t *out, size_t n",
        "writes the first n of the tracker's counters (CT_STATS_NAMES order) to out; returns how many it keeps",
    ),
    (
        "ct_expire",
        "size_t",
        "pc_conntrack *ct, uint64_t now_ns, size_t budget",
        "expires idle entries, at most budget slots examined; returns how many were removed",
    ),
    (
        "ct_revalidate",
        "ssize_t",
        "pc_conntrack *ct, const pc_engine *engine, uint8_t pod_allow, uint8_t host_allow, \
         uint64_t now_ns, pc_revoked_flow *out, size_t cap",
        "re-judges every tracked connection, removes the denied ones, writes up to cap to out; \
         returns how many were revoked (may exceed cap), or < 0",
    ),
    (
        "dns_learn",
        "int32_t",
        "const pc_engine *engine, const uint8_t *payload, size_t len, uint64_t now_ns, uint8_t tcp, uint8_t *error",
        "learns the DNS answers of one UDP payload (tcp: one TCP payload of length-prefixed messages) into the \
         engine's domain facts; returns how many new facts, or < 0; *error: 0, or 1 + the DNS_ERROR_NAMES index",
    ),
    (
        "http_new",
        "pc_http *",
        "size_t cap",
        "a table of at most cap connections admitted provisionally by http rules \
      (thread-safe: the loops that admit connections and the one that reads them share it)",
    ),
    ("http_free", "void", "pc_http *conns", "frees a table of http_new"),
    (
        "http_watch",
        "int32_t",
        "pc_http *conns, const PacketHeader *syn, uint32_t next_seq",
        "follows the connection a SYN opens, admitted provisionally; next_seq: its client's first byte (the \
         SYN's sequence number + 1); returns 1, 0 when the table is full (deny it), or < 0",
    ),
    (
        "http_judge",
        "int32_t",
        "const pc_engine *engine, pc_http *conns, const PacketHeader *header, uint32_t seq, const uint8_t *payload, \
         size_t len, uint8_t pod_allow, uint8_t host_allow, pc_verdict *out",
        "one client-to-server TCP segment of a connection http_watch follows: reads it, judges each request it \
         completes into out; returns 1 to let it pass, 2 to drop it alone (after a gap in what was read), 0 to \
         cut the connection (a request denied, the stream broken, a connection not followed), or < 0",
    ),
    (
        "judge_http",
        "int32_t",
        "const pc_engine *engine, pc_conntrack *ct, pc_http *conns, const PacketHeader *headers, \
         const pc_quote *quotes, const uint8_t *const *payloads, const uint32_t *lens, const uint32_t *seqs, size_t n, \
         pc_verdict *out, uint8_t pod_allow, uint8_t host_allow",
        "judge with this tracker and http rules read in line (the AF_PACKET bridge): each header's TCP payload \
         (payloads[i], lens[i] bytes, its first byte's sequence number seqs[i]; null or 0: none); a new connection \
         whose verdict awaits its request is admitted provisionally and followed in conns, each request judged at \
         the packet that completes it, the connection revoked at the first denied (out: http REQUEST or ERROR+k, \
         allow 0); returns 0 or < 0",
    ),
];

/// Five `u32` sizes and versions, padded to pointer alignment, then the function pointers.
pub const ENGINE_API_SIZE: usize = std::mem::size_of::<EngineApi>();
const _: () = assert!(ENGINE_API_SIZE == 24 + API_FUNCTIONS.len() * std::mem::size_of::<usize>());

#[repr(C)]
pub struct EngineApi {
    pub abi_version: u32,
    pub header_size: u32,
    pub verdict_size: u32,
    pub quote_size: u32,
    pub revoked_size: u32,
    /// Judges `n` headers into `out` (see `Engine::classify_tracked`; `ct` may be null for
    /// per-packet judgement, `quotes` may be null).
    pub judge: unsafe extern "C" fn(
        engine: *const Engine,
        ct: *mut ConnTrack,
        headers: *const PacketHeader,
        quotes: *const QuotedTuple,
        n: usize,
        out: *mut PacketVerdict,
        pod_allow: u8,
        host_allow: u8,
    ) -> i32,
    /// Judges `n` headers of routed traffic by a host endpoint's forward hook into `out`
    /// (`engine::forward`): `endpoint` (< 0: none) is the subject of the side the packet crosses.
    pub judge_via: unsafe extern "C" fn(
        engine: *const Engine,
        headers: *const PacketHeader,
        n: usize,
        endpoint: i64,
        ingress: u8,
        out: *mut PacketVerdict,
        pod_allow: u8,
        host_allow: u8,
    ) -> i32,
    /// A new connection tracker (null on a bad configuration).
    pub ct_new: unsafe extern "C" fn(max_entries: usize, tcp_loose: u8) -> *mut ConnTrack,
    pub ct_free: unsafe extern "C" fn(ct: *mut ConnTrack),
    pub ct_len: unsafe extern "C" fn(ct: *const ConnTrack) -> usize,
    /// Writes the first `n` of the tracker's counters, in [`CT_STATS_NAMES`] order, to `out`;
    /// returns how many counters the tracker keeps.
    pub ct_stats: unsafe extern "C" fn(ct: *const ConnTrack, out: *mut u64, n: usize) -> usize,
    /// Expires idle entries, at most `budget` slots examined; returns how many were removed.
    pub ct_expire: unsafe extern "C" fn(ct: *mut ConnTrack, now_ns: u64, budget: usize) -> usize,
    /// Re-judges every tracked connection against `engine`, removes the denied ones and writes
    /// up to `cap` of them to `out`; returns how many were revoked (may exceed `cap`), or < 0.
    pub ct_revalidate: unsafe extern "C" fn(
        ct: *mut ConnTrack,
        engine: *const Engine,
        pod_allow: u8,
        host_allow: u8,
        now_ns: u64,
        out: *mut RevokedFlow,
        cap: usize,
    ) -> isize,
    /// Learns the DNS answers of one payload into the engine's domain facts (a UDP message, or
    /// with `tcp` a TCP payload of length-prefixed ones); returns the new facts, or < 0.
    /// `*error`: 0, or 1 + the index of the malformation in [`crate::dns::DNS_ERROR_NAMES`].
    pub dns_learn: unsafe extern "C" fn(
        engine: *const Engine,
        payload: *const u8,
        len: usize,
        now_ns: u64,
        tcp: u8,
        error: *mut u8,
    ) -> i32,
    /// A table of at most `cap` connections admitted provisionally by `http` rules.
    pub http_new: unsafe extern "C" fn(cap: usize) -> *mut SharedHttp,
    pub http_free: unsafe extern "C" fn(conns: *mut SharedHttp),
    /// Follows the connection `syn` opens from its client's byte `next_seq`: 1, 0 when full.
    pub http_watch: unsafe extern "C" fn(conns: *mut SharedHttp, syn: *const PacketHeader, next_seq: u32) -> i32,
    /// One client-to-server TCP segment (`seq`, `payload`) of a connection `http_watch`
    /// follows: returns 1 to let it pass, 2 to drop it alone, 0 to cut the connection, or < 0;
    /// `out` is the judgement of the last request it completed (`engine::judge::judge_segment`).
    pub http_judge: unsafe extern "C" fn(
        engine: *const Engine,
        conns: *mut SharedHttp,
        header: *const PacketHeader,
        seq: u32,
        payload: *const u8,
        len: usize,
        pod_allow: u8,
        host_allow: u8,
        out: *mut PacketVerdict,
    ) -> i32,
    /// Judges with the tracker `ct` and `http` rules read in line: each header's TCP payload
    /// (`payloads[i]`, `lens[i]` bytes from sequence number `seqs[i]`) goes to the connections
    /// `conns` follows (`Judge::classify_tracked_http`); 0, or < 0.
    pub judge_http: unsafe extern "C" fn(
        engine: *const Engine,
        ct: *mut ConnTrack,
        conns: *mut SharedHttp,
        headers: *const PacketHeader,
        quotes: *const QuotedTuple,
        payloads: *const *const u8,
        lens: *const u32,
        seqs: *const u32,
        n: usize,
        out: *mut PacketVerdict,
        pod_allow: u8,
        host_allow: u8,
    ) -> i32,
}

/// The one table.
pub static ENGINE_API: EngineApi = EngineApi {
    abi_version: ENGINE_ABI_VERSION,
    header_size: std::mem::size_of::<PacketHeader>() as u32,
    verdict_size: std::mem::size_of::<PacketVerdict>() as u32,
    quote_size: std::mem::size_of::<QuotedTuple>() as u32,
    revoked_size: std::mem::size_of::<RevokedFlow>() as u32,
    judge,
    judge_via,
    ct_new,
    ct_free,
    ct_len,
    ct_stats,
    ct_expire,
    ct_revalidate,
    dns_learn,
    http_new,
    http_free,
    http_watch,
    http_judge,
    judge_http,
};

unsafe extern "C" fn http_new(cap: usize) -> *mut SharedHttp {
    catch_unwind(|| {
        let conns = HttpConns::new(cap, crate::http::DEFAULT_MAX_HEAD, crate::http::DEFAULT_MAX_SEGMENTS);
        Box::into_raw(Box::new(SharedHttp(Mutex::new(conns))))
    })
    .unwrap_or(std::ptr::null_mut())
}

unsafe extern "C" fn http_free(conns: *mut SharedHttp) {
    if !conns.is_null() {
        // SAFETY: a pointer of `http_new`, freed once.
        drop(unsafe { Box::from_raw(conns) });
    }
}

unsafe extern "C" fn http_watch(conns: *mut SharedHttp, syn: *const PacketHeader, next_seq: u32) -> i32 {
    // SAFETY: the caller passes a table of `http_new` and one header.
    let (Some(conns), Some(h)) = (unsafe { conns.as_ref() }, unsafe { syn.as_ref() }) else { return CAPI_NULL };
    let result = catch_unwind(AssertUnwindSafe(|| {
        let mut conns = conns.0.lock().unwrap_or_else(|e| e.into_inner());
        let key = FlowKey::new(h.src_addr, h.dst_addr, h.sport, h.dport, h.protocol);
        i32::from(conns.watch(key, Some(next_seq), h.ts_ns, |_, last| h.ts_ns.saturating_sub(last) < HTTP_IDLE_NS))
    }));
    result.unwrap_or(CAPI_PANIC)
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn http_judge(
    engine: *const Engine,
    conns: *mut SharedHttp,
    header: *const PacketHeader,
    seq: u32,
    payload: *const u8,
    len: usize,
    pod_allow: u8,
    host_allow: u8,
    out: *mut PacketVerdict,
) -> i32 {
    // SAFETY: the caller passes a live engine, its own table, one header and output record, and
    // `len` readable bytes.
    let (Some(engine), Some(conns), Some(h), Some(out)) =
        (unsafe { engine.as_ref() }, unsafe { conns.as_ref() }, unsafe { header.as_ref() }, unsafe { out.as_mut() })
    else {
        return CAPI_NULL;
    };
    if len > 0 && payload.is_null() {
        return CAPI_NULL;
    }
    let data = if len == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(payload, len) } };
    let result = catch_unwind(AssertUnwindSafe(|| {
        *out = PacketVerdict { allow: 1, reason: PACKET_ESTABLISHED, ..Default::default() };
        let key = FlowKey::new(h.src_addr, h.dst_addr, h.sport, h.dport, h.protocol);
        let mut conns = conns.0.lock().unwrap_or_else(|e| e.into_inner());
        let step = judge_segment(engine, &mut conns, h, Segment { seq, data }, defaults(pod_allow, host_allow), out);
        if h.tcp_flags & (TCP_FIN | TCP_RST) != 0 {
            conns.forget(&key); // the client ends it: no more bytes to judge
        }
        match step {
            Some(SegmentStep::Pass) => 1,
            Some(SegmentStep::Hold) => 2,
            Some(SegmentStep::Cut) => 0,
            // not followed (ended by a FIN, the table was full, it was forgotten): a segment
            // without bytes (the last ACK of a close) passes, one with bytes cuts (fail closed)
            None if data.is_empty() => 1,
            None => {
                *out = PacketVerdict { allow: 0, http: HTTP_TABLE_FULL, ..Default::default() };
                0
            }
        }
    }));
    result.unwrap_or(CAPI_PANIC)
}

const TCP_FIN: u8 = 0x01;
const TCP_RST: u8 = 0x04;

unsafe extern "C" fn dns_learn(
    engine: *const Engine,
    payload: *const u8,
    len: usize,
    now_ns: u64,
    tcp: u8,
    error: *mut u8,
) -> i32 {
    if engine.is_null() || (len > 0 && payload.is_null()) {
        return CAPI_NULL;
    }
    let result = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the caller passes a live engine and `len` readable bytes.
        let engine = unsafe { &*engine };
        let bytes = if len == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(payload, len) } };
        engine.learn_dns(bytes, now_ns, tcp != 0)
    }));
    match result {
        Ok((learned, err)) => {
            if !error.is_null() {
                // SAFETY: the caller gives room for one byte.
                unsafe { error.write(err.map_or(0, |e| 1 + e as u8)) };
            }
            learned.min(i32::MAX as usize) as i32
        }
        Err(_) => CAPI_PANIC,
    }
}

fn defaults(pod_allow: u8, host_allow: u8) -> Defaults {
    Defaults { pod_allow: pod_allow != 0, host_allow: host_allow != 0 }
}

unsafe extern "C" fn judge(
    engine: *const Engine,
    ct: *mut ConnTrack,
    headers: *const PacketHeader,
    quotes: *const QuotedTuple,
    n: usize,
    out: *mut PacketVerdict,
    pod_allow: u8,
    host_allow: u8,
) -> i32 {
    if engine.is_null() || (n > 0 && (headers.is_null() || out.is_null())) {
        return CAPI_NULL;
    }
    let result = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the caller passes `n` valid headers, quotes (or null) and output records, and
        // a live engine and tracker it does not use elsewhere during the call.
        let engine = unsafe { &*engine };
        let (hs, vs) = if n == 0 {
            (&[][..], &mut [][..])
        } else {
            unsafe { (std::slice::from_raw_parts(headers, n), std::slice::from_raw_parts_mut(out, n)) }
        };
        let qs = (!quotes.is_null() && n > 0).then(|| unsafe { std::slice::from_raw_parts(quotes, n) });
        let d = defaults(pod_allow, host_allow);
        match unsafe { ct.as_mut() } {
            Some(ct) => engine.classify_tracked(ct, hs, qs, vs, d),
            None => engine.classify_detailed(hs, vs, d),
        }
    }));
    if result.is_ok() {
        CAPI_OK
    } else {
        CAPI_PANIC
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn judge_http(
    engine: *const Engine,
    ct: *mut ConnTrack,
    conns: *mut SharedHttp,
    headers: *const PacketHeader,
    quotes: *const QuotedTuple,
    payloads: *const *const u8,
    lens: *const u32,
    seqs: *const u32,
    n: usize,
    out: *mut PacketVerdict,
    pod_allow: u8,
    host_allow: u8,
) -> i32 {
    if engine.is_null()
        || ct.is_null()
        || conns.is_null()
        || (n > 0 && (headers.is_null() || out.is_null() || payloads.is_null() || lens.is_null() || seqs.is_null()))
    {
        return CAPI_NULL;
    }
    let result = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the caller passes `n` valid headers, quotes (or null), payload pointers with
        // their lengths and sequence numbers, and output records, and a live engine, tracker and
        // table; the tracker is not used elsewhere during the call (the table locks itself).
        let (engine, ct, conns) = unsafe { (&*engine, &mut *ct, &*conns) };
        if n == 0 {
            return;
        }
        let (hs, vs) = unsafe { (std::slice::from_raw_parts(headers, n), std::slice::from_raw_parts_mut(out, n)) };
        let qs = (!quotes.is_null()).then(|| unsafe { std::slice::from_raw_parts(quotes, n) });
        let (ps, ls, ss) = unsafe {
            (
                std::slice::from_raw_parts(payloads, n),
                std::slice::from_raw_parts(lens, n),
                std::slice::from_raw_parts(seqs, n),
            )
        };
        let segments: Vec<Segment<'_>> = (0..n)
            .map(|i| Segment {
                seq: ss[i],
                data: if ps[i].is_null() || ls[i] == 0 {
                    &[]
                } else {
                    unsafe { std::slice::from_raw_parts(ps[i], ls[i] as usize) }
                },
            })
            .collect();
        let mut http = conns.0.lock().unwrap_or_else(|p| p.into_inner());
        engine.classify_tracked_http(ct, Some((&mut http, &segments)), hs, qs, vs, defaults(pod_allow, host_allow));
    }));
    if result.is_ok() {
        CAPI_OK
    } else {
        CAPI_PANIC
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn judge_via(
    engine: *const Engine,
    headers: *const PacketHeader,
    n: usize,
    endpoint: i64,
    ingress: u8,
    out: *mut PacketVerdict,
    pod_allow: u8,
    host_allow: u8,
) -> i32 {
    if engine.is_null() || (n > 0 && (headers.is_null() || out.is_null())) {
        return CAPI_NULL;
    }
    let result = catch_unwind(AssertUnwindSafe(|| {
        if n == 0 {
            return;
        }
        // SAFETY: the caller passes a live engine, `n` valid headers and `n` output records.
        let engine = unsafe { &*engine };
        let (hs, vs) = unsafe { (std::slice::from_raw_parts(headers, n), std::slice::from_raw_parts_mut(out, n)) };
        let via = Via { endpoint: u32::try_from(endpoint).ok(), ingress: ingress != 0 };
        classify_forward(engine, hs, via, vs, defaults(pod_allow, host_allow));
    }));
    if result.is_ok() {
        CAPI_OK
    } else {
        CAPI_PANIC
    }
}

unsafe extern "C" fn ct_new(max_entries: usize, tcp_loose: u8) -> *mut ConnTrack {
    let cfg = CtConfig { max_entries, tcp_loose: tcp_loose != 0, ..CtConfig::default() };
    match catch_unwind(|| ConnTrack::new(cfg)) {
        Ok(Ok(ct)) => Box::into_raw(Box::new(ct)),
        _ => std::ptr::null_mut(),
    }
}

unsafe extern "C" fn ct_free(ct: *mut ConnTrack) {
    if !ct.is_null() {
        // SAFETY: `ct` came from `ct_new` and is freed once.
        drop(unsafe { Box::from_raw(ct) });
    }
}

unsafe extern "C" fn ct_len(ct: *const ConnTrack) -> usize {
    unsafe { ct.as_ref() }.map_or(0, ConnTrack::len)
}

/// The names of the counters `ct_stats` writes, in its order (the fields of [`CtStats`]).
pub const CT_STATS_NAMES: [&str; 16] = [
    "packets",
    "established",
    "reply",
    "related",
    "new",
    "untracked",
    "invalid",
    "inserts",
    "insert_failed",
    "expired",
    "early_drops",
    "revalidations",
    "revoked",
    "restored",
    "denied",
    "pickups",
];

fn ct_stats_values(s: &CtStats) -> [u64; 16] {
    [
        s.packets,
        s.established,
        s.reply,
        s.related,
        s.new,
        s.untracked,
        s.invalid,
        s.inserts,
        s.insert_failed,
        s.expired,
        s.early_drops,
        s.revalidations,
        s.revoked,
        s.restored,
        s.denied,
        s.pickups,
    ]
}

unsafe extern "C" fn ct_stats(ct: *const ConnTrack, out: *mut u64, n: usize) -> usize {
    let values = match unsafe { ct.as_ref() } {
        Some(ct) => ct_stats_values(&ct.stats()),
        None => return 0,
    };
    if !out.is_null() {
        for (i, v) in values.iter().take(n).enumerate() {
            // SAFETY: the caller gives room for `n` counters.
            unsafe { out.add(i).write(*v) };
        }
    }
    values.len()
}

unsafe extern "C" fn ct_expire(ct: *mut ConnTrack, now_ns: u64, budget: usize) -> usize {
    match unsafe { ct.as_mut() } {
        Some(ct) => catch_unwind(AssertUnwindSafe(|| ct.expire(now_ns, budget))).unwrap_or(0),
        None => 0,
    }
}

/// The header of a packet of `key` in its original direction (what policy judges).
pub fn header_of(key: &FlowKey) -> PacketHeader {
    let mut h = PacketHeader {
        src_addr: key.src.to_be_bytes(),
        dst_addr: key.dst.to_be_bytes(),
        ip_version: if key.src >> 32 == 0xffff { 4 } else { 6 },
        protocol: key.proto,
        sport: key.sport,
        ..PacketHeader::default()
    };
    if matches!(key.proto, 1 | 58) {
        h.icmp_type = (key.dport >> 8) as u8;
    } else {
        h.dport = key.dport;
        if matches!(key.proto, 6 | 17 | 132 | 136) {
            h.flags |= crate::batch::FLAG_HAS_PORTS;
        }
    }
    h
}

fn revoked(key: &FlowKey) -> RevokedFlow {
    let h = header_of(key);
    RevokedFlow {
        src_addr: h.src_addr,
        dst_addr: h.dst_addr,
        sport: key.sport,
        dport: key.dport,
        protocol: key.proto,
        ip_version: h.ip_version,
        reserved: [0; 2],
    }
}

unsafe extern "C" fn ct_revalidate(
    ct: *mut ConnTrack,
    engine: *const Engine,
    pod_allow: u8,
    host_allow: u8,
    now_ns: u64,
    out: *mut RevokedFlow,
    cap: usize,
) -> isize {
    let (Some(ct), Some(engine)) = (unsafe { ct.as_mut() }, unsafe { engine.as_ref() }) else {
        return CAPI_NULL as isize;
    };
    let d = defaults(pod_allow, host_allow);
    let result = catch_unwind(AssertUnwindSafe(|| {
        // a connection admitted provisionally (awaiting its HTTP request) stays admitted
        ct.revalidate(now_ns, |key| {
            engine.header_verdict(&header_of(key), d).is_some_and(|v| v.allow || v.awaits_request)
        })
    }));
    let Ok(keys) = result else { return CAPI_PANIC as isize };
    if !out.is_null() {
        for (i, key) in keys.iter().take(cap).enumerate() {
            // SAFETY: the caller provides room for `cap` records.
            unsafe { *out.add(i) = revoked(key) };
        }
    }
    keys.len() as isize
}
