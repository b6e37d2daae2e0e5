# ctnetlink: delete kernel conntrack entries by their original tuple (IPCTNL_MSG_CT_DELETE), so
# that a connection the new policy revokes misses ESTABLISHED on its next packet and is queued
# and judged again. Included by _native.pyx after nfqueue.pxi (uses its netlink declarations).
#
# Message: nlmsghdr (type NFNL_SUBSYS_CTNETLINK << 8 | IPCTNL_MSG_CT_DELETE) + nfgenmsg (family
# AF_INET/AF_INET6) + CTA_TUPLE_ORIG { CTA_TUPLE_IP { CTA_IP_V4_SRC/DST | CTA_IP_V6_SRC/DST },
# CTA_TUPLE_PROTO { CTA_PROTO_NUM, CTA_PROTO_SRC_PORT/DST_PORT | CTA_PROTO_ICMP_ID/TYPE/CODE } }.

cdef enum:
    NFNL_SUBSYS_CTNETLINK = 1
    IPCTNL_MSG_CT_NEW = 0
    IPCTNL_MSG_CT_DELETE = 2
    CTA_MARK = 8
    CTA_MARK_MASK = 21
    CTA_TUPLE_ORIG = 1
    CTA_TUPLE_IP = 1
    CTA_TUPLE_PROTO = 2
    CTA_IP_V4_SRC = 1
    CTA_IP_V4_DST = 2
    CTA_IP_V6_SRC = 3
    CTA_IP_V6_DST = 4
    CTA_PROTO_NUM = 1
    CTA_PROTO_SRC_PORT = 2
    CTA_PROTO_DST_PORT = 3
    CTA_PROTO_ICMP_ID = 4
    CTA_PROTO_ICMP_TYPE = 5
    CTA_PROTO_ICMP_CODE = 6
    CTA_PROTO_ICMPV6_ID = 7
    CTA_PROTO_ICMPV6_TYPE = 8
    CTA_PROTO_ICMPV6_CODE = 9
    NLA_F_NESTED = 0x8000


def _nest(int kind, bytes inner):
    return _nlattr(kind | NLA_F_NESTED, inner)


def ct_delete_message(bytes src, bytes dst, int sport, int dport, int proto, int ipver, int seq=0,
                      unsigned int mark=0, unsigned int mask=0):
    """The IPCTNL_MSG_CT_DELETE request for one original tuple. ``src``/``dst`` are 16-byte
    addresses (IPv4 as ::ffff:a.b.c.d, as the header batch stores them) or 4/16 raw bytes.
    For ICMP echo, ``sport`` is the identifier (as the engine keys it). With a ``mask``: instead,
    the IPCTNL_MSG_CT_NEW update (no NLM_F_CREATE) that makes the entry's mark bits under ``mask``
    those of ``mark`` and keeps the others (CTA_MARK with CTA_MARK_MASK)."""
    if ipver == 4:
        s = src[-4:]
        d = dst[-4:]
        if len(s) != 4 or len(d) != 4:
            raise ValueError("IPv4 addresses must be 4 or 16 bytes")
        ip = _nlattr(CTA_IP_V4_SRC, s) + _nlattr(CTA_IP_V4_DST, d)
        family = AF_INET
    elif ipver == 6:
        if len(src) != 16 or len(dst) != 16:
            raise ValueError("IPv6 addresses must be 16 bytes")
        ip = _nlattr(CTA_IP_V6_SRC, src) + _nlattr(CTA_IP_V6_DST, dst)
        family = AF_INET6
    else:
        raise ValueError(f"IP version {ipver}")
    if not 0 <= proto <= 255:
        raise ValueError(f"protocol {proto}")
    pr = _nlattr(CTA_PROTO_NUM, bytes([proto]))
    if proto == 1:
        pr += (_nlattr(CTA_PROTO_ICMP_ID, _struct.pack(">H", sport & 0xFFFF))
               + _nlattr(CTA_PROTO_ICMP_TYPE, b"\x08") + _nlattr(CTA_PROTO_ICMP_CODE, b"\x00"))
    elif proto == 58:
        pr += (_nlattr(CTA_PROTO_ICMPV6_ID, _struct.pack(">H", sport & 0xFFFF))
               + _nlattr(CTA_PROTO_ICMPV6_TYPE, b"\x80") + _nlattr(CTA_PROTO_ICMPV6_CODE, b"\x00"))
    else:
        pr += (_nlattr(CTA_PROTO_SRC_PORT, _struct.pack(">H", sport & 0xFFFF))
               + _nlattr(CTA_PROTO_DST_PORT, _struct.pack(">H", dport & 0xFFFF)))
    body = _struct.pack("=BBH", family, 0, 0) + _nest(CTA_TUPLE_ORIG, _nest(CTA_TUPLE_IP, ip) + _nest(CTA_TUPLE_PROTO, pr))
    kind = IPCTNL_MSG_CT_DELETE
    if mask:
        body += _nlattr(CTA_MARK, _struct.pack(">I", mark & mask)) + _nlattr(CTA_MARK_MASK, _struct.pack(">I", mask))
        kind = IPCTNL_MSG_CT_NEW
    return _struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_CTNETLINK << 8) | kind,
                        NLM_F_REQUEST | NLM_F_ACK, seq, 0) + body


