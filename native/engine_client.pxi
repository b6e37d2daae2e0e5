# The native side of the engine's C ABI: the live loops (NFQUEUE, AF_PACKET) hold an
# `EngineClient` and call the Rust engine through its function table, without the GIL.
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_IsValid
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from engine_api cimport (PC_CAPI_NULL, PC_CAPI_OK, PC_ENGINE_ABI_VERSION, PC_ENGINE_CAPSULE, PC_HTTP_AWAITS,
                         PC_HTTP_ERROR, PC_HTTP_REQUEST, PC_HTTP_TABLE_FULL, pc_conntrack, pc_http,
                         pc_engine_ref, pc_quote, pc_revoked_flow, pc_verdict)

ENGINE_ABI_VERSION = PC_ENGINE_ABI_VERSION
# The counters of the C ABI's ct_stats, in its order (rust/core/src/capi.rs CT_STATS_NAMES;
# tests/native/test_engine_client.py holds the two lists equal).
CT_STATS_NAMES = ("packets", "established", "reply", "related", "new", "untracked", "invalid", "inserts",
                  "insert_failed", "expired", "early_drops", "revalidations", "revoked", "restored", "denied",
                  "pickups")
cdef enum:
    CT_STATS_MAX = 32


cdef pc_engine_ref *_engine_ref(capsule) except NULL:
    """The engine handle in ``capsule``, once its ABI is the one this module was built for:
    the version of the function table and the size of every record it passes."""
    if not PyCapsule_IsValid(capsule, PC_ENGINE_CAPSULE):
        raise TypeError("expected the capsule of pyclassify._engine.Engine.capsule()")
    cdef pc_engine_ref *ref = <pc_engine_ref *>PyCapsule_GetPointer(capsule, PC_ENGINE_CAPSULE)
    if ref == NULL or ref.api == NULL:
        raise TypeError("the engine capsule holds no engine")
    if ref.api.abi_version != PC_ENGINE_ABI_VERSION:
        raise RuntimeError(
            f"engine ABI mismatch: pyclassify._engine speaks engine ABI version {ref.api.abi_version}, "
            f"pyclassify._native was built for version {PC_ENGINE_ABI_VERSION}; rebuild both extensions "
            f"from the same source (pip install .)")
    theirs = (ref.api.header_size, ref.api.verdict_size, ref.api.quote_size, ref.api.revoked_size)
    ours = (sizeof(PacketHeader), sizeof(pc_verdict), sizeof(pc_quote), sizeof(pc_revoked_flow))
    if theirs != ours:
        raise RuntimeError(
            f"engine ABI mismatch: record sizes (header, verdict, quote, revoked) are {theirs} in "
            f"pyclassify._engine and {ours} in pyclassify._native; rebuild both extensions from the "
            f"same source (pip install .)")
    return ref


