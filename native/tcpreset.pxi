# Cutting a TCP connection both ways from a firewall that holds one of its packets.
#
# Included by _native.pyx. Given the raw IP packet (IPv4 or IPv6, from the IP header on, as
# NFQUEUE hands it) of a TCP segment going client -> server that we deny, two RST segments are
# crafted and sent on raw sockets (IPPROTO_RAW: we write the IP header ourselves):
#
# 1. to the server, as if from the client: the packet's own addresses and ports, seq = the
#    packet's seq (the first byte of the held segment: what the server's rcv_nxt is, since it
#    never got the segment), flags RST only, ack 0, window 0;
# 2. to the client, as if from the server: addresses and ports swapped; when the packet has ACK,
#    seq = its ack_seq (the client's rcv_nxt), flags RST|ACK, ack = seq + segment length; without
#    ACK (a SYN), seq = 0, flags RST|ACK, ack = seq + segment length (what SYN_SENT accepts).
#    The segment length is the payload length, +1 for SYN, +1 for FIN.
#
# Linux (RFC 5961, tcp_validate_incoming) resets an established connection only when the RST's
# seq is exactly rcv_nxt (an in-window one only earns a challenge ACK), which is why both seq
# numbers are the exact ones above.
#
# The payload length comes from the IP header (IPv4 total length, IPv6 payload length), not
# from the bytes handed over: NFQUEUE's copy range (128 bytes by default in nfqueue.pxi) cuts the
# payload off, and only the IP and TCP headers are read. What is refused (0 segments): anything
# whose IP header, or TCP header (data offset included), is not within both the bytes handed over
# and the IP lengths; IPv4 with IHL < 5, total length 0 (a BIG TCP GSO packet), a non-first
# fragment, a protocol other than TCP; IPv6 whose next header is not TCP (extension headers are
# not walked) or with payload length 0 (jumbogram).
#
# The crafted packets: IPv4 with DF, ID 0, TTL 64, header checksum; IPv6 with traffic class and
# flow label 0, hop limit 64; TCP header of 20 bytes (no options), checksum over the pseudo-header.
# (On sending, Linux rewrites the IPv4 header checksum and total length anyway, and may fill in
# an ID; IPv6 is sent as written.) The destination of sendto is the crafted packet's destination
# (scope 0: a link-local IPv6 destination fails with an error, counted in `errors`). The sends
# pass through this network namespace's OUTPUT hooks like any local packet.

from libc.stdint cimport uint8_t, uint64_t
from libc.string cimport strerror