cdef enum:
    CT_UPDATE_MAX = 160  # the longest update ct_update_into writes (IPv6, three protocol attributes, the mark)


cdef inline size_t ct_put(uint8_t *p, uint16_t kind, const void *data, uint16_t n) noexcept nogil:
    """One attribute at ``p``, padded; returns the bytes it took."""
    cdef nlattr *a = <nlattr *>p
    cdef size_t whole = nla_align(sizeof(nlattr) + n)
    a.nla_len = <uint16_t>(sizeof(nlattr) + n)
    a.nla_type = kind
    memcpy(p + sizeof(nlattr), data, n)
    memset(p + sizeof(nlattr) + n, 0, whole - sizeof(nlattr) - n)
    return whole


cdef inline void ct_close_nest(uint8_t *p, uint16_t kind, size_t n) noexcept nogil:
    (<nlattr *>p).nla_len = <uint16_t>n
    (<nlattr *>p).nla_type = kind | NLA_F_NESTED


cdef size_t ct_update_into(uint8_t *out, const PacketHeader *h, uint32_t mark, uint32_t mask,
                           uint32_t seq) noexcept nogil:
    """ct_delete_message(..., mark, mask) of one original tuple as a header row (``dump``'s),
    written at ``out`` (at most CT_UPDATE_MAX bytes) without Python: the IPCTNL_MSG_CT_NEW update
    that sets the entry's mark bits under ``mask``. Returns its length (0: not IPv4 or IPv6)."""
    cdef size_t off = sizeof(nlmsghdr) + 4
    cdef size_t orig, ip, pr
    cdef uint8_t one
    cdef uint16_t two
    cdef uint32_t four
    cdef nlmsghdr *nh = <nlmsghdr *>out
    if h.ip_version != 4 and h.ip_version != 6:
        return 0
    out[sizeof(nlmsghdr)] = AF_INET if h.ip_version == 4 else AF_INET6
    out[sizeof(nlmsghdr) + 1] = 0
    out[sizeof(nlmsghdr) + 2] = 0
    out[sizeof(nlmsghdr) + 3] = 0
    orig = off
    off += sizeof(nlattr)
    ip = off
    off += sizeof(nlattr)
    if h.ip_version == 4:
        off += ct_put(out + off, CTA_IP_V4_SRC, &h.src_addr[12], 4)
        off += ct_put(out + off, CTA_IP_V4_DST, &h.dst_addr[12], 4)
    else:
        off += ct_put(out + off, CTA_IP_V6_SRC, &h.src_addr[0], 16)
        off += ct_put(out + off, CTA_IP_V6_DST, &h.dst_addr[0], 16)
    ct_close_nest(out + ip, CTA_TUPLE_IP, off - ip)
    pr = off
    off += sizeof(nlattr)
    one = h.protocol
    off += ct_put(out + off, CTA_PROTO_NUM, &one, 1)
    two = htons(h.sport)
    if h.protocol == 1 or h.protocol == 58:
        off += ct_put(out + off, CTA_PROTO_ICMP_ID if h.protocol == 1 else CTA_PROTO_ICMPV6_ID, &two, 2)
        one = 8 if h.protocol == 1 else 128  # the echo request the entry was made by
        off += ct_put(out + off, CTA_PROTO_ICMP_TYPE if h.protocol == 1 else CTA_PROTO_ICMPV6_TYPE, &one, 1)
        one = 0
        off += ct_put(out + off, CTA_PROTO_ICMP_CODE if h.protocol == 1 else CTA_PROTO_ICMPV6_CODE, &one, 1)
    else:
        off += ct_put(out + off, CTA_PROTO_SRC_PORT, &two, 2)
        two = htons(h.dport)
        off += ct_put(out + off, CTA_PROTO_DST_PORT, &two, 2)
    ct_close_nest(out + pr, CTA_TUPLE_PROTO, off - pr)
    ct_close_nest(out + orig, CTA_TUPLE_ORIG, off - orig)
    four = htonl(mark & mask)
    off += ct_put(out + off, CTA_MARK, &four, 4)
    four = htonl(mask)
    off += ct_put(out + off, CTA_MARK_MASK, &four, 4)
    nh.nlmsg_len = <uint32_t>off
    nh.nlmsg_type = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW
    nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK
    nh.nlmsg_seq = seq
    nh.nlmsg_pid = 0
    return off


