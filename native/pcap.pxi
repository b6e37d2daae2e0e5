# pcap / pcapng reader: capture records -> decoded header batch, without the GIL.
#
# Included by _native.pyx (after decode.pxi). A Reader reads from a buffer (an mmap of a file,
# or bytes) or streams from a file object with readinto() (stdin, pipes). Records are parsed and
# decoded in one nogil loop straight into the caller's numpy arrays; per packet it also reports
# where the captured bytes are (offset into the current window, captured length, link type) so
# that they can be written out unchanged.

cimport cython
from cpython.bytearray cimport PyByteArray_FromStringAndSize

cdef enum:
    FMT_PCAP = 1
    FMT_PCAPNG = 2
    ST_FULL = 0   # the batch is full
    ST_NEED = 1   # the next record is not complete in the window (self._need bytes needed)
    ST_END = 2    # the window is consumed
    ST_BAD = 3    # corrupt capture: stop (self._bad says why)
    N_ERR_SLOTS = 32  # above PC_ERR_COUNT
    MAX_RECORD = 0x4000000  # 64 MiB: no real capture has bigger records; bigger means corrupt
    LT_UNKNOWN_IF = 0xFFFFFFFF

cdef enum:
    BAD_NONE = 0
    BAD_RECORD_LENGTH = 1
    BAD_BLOCK_LENGTH = 2
    BAD_BYTE_ORDER = 3
    BAD_TRAILER = 4
    BAD_NO_MEMORY = 5

_BAD_MESSAGES = {
    BAD_RECORD_LENGTH: "record length out of range (corrupt capture)",
    BAD_BLOCK_LENGTH: "pcapng block length out of range or not a multiple of 4",
    BAD_BYTE_ORDER: "pcapng section header with an unknown byte-order magic",
    BAD_TRAILER: "pcapng block's trailing length differs from its leading length",
    BAD_NO_MEMORY: "out of memory for interface descriptions",
}

cdef struct Iface:
    uint32_t linktype
    uint32_t section
    uint32_t local_id
    uint8_t res_bin    # 0: units of 10^-res_exp s, 1: units of 2^-res_exp s
    uint8_t res_exp
    int64_t tsoffset_s


cdef uint64_t[20] POW10 = [
    1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000,
    10000000000, 100000000000, 1000000000000, 10000000000000, 100000000000000,
    1000000000000000, 10000000000000000, 100000000000000000, 1000000000000000000, 0,
]


cdef inline uint32_t rd32(const uint8_t *p, bint big) noexcept nogil:
    return be32(p) if big else le32(p)

cdef inline uint16_t rd16(const uint8_t *p, bint big) noexcept nogil:
    return be16(p) if big else <uint16_t>((<uint16_t>p[1] << 8) | p[0])

cdef inline uint64_t ticks_to_ns(uint64_t t, const Iface *f) noexcept nogil:
    cdef uint64_t ns, frac
    cdef int e = f.res_exp
    if not f.res_bin:
        if e == 9:
            ns = t
        elif e < 9:
            ns = t * POW10[9 - e]
        elif e - 9 < 19:
            ns = t // POW10[e - 9]
        else:
            ns = 0
    else:
        if e == 0:
            ns = t * 1000000000u
        elif e >= 64:
            ns = 0
        else:
            frac = t & ((<uint64_t>1 << e) - 1)
            ns = (t >> e) * 1000000000u
            if e <= 34:
                ns += (frac * 1000000000u) >> e
            else:
                ns += <uint64_t>((<double>frac) * 1e9 / (<double>(<uint64_t>1 << (e - 32)) * 4294967296.0))
    return ns + <uint64_t>(f.tsoffset_s * 1000000000)