cdef extern from *:
    """
    #include <errno.h>
    #include <stdint.h>
    #include <string.h>
    #include <unistd.h>
    #include <sys/socket.h>
    #include <netinet/in.h>

    #ifndef IPV6_HDRINCL
    #define IPV6_HDRINCL 36
    #endif

    #define PCTR_MAX 60  /* IPv6 (40) + TCP (20) */

    typedef struct {
        uint8_t buf[2][PCTR_MAX];
        size_t len[2];
        int family;  /* 4 or 6 */
    } pctr_segments;

    static inline uint16_t pctr_get16(const uint8_t *p) {
        return (uint16_t)(((uint16_t)p[0] << 8) | p[1]);
    }
    static inline uint32_t pctr_get32(const uint8_t *p) {
        return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
    }
    static inline void pctr_put16(uint8_t *p, uint16_t v) {
        p[0] = (uint8_t)(v >> 8);
        p[1] = (uint8_t)v;
    }
    static inline void pctr_put32(uint8_t *p, uint32_t v) {
        p[0] = (uint8_t)(v >> 24);
        p[1] = (uint8_t)(v >> 16);
        p[2] = (uint8_t)(v >> 8);
        p[3] = (uint8_t)v;
    }

    /* One's complement sum of big-endian 16-bit words (an odd last byte is padded with 0). */
    static uint32_t pctr_sum(uint32_t acc, const uint8_t *p, size_t n) {
        size_t i;
        for (i = 0; i + 1 < n; i += 2)
            acc += pctr_get16(p + i);
        if (n & 1)
            acc += (uint32_t)p[n - 1] << 8;
        return acc;
    }
    static uint16_t pctr_fold(uint32_t acc) {
        while (acc >> 16)
            acc = (acc & 0xffff) + (acc >> 16);
        return (uint16_t)~acc;
    }

    /* Writes a 20-byte TCP header at t with its checksum over the pseudo-header (src, dst of
       alen bytes each). */
    static void pctr_tcp(uint8_t *t, const uint8_t *src, const uint8_t *dst, size_t alen,
                         uint16_t sport, uint16_t dport, uint32_t seq, uint32_t ack,
                         uint8_t flags) {
        uint32_t acc = 0;
        uint8_t tail[4] = {0, 6, 0, 20};  /* v4: zero, protocol, length; v6: the low bytes of
                                             the 32-bit length and next header, same sum */
        memset(t, 0, 20);
        pctr_put16(t, sport);
        pctr_put16(t + 2, dport);
        pctr_put32(t + 4, seq);
        pctr_put32(t + 8, ack);
        t[12] = 5 << 4;
        t[13] = flags;
        /* window 0, checksum (below), urgent pointer 0 */
        acc = pctr_sum(acc, src, alen);
        acc = pctr_sum(acc, dst, alen);
        acc = pctr_sum(acc, tail, 4);
        acc = pctr_sum(acc, t, 20);
        pctr_put16(t + 16, pctr_fold(acc));
    }

    /* Writes one IP + TCP segment into out; returns its length. */
    static size_t pctr_segment(uint8_t *out, int family, const uint8_t *src, const uint8_t *dst,
                               uint16_t sport, uint16_t dport, uint32_t seq, uint32_t ack,
                               uint8_t flags) {
        if (family == 4) {
            memset(out, 0, 20);
            out[0] = 0x45;
            pctr_put16(out + 2, 40);
            pctr_put16(out + 6, 0x4000);  /* DF, offset 0; ID (4..5) 0 */
            out[8] = 64;
            out[9] = 6;
            memcpy(out + 12, src, 4);
            memcpy(out + 16, dst, 4);
            pctr_put16(out + 10, pctr_fold(pctr_sum(0, out, 20)));
            pctr_tcp(out + 20, src, dst, 4, sport, dport, seq, ack, flags);
            return 40;
        }
        memset(out, 0, 40);
        out[0] = 0x60;  /* version 6, traffic class 0, flow label 0 */
        pctr_put16(out + 4, 20);
        out[6] = 6;
        out[7] = 64;
        memcpy(out + 8, src, 16);
        memcpy(out + 24, dst, 16);
        pctr_tcp(out + 40, src, dst, 16, sport, dport, seq, ack, flags);
        return 60;
    }

    /* Crafts the two RSTs of the client -> server TCP segment pkt[0..len): 2, or 0 when the
       packet is not one we can answer (see tcpreset.pxi). Reads nothing outside pkt[0..len). */
    static int pctr_craft(const uint8_t *pkt, size_t len, pctr_segments *out) {
        const uint8_t *src, *dst, *tcp;
        size_t l4_total, l4_cap, doff, payload;
        uint32_t seq, ack, seglen;
        uint16_t sport, dport;
        uint8_t flags;
        int family;

        if (pkt == NULL || len < 1)
            return 0;
        if ((pkt[0] >> 4) == 4) {
            size_t ihl, tot;
            if (len < 20)
                return 0;
            ihl = (size_t)(pkt[0] & 0x0f) * 4;
            tot = pctr_get16(pkt + 2);
            if (ihl < 20 || ihl > len || tot < ihl)
                return 0;
            if (pctr_get16(pkt + 6) & 0x1fff)  /* not the first fragment: no TCP header */
                return 0;
            if (pkt[9] != 6)
                return 0;
            family = 4;
            src = pkt + 12;
            dst = pkt + 16;
            tcp = pkt + ihl;
            l4_total = tot - ihl;
            l4_cap = len - ihl;
        } else if ((pkt[0] >> 4) == 6) {
            if (len < 40)
                return 0;
            if (pkt[6] != 6)  /* extension headers are not walked */
                return 0;
            family = 6;
            src = pkt + 8;
            dst = pkt + 24;
            tcp = pkt + 40;
            l4_total = pctr_get16(pkt + 4);
            l4_cap = len - 40;
        } else {
            return 0;
        }
        if (l4_total < 20 || l4_cap < 20)
            return 0;
        doff = (size_t)(tcp[12] >> 4) * 4;
        if (doff < 20 || doff > l4_total || doff > l4_cap)
            return 0;
        payload = l4_total - doff;
        sport = pctr_get16(tcp);
        dport = pctr_get16(tcp + 2);
        seq = pctr_get32(tcp + 4);
        ack = pctr_get32(tcp + 8);
        flags = tcp[13];
        seglen = (uint32_t)payload + ((flags & 0x02) ? 1 : 0) + ((flags & 0x01) ? 1 : 0);

        out->family = family;
        /* To the server, as the client: exactly its rcv_nxt, RST only. */
        out->len[0] = pctr_segment(out->buf[0], family, src, dst, sport, dport, seq, 0, 0x04);
        /* To the client, as the server: its rcv_nxt is the ack it sent. */
        if (flags & 0x10)
            out->len[1] = pctr_segment(out->buf[1], family, dst, src, dport, sport, ack,
                                       seq + seglen, 0x14);
        else
            out->len[1] = pctr_segment(out->buf[1], family, dst, src, dport, sport, 0,
                                       seq + seglen, 0x14);
        return 2;
    }

    /* Crafts and sends; returns the number of RSTs sent. Failed sends (and a missing socket)
       are added to *errors, sent ones to *sent (either may be NULL; atomic adds). */
    static int pctr_reset(int fd4, int fd6, const uint8_t *pkt, size_t len,
                          uint64_t *sent, uint64_t *errors) {
        pctr_segments s;
        int n, i, ok = 0, bad = 0;
        n = pctr_craft(pkt, len, &s);
        for (i = 0; i < n; i++) {
            ssize_t r;
            int fd = s.family == 4 ? fd4 : fd6;
            if (fd < 0) {
                bad++;
                continue;
            }
            if (s.family == 4) {
                struct sockaddr_in sa;
                memset(&sa, 0, sizeof(sa));
                sa.sin_family = AF_INET;
                memcpy(&sa.sin_addr, s.buf[i] + 16, 4);
                do {
                    r = sendto(fd, s.buf[i], s.len[i], MSG_DONTWAIT,
                               (const struct sockaddr *)&sa, sizeof(sa));
                } while (r < 0 && errno == EINTR);
            } else {
                struct sockaddr_in6 sa6;
                memset(&sa6, 0, sizeof(sa6));
                sa6.sin6_family = AF_INET6;
                memcpy(&sa6.sin6_addr, s.buf[i] + 24, 16);
                do {
                    r = sendto(fd, s.buf[i], s.len[i], MSG_DONTWAIT,
                               (const struct sockaddr *)&sa6, sizeof(sa6));
                } while (r < 0 && errno == EINTR);
            }
            if (r == (ssize_t)s.len[i])
                ok++;
            else
                bad++;
        }
        if (sent != NULL && ok)
            __atomic_fetch_add(sent, (uint64_t)ok, __ATOMIC_RELAXED);
        if (errors != NULL && bad)
            __atomic_fetch_add(errors, (uint64_t)bad, __ATOMIC_RELAXED);
        return ok;
    }

    static const uint8_t *pctr_buf(const pctr_segments *s, int i) { return s->buf[i]; }
    /* Most bytes of the rejected packet an ICMP error quotes: what keeps the error within the
       minimum MTU (576 for IPv4, RFC 1812; 1280 for IPv6, RFC 4443). */
    #define PCTR_QUOTE4 (576 - 28)
    #define PCTR_QUOTE6 (1280 - 48)
    #define PCTR_UNREACH_MAX 1280

    /* The ICMP error that rejects the IP packet pkt[0..len) as a REJECT rule would: destination
       unreachable, port unreachable (ICMP 3/3; ICMPv6 1/4), from the packet's destination to its
       source, quoting as much of it as the minimum MTU allows. Written into out (cap bytes, at
       least PCTR_UNREACH_MAX); returns its length, or 0 when no error is due: not IPv4/IPv6, cut
       short, a non-first fragment, an ICMP error itself (never an error about an error), a
       multicast or broadcast destination, an unspecified or multicast source. Reads nothing
       outside pkt[0..len). */
    static size_t pctr_unreachable(const uint8_t *pkt, size_t len, uint8_t *out, size_t cap) {
        size_t quote, n;
        uint32_t acc;
        if (pkt == NULL || len < 1 || cap < PCTR_UNREACH_MAX)
            return 0;
        if ((pkt[0] >> 4) == 4) {
            size_t ihl;
            if (len < 20)
                return 0;
            ihl = (size_t)(pkt[0] & 0x0f) * 4;
            if (ihl < 20 || ihl > len || (pctr_get16(pkt + 6) & 0x1fff))
                return 0;
            if (pctr_get16(pkt + 2) >= ihl && pctr_get16(pkt + 2) < len)
                len = pctr_get16(pkt + 2);  /* link-layer padding is not the packet's */
            if (pkt[9] == 1 && (len < ihl + 1 || (pkt[ihl] != 0 && pkt[ihl] != 8 && pkt[ihl] != 13
                                                  && pkt[ihl] != 15 && pkt[ihl] != 17)))
                return 0;  /* only ICMP queries are answered */
            if (pkt[16] >= 224 || (pkt[16] == 255 && pkt[17] == 255 && pkt[18] == 255 && pkt[19] == 255)
                || pkt[12] >= 224 || (pkt[12] | pkt[13] | pkt[14] | pkt[15]) == 0)
                return 0;
            quote = len < PCTR_QUOTE4 ? len : PCTR_QUOTE4;
            n = 28 + quote;
            memset(out, 0, 28);
            out[0] = 0x45;
            out[1] = 0xc0;  /* network control, as the kernel's own errors */
            pctr_put16(out + 2, (uint16_t)n);
            out[8] = 64;
            out[9] = 1;
            memcpy(out + 12, pkt + 16, 4);
            memcpy(out + 16, pkt + 12, 4);
            pctr_put16(out + 10, pctr_fold(pctr_sum(0, out, 20)));
            out[20] = 3;  /* destination unreachable */
            out[21] = 3;  /* port unreachable */
            memcpy(out + 28, pkt, quote);
            pctr_put16(out + 22, pctr_fold(pctr_sum(0, out + 20, 8 + quote)));
            return n;
        }
        if ((pkt[0] >> 4) == 6) {
            uint8_t tail[8] = {0, 0, 0, 0, 0, 0, 0, 58};
            size_t i;
            int unspecified = 1;
            if (len < 40)
                return 0;
            if (pctr_get16(pkt + 4) > 0 && 40 + (size_t)pctr_get16(pkt + 4) < len)
                len = 40 + (size_t)pctr_get16(pkt + 4);
            if (pkt[6] == 58 && (len < 41 || pkt[40] < 128))
                return 0;  /* an ICMPv6 error (types below 128) */
            if (pkt[24] == 0xff || pkt[8] == 0xff)
                return 0;
            for (i = 8; i < 24; i++)
                unspecified &= pkt[i] == 0;
            if (unspecified)
                return 0;
            quote = len < PCTR_QUOTE6 ? len : PCTR_QUOTE6;
            n = 48 + quote;
            memset(out, 0, 48);
            out[0] = 0x60;
            pctr_put16(out + 4, (uint16_t)(8 + quote));
            out[6] = 58;
            out[7] = 64;
            memcpy(out + 8, pkt + 24, 16);
            memcpy(out + 24, pkt + 8, 16);
            out[40] = 1;  /* destination unreachable */
            out[41] = 4;  /* port unreachable */
            memcpy(out + 48, pkt, quote);
            pctr_put16(tail + 2, (uint16_t)(8 + quote));
            acc = pctr_sum(0, out + 8, 32);
            acc = pctr_sum(acc, tail, 8);
            acc = pctr_sum(acc, out + 40, 8 + quote);
            pctr_put16(out + 42, pctr_fold(acc));
            return n;
        }
        return 0;
    }


    /* Opens the raw sockets: 0, or -errno (*which: 4 or 6, the family that failed). An IPv6
       socket the kernel cannot make (EAFNOSUPPORT: IPv6 disabled) is left at -1: no IPv6
       packet can be held then. */
    static int pctr_open(int *fd4, int *fd6, int *which) {
        int one = 1, err;
        *fd4 = *fd6 = -1;
        *which = 4;
        *fd4 = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW);
        if (*fd4 < 0)
            return -errno;
        *which = 6;
        *fd6 = socket(AF_INET6, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW);
        if (*fd6 < 0) {
            err = errno;
            if (err == EAFNOSUPPORT)
                return 0;
            close(*fd4);
            *fd4 = -1;
            return -err;
        }
        /* Linux sets hdrincl for an IPPROTO_RAW IPv6 socket itself (since 4.5, with the
           option); said again for clarity, an error ignored on kernels without the option. */
        (void)setsockopt(*fd6, IPPROTO_IPV6, IPV6_HDRINCL, &one, sizeof(one));
        return 0;
    }
    """
    ctypedef struct pctr_segments:
        size_t len[2]
        int family
    int pctr_craft(const uint8_t *pkt, size_t len, pctr_segments *out) noexcept nogil
    int pctr_reset(int fd4, int fd6, const uint8_t *pkt, size_t len, uint64_t *sent,
                   uint64_t *errors) noexcept nogil
    const uint8_t *pctr_buf(const pctr_segments *s, int i) noexcept nogil
    size_t pctr_unreachable(const uint8_t *pkt, size_t len, uint8_t *out, size_t cap) noexcept nogil
    enum: PCTR_UNREACH_MAX
    int pctr_open(int *fd4, int *fd6, int *which) noexcept nogil
    int pctr_close "close"(int fd) noexcept nogil