cdef size_t ct_updates_into(uint8_t *out, const PacketHeader *h, size_t *i, size_t n, uint32_t mark,
                            uint32_t mask, int *count, int *skipped) noexcept nogil:
    """The updates of rows ``h[*i:n]`` into ``out`` (room for 256), from ``*i`` on; advances
    ``*i``; returns the bytes written; counts the messages and the rows skipped."""
    cdef size_t used = 0, got
    count[0] = 0
    while i[0] < n and count[0] < 256:
        got = ct_update_into(out + used, &h[i[0]], mark, mask, <uint32_t>(i[0] + 1))
        i[0] += 1
        if got == 0:
            skipped[0] += 1
            continue
        used += got
        count[0] += 1
    return used


def ct_mark_messages(const uint8_t[::1] raw, unsigned int mark, unsigned int mask):
    """The requests ``CtNetlink.mark_rows`` sends for ``raw`` (PacketHeader records), one after
    another: each ``ct_delete_message(..., mark, mask)`` of its row, sequence numbers from 1."""
    cdef size_t n = raw.shape[0] // sizeof(PacketHeader)
    cdef size_t i = 0, used
    cdef int count = 0, skipped = 0
    cdef uint8_t *buf
    if raw.shape[0] % sizeof(PacketHeader):
        raise ValueError("rows: not a whole number of header records")
    out = []
    if n == 0:
        return b""
    buf = <uint8_t *>malloc(256 * CT_UPDATE_MAX)
    if buf == NULL:
        raise MemoryError()
    try:
        while i < n:
            used = ct_updates_into(buf, <const PacketHeader *>&raw[0], &i, n, mark, mask, &count, &skipped)
            out.append(bytes(buf[:used]))
    finally:
        free(buf)
    return b"".join(out)


# --- the kernel's connection table, read back (IPCTNL_MSG_CT_GET with NLM_F_DUMP) ---------------
#
# Revalidation judges the kernel's own table: it holds every connection the kernel lets through
# as ESTABLISHED, however old (the engine only ever sees a connection's first packet on this
# path). The request may carry CTA_MARK/CTA_MARK_MASK, and the kernel then dumps only the entries
# whose mark matches: those of connections our rules queued (iptables.JUDGED_CTMARK).

cdef enum:
    IPCTNL_MSG_CT_GET = 1
    CTA_TUPLE_REPLY = 2


cdef struct CtTuple:
    uint8_t src[16]
    uint8_t dst[16]
    uint16_t sport
    uint16_t dport
    uint8_t proto
    uint8_t icmp_type
    uint8_t icmp_code
    uint8_t ipver