cdef class Reader:
    """Reads a pcap or pcapng capture into header batches (see pyclassify.capture for the API).

    ``source`` is a buffer (an mmap of the file, bytes) or a binary file object with
    ``readinto`` (read in windows of ``chunk`` bytes: stdin, pipes, files read as a stream).
    Tunnels are opened (their inner packets decoded, the outer headers written to ``outers``)
    for VXLAN to ``vxlan_ports``, Geneve to ``geneve_ports``, IP in IP and GRE, unless
    ``decapsulate`` is false. Raises ValueError if the capture does not start with a pcap or
    pcapng header, or for a port that is not one.
    """

    cdef object _src
    cdef object _data
    cdef const uint8_t[::1] _view
    cdef const uint8_t *_base
    cdef size_t _len
    cdef size_t _pos
    cdef size_t _need
    cdef uint64_t _data_start
    cdef bint _eof
    cdef bint _done
    cdef size_t _chunk
    cdef int _fmt
    cdef bint _big
    cdef bint _nsec
    cdef Iface *_ifaces
    cdef size_t _n_ifaces
    cdef size_t _cap_ifaces
    cdef size_t _section_base
    cdef uint32_t _sections
    cdef FragTable *_ft
    cdef Tunnels _ports
    cdef Tunnels *_tp
    cdef uint64_t _counts[N_ERR_SLOTS]
    cdef uint64_t _packets
    cdef uint64_t _unknown_if
    cdef int _bad
    cdef uint64_t _bad_offset
    cdef list _problems

    def __cinit__(self):
        self._ft = frag_table_new()
        if self._ft == NULL:
            raise MemoryError()
        self._ifaces = NULL
        memset(self._counts, 0, sizeof(self._counts))

    def __dealloc__(self):
        frag_table_free(self._ft)
        free(self._ifaces)

    def __init__(self, source, size_t chunk=1 << 22, vxlan_ports=DEFAULT_VXLAN_PORTS,
                 geneve_ports=DEFAULT_GENEVE_PORTS, bint decapsulate=True):
        tunnels_set(&self._ports, vxlan_ports, geneve_ports)
        self._tp = &self._ports if decapsulate else NULL
        self._problems = []
        self._chunk = chunk if chunk >= 4096 else 4096
        if hasattr(source, "readinto"):
            self._src = source
            self._eof = False
            self._set_window(bytearray(0), 0)
            self._refill(24)
        else:
            self._src = None
            self._eof = True
            self._set_window(source, 0)
        self._read_file_header()

    # -- window management (with the GIL) --

    cdef _set_window(self, data, uint64_t start):
        self._data = data
        self._data_start = start
        self._pos = 0
        if len(data) == 0:
            self._view = None
            self._base = <const uint8_t *>""
            self._len = 0
        else:
            self._view = data
            self._base = &self._view[0]
            self._len = self._view.shape[0]

    cdef _refill(self, size_t need):
        """A new window: the unread rest of the old one plus at least what the stream gives."""
        cdef size_t rest = self._len - self._pos
        cdef size_t size = self._chunk
        cdef size_t got
        if rest + need > size:
            size = rest + need
        # not zeroed first (``bytearray(size)`` would be: a memset of every byte the capture
        # has, 6 % of a replay's time); what the stream does not fill is cut off below
        buf = PyByteArray_FromStringAndSize(NULL, size)
        if rest:
            buf[:rest] = self._data[self._pos:self._len]
        got = rest
        mv = memoryview(buf)
        while got < size:
            r = self._src.readinto(mv[got:])
            if not r:
                self._eof = True
                break
            got += r
        mv.release()
        del buf[got:]
        self._set_window(buf, self._data_start + self._pos)

    cdef _read_file_header(self):
        cdef const uint8_t *p = self._base
        cdef uint32_t magic
        if self._len < 4:
            raise ValueError("not a pcap or pcapng capture: shorter than a file header")
        magic = le32(p)
        if magic == 0x0A0D0D0A:
            self._fmt = FMT_PCAPNG
            return  # the section header is parsed as a block
        if magic == 0xA1B2C3D4 or magic == 0xA1B23C4D:
            self._big = False
        elif be32(p) == 0xA1B2C3D4 or be32(p) == 0xA1B23C4D:
            self._big = True
        else:
            raise ValueError(
                f"not a pcap or pcapng capture: unknown magic 0x{be32(p):08x} "
                "(expected a1b2c3d4, a1b23c4d or a pcapng section header)"
            )
        if self._len < 24:
            raise ValueError("truncated pcap file header (24 bytes expected)")
        self._fmt = FMT_PCAP
        self._nsec = rd32(p, self._big) == 0xA1B23C4D
        if self._add_iface(rd32(p + 20, self._big) & 0xFFFF, 0, 0, 0 if not self._nsec else 0) < 0:
            raise MemoryError()
        self._ifaces[0].res_exp = 9 if self._nsec else 6
        self._sections = 1
        self._pos = 24

    cdef int _add_iface(self, uint32_t linktype, uint32_t section, uint32_t local_id,
                        int unused) noexcept nogil:
        cdef Iface *grown
        if self._n_ifaces == self._cap_ifaces:
            grown = <Iface *>realloc(self._ifaces, (self._cap_ifaces * 2 + 4) * sizeof(Iface))
            if grown == NULL:
                return -1
            self._ifaces = grown
            self._cap_ifaces = self._cap_ifaces * 2 + 4
        memset(&self._ifaces[self._n_ifaces], 0, sizeof(Iface))
        self._ifaces[self._n_ifaces].linktype = linktype
        self._ifaces[self._n_ifaces].section = section
        self._ifaces[self._n_ifaces].local_id = local_id
        self._ifaces[self._n_ifaces].res_exp = 6
        self._n_ifaces += 1
        return 0

    # -- the record loop (without the GIL) --

    cdef int _parse(self, PacketHeader *hs, pc_quote *qs, pc_outer *os, uint64_t *offs, uint32_t *caps,
                    uint32_t *lts, Py_ssize_t max_n, Py_ssize_t *n_out) noexcept nogil:
        cdef Py_ssize_t n = 0
        cdef const uint8_t *p
        cdef size_t rem, blen, caplen, origlen, dstart
        cdef uint32_t btype, ifid, linktype
        cdef uint64_t ts
        cdef const Iface *f
        cdef int st = ST_FULL
        cdef pc_quote *q
        if self._tp != NULL:
            self._tp.headers = hs
            self._tp.outers = os
        while n < max_n:
            rem = self._len - self._pos
            p = self._base + self._pos
            if rem == 0:
                st = ST_END
                break
            if self._fmt == FMT_PCAP:
                if rem < 16:
                    self._need = 16
                    st = ST_NEED
                    break
                caplen = rd32(p + 8, self._big)
                origlen = rd32(p + 12, self._big)
                if caplen > MAX_RECORD:
                    self._bad = BAD_RECORD_LENGTH
                    st = ST_BAD
                    break
                if rem < 16 + caplen:
                    self._need = 16 + caplen
                    st = ST_NEED
                    break
                f = &self._ifaces[0]
                if self._nsec:
                    ts = <uint64_t>rd32(p, self._big) * 1000000000u + rd32(p + 4, self._big)
                else:
                    ts = <uint64_t>rd32(p, self._big) * 1000000000u + <uint64_t>rd32(p + 4, self._big) * 1000u
                q = &qs[n] if qs != NULL else NULL
                decode_one(p + 16, caplen, origlen, f.linktype, ts, 0, &hs[n], q, self._ft, self._tp)
                offs[n] = self._pos + 16
                caps[n] = <uint32_t>caplen
                lts[n] = f.linktype
                self._counts[hs[n].error_kind] += 1
                n += 1
                self._pos += 16 + caplen
                continue
            # pcapng: a block
            if rem < 12:
                self._need = 12
                st = ST_NEED
                break
            btype = rd32(p, self._big)
            if le32(p) == 0x0A0D0D0A:
                btype = 0x0A0D0D0A
                if le32(p + 8) == 0x1A2B3C4D:
                    self._big = False
                elif be32(p + 8) == 0x1A2B3C4D:
                    self._big = True
                else:
                    self._bad = BAD_BYTE_ORDER
                    st = ST_BAD
                    break
            blen = rd32(p + 4, self._big)
            if blen < 12 or (blen & 3) or blen > MAX_RECORD:
                self._bad = BAD_BLOCK_LENGTH
                st = ST_BAD
                break
            if rem < blen:
                self._need = blen
                st = ST_NEED
                break
            if rd32(p + blen - 4, self._big) != blen:
                self._bad = BAD_TRAILER
                st = ST_BAD
                break
            self._pos += blen
            if btype == 0x0A0D0D0A:
                if blen < 28:
                    self._bad = BAD_BLOCK_LENGTH
                    st = ST_BAD
                    break
                self._section_base = self._n_ifaces
                self._sections += 1
            elif btype == 1:
                if blen < 20:
                    self._bad = BAD_BLOCK_LENGTH
                    st = ST_BAD
                    break
                if self._add_iface(rd16(p + 8, self._big), self._sections - 1 if self._sections else 0,
                                   <uint32_t>(self._n_ifaces - self._section_base), 0) < 0:
                    self._bad = BAD_NO_MEMORY
                    st = ST_BAD
                    break
                self._idb_options(p + 16, blen - 20, &self._ifaces[self._n_ifaces - 1])
            elif btype == 6 or btype == 2 or btype == 3:
                if btype == 3:
                    if blen < 16:
                        self._bad = BAD_BLOCK_LENGTH
                        st = ST_BAD
                        break
                    ifid = 0
                    origlen = rd32(p + 8, self._big)
                    caplen = blen - 16
                    if origlen < caplen:
                        caplen = origlen
                    ts = 0
                    dstart = 12
                else:
                    if blen < 32:
                        self._bad = BAD_BLOCK_LENGTH
                        st = ST_BAD
                        break
                    if btype == 6:
                        ifid = rd32(p + 8, self._big)
                    else:
                        ifid = rd16(p + 8, self._big)
                    ts = (<uint64_t>rd32(p + 12, self._big) << 32) | rd32(p + 16, self._big)
                    caplen = rd32(p + 20, self._big)
                    origlen = rd32(p + 24, self._big)
                    dstart = 28
                    if caplen > blen - 32:
                        self._bad = BAD_RECORD_LENGTH
                        st = ST_BAD
                        break
                q = &qs[n] if qs != NULL else NULL
                if self._section_base + ifid < self._n_ifaces:
                    f = &self._ifaces[self._section_base + ifid]
                    linktype = f.linktype
                    if btype != 3:
                        ts = ticks_to_ns(ts, f)
                    ifid = <uint32_t>(self._section_base + ifid)
                else:
                    linktype = LT_UNKNOWN_IF
                    self._unknown_if += 1
                    ifid = LT_UNKNOWN_IF
                    ts = 0
                decode_one(p + dstart, caplen, origlen, linktype, ts, ifid, &hs[n], q, self._ft, self._tp)
                offs[n] = self._pos - blen + dstart
                caps[n] = <uint32_t>caplen
                lts[n] = linktype
                self._counts[hs[n].error_kind] += 1
                n += 1
            # other blocks (name resolution, statistics, decryption secrets, custom): skipped
        n_out[0] = n
        self._packets += n
        return st

    cdef void _idb_options(self, const uint8_t *p, size_t n, Iface *f) noexcept nogil:
        cdef size_t off = 0
        cdef uint16_t code, olen
        cdef uint64_t v
        while off + 4 <= n:
            code = rd16(p + off, self._big)
            olen = rd16(p + off + 2, self._big)
            off += 4
            if code == 0 or off + olen > n:
                return
            if code == 9 and olen >= 1:
                f.res_bin = (p[off] & 0x80) != 0
                f.res_exp = p[off] & 0x7F
            elif code == 14 and olen == 8:
                if self._big:
                    v = (<uint64_t>be32(p + off) << 32) | be32(p + off + 4)
                else:
                    v = (<uint64_t>le32(p + off + 4) << 32) | le32(p + off)
                f.tsoffset_s = <int64_t>v
            off += (olen + 3) & ~(<size_t>3)

    # -- the Python API --

    def read_into(self, headers, quotes, offsets, caplens, linktypes, outers=None):
        """Read and decode up to ``len(headers)`` packets; returns how many.

        headers: HEADER_DTYPE array; quotes: QUOTE_DTYPE array or None; offsets (uint64),
        caplens (uint32), linktypes (uint32): where each packet's captured bytes are in
        ``self.window`` (valid until the next call); outers: OUTER_DTYPE array or None, written
        where a header's ``encap`` is set. 0 means the capture is finished.
        """
        import numpy as np
        cdef Py_ssize_t max_n = len(headers)
        cdef Py_ssize_t n = 0, got = 0
        cdef int st
        cdef unsigned char[::1] hv = _as_bytes_view(headers, max_n, sizeof(PacketHeader), "headers")
        cdef unsigned char[::1] qv
        cdef uint64_t[::1] ov = offsets
        cdef uint32_t[::1] cv = caplens
        cdef uint32_t[::1] lv = linktypes
        cdef PacketHeader *hs = <PacketHeader *>&hv[0]
        cdef pc_quote *qs = NULL
        cdef unsigned char[::1] outv
        cdef pc_outer *os = NULL
        if ov.shape[0] < max_n or cv.shape[0] < max_n or lv.shape[0] < max_n:
            raise ValueError("offsets, caplens and linktypes must be as long as headers")
        if quotes is not None:
            qv = _as_bytes_view(quotes, max_n, sizeof(pc_quote), "quotes")
            qs = <pc_quote *>&qv[0]
        if outers is not None:
            outv = _as_bytes_view(outers, max_n, sizeof(pc_outer), "outers")
            os = <pc_outer *>&outv[0]
        if self._done or max_n == 0:
            return 0
        if self._src is not None and not self._eof and self._len - self._pos < self._chunk // 2:
            self._refill(0)
        while True:
            with nogil:
                st = self._parse(hs + n, (qs + n) if qs != NULL else NULL, (os + n) if os != NULL else NULL,
                                 &ov[n], &cv[n], &lv[n], max_n - n, &got)
            n += got
            if st == ST_FULL:
                break
            if st == ST_BAD:
                self._bad_offset = self._data_start + self._pos
                self._problems.append(
                    f"offset {self._bad_offset}: {_BAD_MESSAGES[self._bad]}; reading stopped"
                )
                self._done = True
                break
            if self._src is not None and not self._eof:
                if n == 0:
                    self._refill(self._need if st == ST_NEED else 0)
                    continue
                break
            if st == ST_NEED:
                self._problems.append(
                    f"offset {self._data_start + self._pos}: capture ends inside a record "
                    f"({self._len - self._pos} of {self._need} bytes); the rest is ignored"
                )
            self._done = True
            break
        return n

    def release(self):
        """Drop the window (and with it the buffer export of an mmap)."""
        self._view = None
        self._data = None
        self._base = <const uint8_t *>""
        self._len = 0
        self._pos = 0
        self._done = True

    @property
    def window(self):
        """The buffer the offsets of the last read_into refer to."""
        return self._data

    @property
    def window_start(self):
        """File offset of the window's first byte."""
        return self._data_start

    @property
    def format(self):
        return "pcapng" if self._fmt == FMT_PCAPNG else "pcap"

    @property
    def nanosecond(self):
        """pcap: whether timestamps are in nanoseconds (magic a1b23c4d)."""
        return bool(self._nsec)

    @property
    def big_endian(self):
        """Byte order of the file (of the last section read, for pcapng)."""
        return bool(self._big)

    @property
    def sections(self):
        return self._sections

    @property
    def interfaces(self):
        """[(index, section, local_id, linktype, tsresol_byte, tsoffset_s), ...] seen so far."""
        cdef size_t i
        return [
            (i, self._ifaces[i].section, self._ifaces[i].local_id, self._ifaces[i].linktype,
             (0x80 if self._ifaces[i].res_bin else 0) | self._ifaces[i].res_exp,
             self._ifaces[i].tsoffset_s)
            for i in range(self._n_ifaces)
        ]

    @property
    def counts(self):
        """Packets read per error kind (index = error_kind value)."""
        return [self._counts[i] for i in range(<int>PC_ERR_COUNT)]

    @property
    def packets(self):
        return self._packets

    @property
    def tunnelled(self):
        """Packets found inside a tunnel so far (their ``encap`` set)."""
        return self._ports.opened

    @property
    def unknown_interface(self):
        """Packets that named an interface their section did not describe."""
        return self._unknown_if

    @property
    def problems(self):
        """Problems of the capture file itself (corrupt or truncated records), as messages."""
        return list(self._problems)

    @property
    def done(self):
        return bool(self._done)

    @property
    def fragment_stats(self):
        return {"inserted": self._ft.inserted, "evicted": self._ft.evicted, "hits": self._ft.hits}