cdef int tcp_reset_both(int fd4, int fd6, const uint8_t *pkt, size_t len) noexcept nogil:
    """Sends the two RSTs of the held client -> server TCP segment ``pkt[0..len)`` on the raw
    sockets ``fd4`` / ``fd6`` (AF_INET / AF_INET6, SOCK_RAW, IPPROTO_RAW); returns how many
    were sent (0: not a TCP segment we can answer, see above)."""
    return pctr_reset(fd4, fd6, pkt, len, NULL, NULL)


def tcp_reset_segments(bytes pkt):
    """The two IP packets (RST to the server, RST to the client) that ``TcpResetter`` would
    send for the client -> server TCP segment ``pkt`` (from its IP header on), or ``[]``."""
    cdef pctr_segments seg
    cdef int n, i
    if pkt is None:
        raise TypeError("pkt must be bytes")
    n = pctr_craft(<const uint8_t *> <const char *> pkt, len(pkt), &seg)
    return [(<const char *> pctr_buf(&seg, i))[:seg.len[i]] for i in range(n)]


def icmp_unreachable(bytes pkt):
    """The ICMP (or ICMPv6) port unreachable error that rejects the IP packet ``pkt`` (from its
    IP header on), as the bridge sends it with ``reject``; ``b""`` when none is due."""
    cdef uint8_t out[PCTR_UNREACH_MAX]
    cdef size_t n
    if pkt is None:
        raise TypeError("pkt must be bytes")
    n = pctr_unreachable(<const uint8_t *> <const char *> pkt, len(pkt), out, PCTR_UNREACH_MAX)
    return (<const char *> out)[:n]