cdef inline const nlattr *ct_next_attr(const uint8_t *p, size_t n, size_t *off) noexcept nogil:
    """The attribute at ``*off`` of ``p[:n]`` (advancing ``*off`` past it), or NULL at the end or
    on a malformed length: every read stays inside ``p[:n]``."""
    cdef const nlattr *a
    if off[0] + sizeof(nlattr) > n:
        return NULL
    a = <const nlattr *>(p + off[0])
    if a.nla_len < sizeof(nlattr) or off[0] + a.nla_len > n:
        return NULL
    off[0] += nla_align(a.nla_len)
    return a


cdef int ct_parse_tuple(const uint8_t *p, size_t n, CtTuple *t) noexcept nogil:
    """A CTA_TUPLE_* nest into ``t``; 0 when it had addresses and a protocol, -1 otherwise."""
    cdef size_t off = 0, ioff
    cdef const nlattr *a
    cdef const nlattr *b
    cdef const uint8_t *v
    cdef const uint8_t *w
    cdef int kind
    cdef int seen = 0
    memset(t, 0, sizeof(CtTuple))
    while True:
        a = ct_next_attr(p, n, &off)
        if a == NULL:
            break
        v = <const uint8_t *>a + sizeof(nlattr)
        if (a.nla_type & NLA_TYPE_MASK) == CTA_TUPLE_IP:
            ioff = 0
            while True:
                b = ct_next_attr(v, a.nla_len - sizeof(nlattr), &ioff)
                if b == NULL:
                    break
                w = <const uint8_t *>b + sizeof(nlattr)
                kind = b.nla_type & NLA_TYPE_MASK
                if kind in (CTA_IP_V4_SRC, CTA_IP_V4_DST) and b.nla_len >= sizeof(nlattr) + 4:
                    put_addr(&t.src[0] if kind == CTA_IP_V4_SRC else &t.dst[0], w, 4)  # IPv4-mapped
                    t.ipver = 4
                    seen |= 1 if kind == CTA_IP_V4_SRC else 2
                elif kind in (CTA_IP_V6_SRC, CTA_IP_V6_DST) and b.nla_len >= sizeof(nlattr) + 16:
                    put_addr(&t.src[0] if kind == CTA_IP_V6_SRC else &t.dst[0], w, 6)
                    t.ipver = 6
                    seen |= 1 if kind == CTA_IP_V6_SRC else 2
        elif (a.nla_type & NLA_TYPE_MASK) == CTA_TUPLE_PROTO:
            ioff = 0
            while True:
                b = ct_next_attr(v, a.nla_len - sizeof(nlattr), &ioff)
                if b == NULL:
                    break
                w = <const uint8_t *>b + sizeof(nlattr)
                kind = b.nla_type & NLA_TYPE_MASK
                if b.nla_len >= sizeof(nlattr) + 1 and kind == CTA_PROTO_NUM:
                    t.proto = w[0]
                    seen |= 4
                elif b.nla_len >= sizeof(nlattr) + 2 and kind in (CTA_PROTO_SRC_PORT, CTA_PROTO_ICMP_ID, CTA_PROTO_ICMPV6_ID):
                    t.sport = (w[0] << 8) | w[1]
                elif b.nla_len >= sizeof(nlattr) + 2 and kind == CTA_PROTO_DST_PORT:
                    t.dport = (w[0] << 8) | w[1]
                elif b.nla_len >= sizeof(nlattr) + 1 and kind in (CTA_PROTO_ICMP_TYPE, CTA_PROTO_ICMPV6_TYPE):
                    t.icmp_type = w[0]
                elif b.nla_len >= sizeof(nlattr) + 1 and kind in (CTA_PROTO_ICMP_CODE, CTA_PROTO_ICMPV6_CODE):
                    t.icmp_code = w[0]
    return 0 if seen == 7 else -1