def pack_records(int fmt, bint nanosecond, data, offsets, caplens, headers, indices):
    """Records of the packets ``indices`` as pcap (fmt 1) or pcapng EPB (fmt 2) bytes.

    data/offsets/caplens locate each packet's captured bytes; headers give ts_ns, pkt_len and
    (pcapng) ifindex as the interface id. Little-endian output; pcapng timestamps in ns.
    """
    cdef const uint8_t[::1] dv = data if len(data) else b"\0"
    cdef const uint64_t[::1] ov = offsets
    cdef const uint32_t[::1] cv = caplens
    cdef const int64_t[::1] iv = indices
    cdef Py_ssize_t nh = len(headers)
    cdef unsigned char[::1] hv = _as_bytes_view(headers, nh, sizeof(PacketHeader), "headers")
    cdef const PacketHeader *hs = <const PacketHeader *>&hv[0]
    cdef Py_ssize_t k, i, m = iv.shape[0]
    cdef size_t total = 0, pos = 0, cap, pad
    cdef uint32_t w[8]
    cdef uint64_t ts
    for k in range(m):
        i = iv[k]
        if i < 0 or i >= nh or i >= ov.shape[0] or i >= cv.shape[0]:
            raise IndexError(f"packet index {i} out of range")
        if ov[i] + cv[i] > <uint64_t>dv.shape[0]:
            raise ValueError(f"packet {i} lies outside the data buffer")
        cap = cv[i]
        total += (16 + cap) if fmt == FMT_PCAP else (32 + ((cap + 3) & ~(<size_t>3)))
    out = bytearray(total)
    cdef unsigned char[::1] outv = out if total else bytearray(1)
    cdef unsigned char *o = &outv[0]
    with nogil:
        for k in range(m):
            i = iv[k]
            cap = cv[i]
            ts = hs[i].ts_ns
            if fmt == FMT_PCAP:
                w[0] = <uint32_t>(ts // 1000000000u)
                w[1] = <uint32_t>(ts % 1000000000u) if nanosecond else <uint32_t>((ts % 1000000000u) // 1000u)
                w[2] = <uint32_t>cap
                w[3] = hs[i].pkt_len if hs[i].pkt_len >= cap else <uint32_t>cap
                memcpy(o + pos, w, 16)
                memcpy(o + pos + 16, &dv[0] + ov[i], cap)
                pos += 16 + cap
            else:
                pad = (cap + 3) & ~(<size_t>3)
                w[0] = 6
                w[1] = <uint32_t>(32 + pad)
                w[2] = hs[i].ifindex
                w[3] = <uint32_t>(ts >> 32)
                w[4] = <uint32_t>(ts & 0xFFFFFFFFu)
                w[5] = <uint32_t>cap
                w[6] = hs[i].pkt_len if hs[i].pkt_len >= cap else <uint32_t>cap
                memcpy(o + pos, w, 28)
                memcpy(o + pos + 28, &dv[0] + ov[i], cap)
                memset(o + pos + 28 + cap, 0, pad - cap)
                memcpy(o + pos + 28 + pad, &w[1], 4)
                pos += 32 + pad
    return bytes(out)
