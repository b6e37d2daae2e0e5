# ctnetlink: delete kernel conntrack entries by their original tuple (IPCTNL_MSG_CT_DELETE), so
# that a connection the new policy revokes misses ESTABLISHED on its next packet and is queued
# and judged again. Included by _native.pyx after nfqueue.pxi (uses its netlink declarations).
#
# Message: nlmsghdr (type NFNL_SUBSYS_CTNETLINK << 8 | IPCTNL_MSG_CT_DELETE) + nfgenmsg (family
# AF_INET/AF_INET6) + CTA_TUPLE_ORIG { CTA_TUPLE_IP { CTA_IP_V4_SRC/DST | CTA_IP_V6_SRC/DST },
# CTA_TUPLE_PROTO { CTA_PROTO_NUM, CTA_PROTO_SRC_PORT/DST_PORT | CTA_PROTO_ICMP_ID/TYPE/CODE } }.

cdef enum:
    NFNL_SUBSYS_CTNETLINK = 1
    IPCTNL_MSG_CT_DELETE = 2
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


def ct_delete_message(bytes src, bytes dst, int sport, int dport, int proto, int ipver, int seq=0):
    """The IPCTNL_MSG_CT_DELETE request for one original tuple. ``src``/``dst`` are 16-byte
    addresses (IPv4 as ::ffff:a.b.c.d, as the header batch stores them) or 4/16 raw bytes.
    For ICMP echo, ``sport`` is the identifier (as the engine keys it)."""
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
    return _struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_DELETE,
                        NLM_F_REQUEST | NLM_F_ACK, seq, 0) + body


cdef class CtNetlink:
    """A ctnetlink socket of the current network namespace. ``delete(flows)`` removes the
    conntrack entries of ``flows`` (``EngineClient.revalidate``'s tuples) in one send and
    returns ``{"deleted", "missing", "errors"}`` (missing: no such entry, ENOENT)."""

    cdef int fd

    def __cinit__(self):
        self.fd = _netlink_socket(1 << 20)

    def __dealloc__(self):
        if self.fd >= 0:
            close(self.fd)

    def close(self):
        if self.fd >= 0:
            close(self.fd)
            self.fd = -1

    def delete(self, flows):
        cdef dict result = {"deleted": 0, "missing": 0, "errors": 0}
        if self.fd < 0:
            raise ValueError("ctnetlink socket closed")
        msgs = []
        for seq, (src, dst, sport, dport, proto, ipver) in enumerate(flows, 1):
            msgs.append(ct_delete_message(bytes(src), bytes(dst), sport, dport, proto, ipver, seq))
        # Keep each send below the socket's buffers; acks come back one per request.
        for start in range(0, len(msgs), 256):
            self._send_and_ack(b"".join(msgs[start:start + 256]), min(256, len(msgs) - start), result)
        return result

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