cdef void ct_header(PacketHeader *h, const CtTuple *src_side, const CtTuple *dst_side) noexcept nogil:
    """The first packet of a connection as a header: source from ``src_side``, destination from
    ``dst_side`` (``dst_side`` in its own direction: its source is our destination)."""
    memset(h, 0, sizeof(PacketHeader))
    memcpy(h.src_addr, src_side.src, 16)
    h.ip_version = src_side.ipver
    h.protocol = src_side.proto
    h.sport = src_side.sport
    if src_side.proto == 1 or src_side.proto == 58:
        h.icmp_type = src_side.icmp_type
        h.icmp_code = src_side.icmp_code
    else:
        if src_side.proto in (6, 17, 132, 136):
            h.flags |= PC_FLAG_HAS_PORTS
        if src_side.proto == 6:
            h.tcp_flags = 2  # SYN: what the kernel queued
    if dst_side == src_side:
        memcpy(h.dst_addr, src_side.dst, 16)
        h.dport = src_side.dport
    else:
        memcpy(h.dst_addr, dst_side.src, 16)
        h.dport = dst_side.sport if not (src_side.proto == 1 or src_side.proto == 58) else 0
    h.pkt_len = 0


def ct_dump_message(int family, uint32_t mark=0, uint32_t mask=0, int seq=1):
    """The IPCTNL_MSG_CT_GET dump request of one address family; with a ``mask``, only entries
    whose mark & mask == mark."""
    attrs = b""
    if mask:
        attrs = _nlattr(CTA_MARK, _struct.pack(">I", mark)) + _nlattr(CTA_MARK_MASK, _struct.pack(">I", mask))
    body = _struct.pack("=BBH", family, 0, 0) + attrs
    return _struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_GET,
                        NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + body


cdef class CtTable:
    """Headers read from one conntrack dump (``CtNetlink.dump``): two buffers of PacketHeader
    records, grown in C, one row per connection."""

    cdef PacketHeader *judged
    cdef PacketHeader *original
    cdef size_t n, cap

    def __dealloc__(self):
        free(self.judged)
        free(self.original)

    cdef int push(self, const CtTuple *orig, const CtTuple *reply, bint has_reply, uint32_t mark) except -1:
        cdef size_t cap
        cdef void *a
        cdef void *b
        if self.n == self.cap:
            cap = self.cap * 2 if self.cap else 1024
            a = realloc(self.judged, cap * sizeof(PacketHeader))
            if a == NULL:
                raise MemoryError()
            self.judged = <PacketHeader *>a
            b = realloc(self.original, cap * sizeof(PacketHeader))
            if b == NULL:
                raise MemoryError()
            self.original = <PacketHeader *>b
            self.cap = cap
        # As the filter table saw the first packet: the original source, and the destination
        # after DNAT (the reply's source); SNAT happens after the filter table.
        ct_header(&self.judged[self.n], orig, reply if has_reply else orig)
        ct_header(&self.original[self.n], orig, orig)
        self.original[self.n].frag_id = mark  # the entry's conntrack mark rides in the original row
        self.n += 1
        return 0

    def buffers(self):
        """``(judged, original)`` as bytearrays (view them with ``HEADER_DTYPE``)."""
        return (bytearray((<const char *>self.judged)[:self.n * sizeof(PacketHeader)]) if self.n else bytearray(),
                bytearray((<const char *>self.original)[:self.n * sizeof(PacketHeader)]) if self.n else bytearray())