cdef class EngineClient:
    """An engine (from ``Engine.capsule()``) and, optionally, a connection tracker owned here.

    ``judge`` is what the live loops call per batch, in C; the Python method of the same name
    exists for tests and for callers that hold numpy arrays."""

    cdef object _capsule
    cdef pc_engine_ref *ref
    cdef pc_conntrack *ct
    cdef pc_http *http  # connections admitted provisionally by http rules (shared, see share_http)
    cdef EngineClient http_owner  # the client whose table ``http`` is, when not this one
    cdef public bint pod_allow
    cdef public bint host_allow
    # A forward-hook client (``via``): judges routed packets by a host endpoint's applyOnForward
    # policy, the endpoint ``via_endpoint`` (< 0: none) the subject of the side they cross.
    cdef readonly bint via
    cdef readonly bint via_ingress
    cdef public int64_t via_endpoint

    def __cinit__(self, capsule, bint conntrack=True, size_t max_entries=262144, bint tcp_loose=True,
                  bint pod_allow=True, bint host_allow=False, size_t http_connections=0, via=None):
        """``via``: ``(endpoint index or None, ingress)`` makes this a forward-hook client."""
        self.via = via is not None
        if via is not None:
            if conntrack:
                raise ValueError("a forward-hook client judges new connections only: no tracker")
            self.via_endpoint = -1 if via[0] is None else via[0]
            self.via_ingress = bool(via[1])
        self.ref = _engine_ref(capsule)
        self._capsule = capsule
        self.ct = NULL
        self.http = NULL
        if conntrack:
            self.ct = self.ref.api.ct_new(max_entries, tcp_loose)
            if self.ct == NULL:
                raise ValueError("invalid connection tracker configuration")
        if http_connections:
            self.http = self.ref.api.http_new(http_connections)
            if self.http == NULL:
                raise MemoryError()
        self.pod_allow = pod_allow
        self.host_allow = host_allow

    def __dealloc__(self):
        if self.ct != NULL and self.ref != NULL:
            self.ref.api.ct_free(self.ct)
            self.ct = NULL
        if self.http != NULL and self.ref != NULL and self.http_owner is None:
            self.ref.api.http_free(self.http)
        self.http = NULL

    def swap(self, capsule):
        """Use a new engine from now on (the tracker and its connections stay). Its ABI is
        checked as on creation; on a mismatch the current engine stays."""
        self.ref = _engine_ref(capsule)
        self._capsule = capsule

    cdef int judge_c(self, const PacketHeader *headers, const pc_quote *quotes, size_t n,
                     pc_verdict *out) noexcept nogil:
        if self.via:
            return self.ref.api.judge_via(self.ref.engine, headers, n, self.via_endpoint, self.via_ingress, out,
                                          self.pod_allow, self.host_allow)
        return self.ref.api.judge(self.ref.engine, self.ct, headers, quotes, n, out,
                                  self.pod_allow, self.host_allow)

    cdef int judge_http_c(self, const PacketHeader *headers, const pc_quote *quotes, const uint8_t *const *payloads,
                          const uint32_t *lens, const uint32_t *seqs, size_t n, pc_verdict *out) noexcept nogil:
        """``judge_c`` with http rules read in line (this client's tracker and table): each
        header's TCP payload ``payloads[i]`` (``lens[i]`` bytes from sequence number
        ``seqs[i]``). Without a tracker or a table, ``judge_c`` (such connections are denied)."""
        if self.ct == NULL or self.http == NULL or self.via:
            return self.judge_c(headers, quotes, n, out)
        return self.ref.api.judge_http(self.ref.engine, self.ct, self.http, headers, quotes, payloads, lens, seqs, n,
                                       out, self.pod_allow, self.host_allow)

    def share_http(self, EngineClient owner):
        """Follow connections in ``owner``'s table of http connections (the HTTP loop's): the
        loops that admit a connection provisionally (``http_watch_c``) and the loop that reads
        it share one table (thread-safe on the Rust side)."""
        if owner.http == NULL:
            raise ValueError("that client has no table of http connections")
        if self.http != NULL and self.http_owner is None:
            raise ValueError("this client has a table of its own")
        self.http = owner.http
        self.http_owner = owner

    cdef int http_watch_c(self, const PacketHeader *syn, uint32_t next_seq) noexcept nogil:
        """1: the connection the SYN opens is followed from its client's byte ``next_seq``; 0:
        the table is full (deny it); < 0: an error or no table."""
        if self.http == NULL:
            return PC_CAPI_NULL
        return self.ref.api.http_watch(self.http, syn, next_seq)

    cdef int http_judge_c(self, const PacketHeader *header, uint32_t seq, const uint8_t *payload, size_t n,
                          pc_verdict *out) noexcept nogil:
        """1: let the segment pass; 2: drop it alone; 0: cut its connection; < 0: an error (see
        capi http_judge)."""
        if self.http == NULL:
            return PC_CAPI_NULL
        return self.ref.api.http_judge(self.ref.engine, self.http, header, seq, payload, n,
                                       self.pod_allow, self.host_allow, out)

    cdef int dns_learn_c(self, const uint8_t *payload, size_t n, uint64_t now_ns, bint tcp,
                         uint8_t *error) noexcept nogil:
        return self.ref.api.dns_learn(self.ref.engine, payload, n, now_ns, tcp, error)

    def judge(self, headers, out, quotes=None):
        """Judge a header batch (``HEADER_DTYPE``) into ``out`` (``VERDICT_DTYPE``) through the
        C table, without the GIL."""
        cdef unsigned char[::1] hv = _as_bytes_view(headers, len(headers), sizeof(PacketHeader), "headers")
        cdef size_t n = len(headers)
        cdef unsigned char[::1] ov = _as_bytes_view(out, n, sizeof(pc_verdict), "out")
        cdef unsigned char[::1] qv
        cdef const pc_quote *q = NULL
        if quotes is not None:
            qv = _as_bytes_view(quotes, n, sizeof(pc_quote), "quotes")
            if n:
                q = <const pc_quote *>&qv[0]
        cdef int rc
        if n == 0:
            return
        with nogil:
            rc = self.judge_c(<const PacketHeader *>&hv[0], q, n, <pc_verdict *>&ov[0])
        if rc != PC_CAPI_OK:
            raise RuntimeError(f"engine call failed ({rc})")

    def revalidate(self, capsule=None, uint64_t now_ns=0, size_t cap=65536):
        """Re-judge every tracked connection (against ``capsule``'s engine, or the current one),
        remove the ones now denied, and return them as ``(src, dst, sport, dport, proto, ipver)``
        byte tuples (at most ``cap``) with the total count revoked."""
        cdef pc_engine_ref *ref = self.ref
        if capsule is not None:
            ref = _engine_ref(capsule)
        if self.ct == NULL:
            return 0, []
        cdef pc_revoked_flow *buf = <pc_revoked_flow *>PyMem_Malloc(max(cap, 1) * sizeof(pc_revoked_flow))
        if buf == NULL:
            raise MemoryError()
        cdef ssize_t got
        try:
            with nogil:
                got = self.ref.api.ct_revalidate(self.ct, ref.engine, self.pod_allow, self.host_allow,
                                                 now_ns, buf, cap)
            if got < 0:
                raise RuntimeError(f"engine call failed ({got})")
            flows = [
                (bytes(buf[i].src_addr[:16]), bytes(buf[i].dst_addr[:16]), buf[i].sport, buf[i].dport,
                 buf[i].protocol, buf[i].ip_version)
                for i in range(min(<size_t>got, cap))
            ]
            return got, flows
        finally:
            PyMem_Free(buf)

    @property
    def tracked(self):
        return self.ref.api.ct_len(self.ct) if self.ct != NULL else 0

    @property
    def ct_stats(self):
        """The tracker's counters since creation (``CT_STATS_NAMES``), all 0 without one."""
        cdef uint64_t values[CT_STATS_MAX]
        cdef size_t n = 0
        if self.ct != NULL:
            n = self.ref.api.ct_stats(self.ct, values, CT_STATS_MAX)
        if self.ct != NULL and n != len(CT_STATS_NAMES):
            raise RuntimeError(f"engine ABI mismatch: the tracker keeps {n} counters, expected {len(CT_STATS_NAMES)}")
        return {name: (values[i] if self.ct != NULL else 0) for i, name in enumerate(CT_STATS_NAMES)}