cdef class TcpResetter:
    """Raw sockets (IPv4 and IPv6, IPPROTO_RAW; needs CAP_NET_RAW) that cut a TCP connection
    both ways from one held client -> server segment of it: ``reset`` (C, without the GIL) or
    ``reset_packet`` send an RST to the server as the client and one to the client as the
    server. ``sent`` counts the RSTs sent, ``errors`` the failed sends. ``close`` must not race
    with a ``reset`` in flight."""

    cdef int fd4
    cdef int fd6
    cdef readonly uint64_t sent
    cdef readonly uint64_t errors

    def __cinit__(self):
        cdef int which = 4
        cdef int rc
        self.fd4 = -1
        self.fd6 = -1
        self.sent = 0
        self.errors = 0
        rc = pctr_open(&self.fd4, &self.fd6, &which)
        if rc < 0:
            raise OSError(-rc, f"raw IPv{which} socket: {strerror(-rc).decode()}")

    def __dealloc__(self):
        if self.fd4 >= 0:
            pctr_close(self.fd4)
        if self.fd6 >= 0:
            pctr_close(self.fd6)

    def close(self):
        if self.fd4 >= 0:
            pctr_close(self.fd4)
            self.fd4 = -1
        if self.fd6 >= 0:
            pctr_close(self.fd6)
            self.fd6 = -1

    cdef int reset(self, const uint8_t *pkt, size_t len) noexcept nogil:
        """tcp_reset_both on this resetter's sockets, counted in ``sent`` / ``errors``."""
        return pctr_reset(self.fd4, self.fd6, pkt, len, &self.sent, &self.errors)

    def reset_packet(self, bytes pkt):
        """Sends the two RSTs of the client -> server TCP segment ``pkt``; how many were sent."""
        cdef const uint8_t *p
        cdef size_t n
        cdef int r
        if pkt is None:
            raise TypeError("pkt must be bytes")
        if self.fd4 < 0:
            raise ValueError("TcpResetter closed")
        p = <const uint8_t *> <const char *> pkt
        n = len(pkt)
        with nogil:
            r = self.reset(p, n)
        return r