cdef int ct_dump_into(int fd, bytes request, CtTable table, uint32_t mark, uint32_t mask) except -1:
    """Send a dump request and read every entry into ``table`` (entries whose mark does not
    match are skipped here too, whatever the kernel's filter did)."""
    cdef const uint8_t[::1] m = request
    cdef size_t bufsize = 1 << 17
    cdef uint8_t *buf = <uint8_t *>malloc(bufsize)
    cdef ssize_t got
    cdef size_t off, aoff
    cdef const nlmsghdr *nh
    cdef const nlattr *a
    cdef const uint8_t *body
    cdef size_t blen
    cdef int32_t err
    cdef CtTuple orig, reply
    cdef bint has_orig, has_reply, has_mark
    cdef uint32_t entry_mark
    if buf == NULL:
        raise MemoryError()
    try:
        if send(fd, &m[0], m.shape[0], 0) < 0:
            raise OSError(errno, f"conntrack dump: {_os.strerror(errno)}")
        while True:
            with nogil:
                got = recv(fd, buf, bufsize, 0)
            if got < 0:
                if errno == EINTR:
                    continue
                raise OSError(errno, f"conntrack dump: {_os.strerror(errno)}")
            off = 0
            while off + sizeof(nlmsghdr) <= <size_t>got:
                nh = <const nlmsghdr *>(buf + off)
                if nh.nlmsg_len < sizeof(nlmsghdr) or off + nh.nlmsg_len > <size_t>got:
                    break
                if nh.nlmsg_type == NLMSG_DONE:
                    return 0
                if nh.nlmsg_type == NLMSG_ERROR and nh.nlmsg_len >= sizeof(nlmsghdr) + 4:
                    err = (<const int32_t *>(buf + off + sizeof(nlmsghdr)))[0]
                    if err != 0:
                        raise OSError(-err, f"conntrack dump: {_os.strerror(-err)}")
                    return 0
                if (nh.nlmsg_type >> 8) == NFNL_SUBSYS_CTNETLINK and nh.nlmsg_len >= sizeof(nlmsghdr) + 4:
                    body = buf + off + sizeof(nlmsghdr) + 4  # past the nfgenmsg
                    blen = nh.nlmsg_len - sizeof(nlmsghdr) - 4
                    has_orig = has_reply = has_mark = False
                    entry_mark = 0
                    aoff = 0
                    while True:
                        a = ct_next_attr(body, blen, &aoff)
                        if a == NULL:
                            break
                        if (a.nla_type & NLA_TYPE_MASK) == CTA_TUPLE_ORIG:
                            has_orig = ct_parse_tuple(<const uint8_t *>a + sizeof(nlattr), a.nla_len - sizeof(nlattr), &orig) == 0
                        elif (a.nla_type & NLA_TYPE_MASK) == CTA_TUPLE_REPLY:
                            has_reply = ct_parse_tuple(<const uint8_t *>a + sizeof(nlattr), a.nla_len - sizeof(nlattr), &reply) == 0
                        elif (a.nla_type & NLA_TYPE_MASK) == CTA_MARK and a.nla_len >= sizeof(nlattr) + 4:
                            entry_mark = ntohl((<const uint32_t *>(<const uint8_t *>a + sizeof(nlattr)))[0])
                            has_mark = True
                    if has_orig and (mask == 0 or (has_mark and (entry_mark & mask) == mark)):
                        table.push(&orig, &reply, has_reply, entry_mark)
                off += nla_align(nh.nlmsg_len)
    finally:
        free(buf)


cdef class CtNetlink:
    """A ctnetlink socket of the current network namespace. ``delete(flows)`` removes the
    conntrack entries of ``flows`` (original tuples: ``dump``'s, ``EngineClient.revalidate``'s)
    in one send and returns ``{"deleted", "missing", "errors"}`` (missing: no such entry,
    ENOENT); ``delete(flows, mark, mask)`` sets their mark bits under ``mask`` to ``mark``'s
    instead (the entries stay: our rules drop the packets of connections marked revoked, both
    ways, and pass them again once unmarked)."""

    cdef int fd

    def __cinit__(self):
        cdef timeval answer_timeout
        self.fd = _netlink_socket(1 << 20)
        # A lost answer fails the dump or update (counted) instead of stalling the reload.
        answer_timeout.tv_sec = NL_ANSWER_TIMEOUT_MS // 1000
        answer_timeout.tv_usec = 0
        setsockopt(self.fd, SOL_SOCKET, SO_RCVTIMEO, &answer_timeout, sizeof(answer_timeout))

    def __dealloc__(self):
        if self.fd >= 0:
            close(self.fd)

    def close(self):
        if self.fd >= 0:
            close(self.fd)
            self.fd = -1

    def delete(self, flows, unsigned int mark=0, unsigned int mask=0):
        cdef dict result = {"deleted": 0, "missing": 0, "errors": 0}
        if self.fd < 0:
            raise ValueError("ctnetlink socket closed")
        msgs = []
        for seq, (src, dst, sport, dport, proto, ipver) in enumerate(flows, 1):
            msgs.append(ct_delete_message(bytes(src), bytes(dst), sport, dport, proto, ipver, seq, mark, mask))
        # Keep each send below the socket's buffers; acks come back one per request.
        for start in range(0, len(msgs), 256):
            self._send_and_ack(b"".join(msgs[start:start + 256]), min(256, len(msgs) - start), result)
        return result

    def mark_rows(self, const uint8_t[::1] raw, unsigned int mark, unsigned int mask):
        """``delete(flows, mark, mask)`` for ``raw``, the bytes of PacketHeader records (the
        original tuples of ``dump``, any number of them): the messages are built natively
        (``ct_mark_messages``), in sends of 256, with no Python object per entry. Returns
        ``{"deleted", "missing", "errors"}`` as ``delete`` does (deleted: updated)."""
        cdef dict result = {"deleted": 0, "missing": 0, "errors": 0}
        cdef size_t n = raw.shape[0] // sizeof(PacketHeader)
        cdef size_t i = 0, used
        cdef int count = 0, skipped = 0
        cdef uint8_t *buf
        if self.fd < 0:
            raise ValueError("ctnetlink socket closed")
        if raw.shape[0] % sizeof(PacketHeader):
            raise ValueError("rows: not a whole number of header records")
        if n == 0:
            return result
        buf = <uint8_t *>malloc(256 * CT_UPDATE_MAX)
        if buf == NULL:
            raise MemoryError()
        try:
            while i < n:
                used = ct_updates_into(buf, <const PacketHeader *>&raw[0], &i, n, mark, mask, &count, &skipped)
                if count:
                    self._send_and_ack(bytes(buf[:used]), count, result)
        finally:
            free(buf)
        result["errors"] += skipped
        return result

    def dump(self, uint32_t mark=0, uint32_t mask=0, bint ipv6=True):
        """The kernel's connection table (IPv4, and IPv6 with ``ipv6``), only the entries whose
        mark & ``mask`` == ``mark`` when ``mask`` is given: ``(judged, original)``, two bytearrays
        of PacketHeader records, one row per connection: ``judged`` is its first packet as the
        filter table saw it (after DNAT: the reply's source is the destination), ``original``
        its original tuple (what ``delete`` takes), with the entry's mark in ``frag_id``."""
        if self.fd < 0:
            raise ValueError("ctnetlink socket closed")
        cdef CtTable table = CtTable()
        families = [int(AF_INET), int(AF_INET6)] if ipv6 else [int(AF_INET)]
        for seq, family in enumerate(families, 1):
            ct_dump_into(self.fd, ct_dump_message(family, mark, mask, seq), table, mark, mask)
        return table.buffers()

    cdef _send_and_ack(self, bytes data, int expected, dict result):
        cdef const uint8_t[::1] m = data
        cdef uint8_t buf[65536]
        cdef ssize_t got
        cdef size_t off
        cdef const nlmsghdr *nh
        cdef int32_t err
        cdef int seen = 0
        if send(self.fd, &m[0], m.shape[0], 0) < 0:
            result["errors"] += expected
            return
        while seen < expected:
            with nogil:
                got = recv(self.fd, buf, sizeof(buf), 0)
            if got < 0:
                if errno == EINTR:
                    continue
                result["errors"] += expected - seen
                return
            off = 0
            while off + sizeof(nlmsghdr) <= <size_t>got:
                nh = <const nlmsghdr *>(buf + off)
                if nh.nlmsg_len < sizeof(nlmsghdr) or off + nh.nlmsg_len > <size_t>got:
                    break
                if nh.nlmsg_type == NLMSG_ERROR and nh.nlmsg_len >= sizeof(nlmsghdr) + 4:
                    err = (<const int32_t *>(buf + off + sizeof(nlmsghdr)))[0]
                    seen += 1
                    if err == 0:
                        result["deleted"] += 1
                    elif err == -ENOENT:
                        result["missing"] += 1
                    else:
                        result["errors"] += 1
                off += nla_align(nh.nlmsg_len)
