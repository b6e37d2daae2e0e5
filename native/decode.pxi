# L2-L4 packet decoder: raw frames -> PacketHeader (+ the flow an ICMP error quotes).
#
# Included by _native.pyx. Everything here runs without the GIL and writes straight into the
# caller's PacketHeader / pc_quote structs (numpy buffers): no Python object per packet. Every read is
# bounds-checked against the captured length; a packet that ends early or contradicts itself is
# flagged (PC_FLAG_MALFORMED/PC_FLAG_TRUNCATED) with an error_kind and never gets ports it did
# not carry.
#
# Overlay tunnels (VXLAN, Geneve, IP in IP, GRE) are opened when the caller gives a Tunnels
# (NULL opens none: every packet is judged by its outermost header, as the kernel's NFQUEUE hook
# sees it): the header describes the inner packet, PacketHeader.encap names the tunnel, and the
# outer header goes to the pc_outer beside it. A tunnel that cannot be read is flagged with its
# error_kind and the encap set: never judged by its outer header.

from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t
from libc.string cimport memcpy, memset, memcmp
from libc.stdlib cimport calloc, free, malloc, realloc

from engine_api cimport PC_QUOTE_VALID, pc_quote
from header_batch cimport (
    PC_ENCAP_GENEVE,
    PC_ENCAP_GRE,
    PC_ENCAP_IP6IP,
    PC_ENCAP_IPIP,
    PC_ENCAP_VXLAN,
    PC_ERR_BAD_IHL,
    PC_ERR_BAD_IP_VERSION,
    PC_ERR_BAD_L4_HEADER,
    PC_ERR_BAD_TOTAL_LENGTH,
    PC_ERR_COUNT,
    PC_ERR_FRAGMENT_OVERLAP,
    PC_ERR_FRAGMENT_UNMATCHED,
    PC_ERR_NONE,
    PC_ERR_TOO_MANY_EXT_HEADERS,
    PC_ERR_TOO_MANY_VLAN_TAGS,
    PC_ERR_TRUNCATED_IP,
    PC_ERR_TRUNCATED_L4,
    PC_ERR_TRUNCATED_LINK,
    PC_ERR_TRUNCATED_TUNNEL,
    PC_ERR_TUNNEL_FRAGMENT,
    PC_ERR_TUNNEL_TOO_DEEP,
    PC_ERR_TUNNEL_UNSUPPORTED,
    PC_ERR_UNKNOWN_ETHERTYPE,
    PC_ERR_UNKNOWN_LINKTYPE,
    PC_OUTER_HAS_KEY,
    pc_outer,
)

# Link types (pcap LINKTYPE_*).
cdef enum:
    LT_NULL = 0
    LT_ETHERNET = 1
    LT_RAW_12 = 12  # DLT_RAW on most BSDs
    LT_RAW_14 = 14  # DLT_RAW on OpenBSD
    LT_LOOP = 108
    LT_RAW = 101
    LT_LINUX_SLL = 113
    LT_IPV4 = 228
    LT_IPV6 = 229
    LT_LINUX_SLL2 = 276

# Bounds of the decoder.
cdef enum:
    MAX_VLAN_TAGS = 3
    MAX_EXT_HEADERS = 8
    FRAG_SETS = 1024       # fragment table: FRAG_SETS x FRAG_WAYS entries, LRU within a set
    FRAG_WAYS = 4
    MAX_TUNNEL_DEPTH = 3   # tunnels opened to reach one inner packet; one more is not judged
    TUNNEL_PORTS_CAP = 8   # UDP ports per tunnel kind

# The UDP destination ports VXLAN and Geneve are recognised by. Both are configurable in the
# overlays that use them (Calico's FelixConfiguration vxlanPort, 4789 by default; Cilium's
# tunnel-port, 8472 for VXLAN as Linux and Flannel default to, 6081 for Geneve), so they are
# given, not fixed: DEFAULT_VXLAN_PORTS and DEFAULT_GENEVE_PORTS unless the caller says otherwise.
DEFAULT_VXLAN_PORTS = (4789, 8472)
DEFAULT_GENEVE_PORTS = (6081,)
MAX_TUNNEL_PORTS = TUNNEL_PORTS_CAP

# The tunnels a decoder opens — VXLAN and Geneve by their UDP destination ports, IP in IP and
# GRE always — where their outer headers go, and how many packets it found inside one. All of
# it is read where a tunnel is opened, off the per-packet path: the decode functions take no
# argument for it but this struct (a reader tells by ``opened`` whether a batch has outer headers
# to keep; the outer header of ``headers[i]`` goes to ``outers[i]``).
cdef struct Tunnels:
    uint16_t vxlan[TUNNEL_PORTS_CAP]
    uint16_t geneve[TUNNEL_PORTS_CAP]
    uint8_t n_vxlan
    uint8_t n_geneve
    uint8_t depth           # while a packet's tunnels are opened: how many are open
    uint64_t opened
    PacketHeader *headers   # the batch being decoded
    pc_outer *outers        # beside it; NULL: outer headers not kept

# The flow quoted by an ICMP/ICMPv6 error (destination unreachable, time exceeded, ...) is a
# pc_quote (native/engine_api.h, generated from the conntrack's QuotedTuple in
# rust/core/src/conntrack/key.rs, which reads it), in a parallel array beside the header batch
# (the 64-byte header has no room for a second 5-tuple); numpy: pyclassify.capture.QUOTE_DTYPE.
# For a quoted ICMP query, sport is its identifier, dport 0 and icmp_type its type. The quoted IP
# version is the outer one.

cdef struct FragEntry:
    uint8_t src[16]
    uint8_t dst[16]
    uint32_t ident
    uint8_t proto
    uint8_t used
    uint16_t sport
    uint16_t dport
    uint64_t stamp

cdef struct FragTable:
    FragEntry *entries
    uint64_t clock
    uint64_t inserted
    uint64_t evicted
    uint64_t hits

# What the IP layer parser found.
cdef struct L3:
    uint8_t version
    uint8_t proto
    uint8_t is_frag
    uint8_t first_frag
    uint32_t frag_id
    uint32_t frag_off       # bytes
    const uint8_t *src
    const uint8_t *dst
    const uint8_t *l4       # first byte of the upper-layer header
    size_t l4_len           # bytes of it captured (bounded by the IP length)


# What a tunnel header says it carries: where the inner packet's IP header is, and the outer
# facts worth showing (the VNI or key, the payload type).
cdef struct Inner:
    const uint8_t *p
    size_t caplen
    size_t wirelen
    int version             # 4 or 6: the IP version announced for the inner header
    uint32_t vni
    uint16_t payload_type
    uint8_t has_key


cdef inline uint16_t be16(const uint8_t *p) noexcept nogil:
    return (<uint16_t>p[0] << 8) | p[1]

cdef inline uint32_t be32(const uint8_t *p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]

cdef inline uint32_t le32(const uint8_t *p) noexcept nogil:
    return (<uint32_t>p[3] << 24) | (<uint32_t>p[2] << 16) | (<uint32_t>p[1] << 8) | p[0]


cdef inline void put_addr(uint8_t *out, const uint8_t *a, uint8_t version) noexcept nogil:
    if version == 4:
        memset(out, 0, 10)
        out[10] = 0xFF
        out[11] = 0xFF
        memcpy(out + 12, a, 4)
    else:
        memcpy(out, a, 16)


cdef inline bint is_error_kind_truncated(int err) noexcept nogil:
    return (err == PC_ERR_TRUNCATED_LINK or err == PC_ERR_TRUNCATED_IP or err == PC_ERR_TRUNCATED_L4
            or err == PC_ERR_TRUNCATED_TUNNEL)


cdef inline void set_error(PacketHeader *h, int err) noexcept nogil:
    h.error_kind = <uint8_t>err
    if err != PC_ERR_FRAGMENT_UNMATCHED:
        h.flags |= PC_FLAG_MALFORMED
    if is_error_kind_truncated(err):
        h.flags |= PC_FLAG_TRUNCATED


# --- fragment table -----------------------------------------------------------------------------

cdef FragTable *frag_table_new() noexcept nogil:
    cdef FragTable *t = <FragTable *>calloc(1, sizeof(FragTable))
    if t == NULL:
        return NULL
    t.entries = <FragEntry *>calloc(FRAG_SETS * FRAG_WAYS, sizeof(FragEntry))
    if t.entries == NULL:
        free(t)
        return NULL
    return t

cdef void frag_table_free(FragTable *t) noexcept nogil:
    if t != NULL:
        free(t.entries)
        free(t)

cdef inline uint32_t frag_hash(const uint8_t *src, const uint8_t *dst, uint8_t proto,
                               uint32_t ident) noexcept nogil:
    # FNV-1a over the key; only picks the set.
    cdef uint32_t h = 2166136261u
    cdef int i
    for i in range(16):
        h = (h ^ src[i]) * 16777619u
        h = (h ^ dst[i]) * 16777619u
    h = (h ^ proto) * 16777619u
    h = (h ^ (ident & 0xFF)) * 16777619u
    h = (h ^ ((ident >> 8) & 0xFF)) * 16777619u
    h = (h ^ ((ident >> 16) & 0xFF)) * 16777619u
    h = (h ^ (ident >> 24)) * 16777619u
    return h % FRAG_SETS

cdef inline FragEntry *frag_find(FragTable *t, const uint8_t *src, const uint8_t *dst,
                                 uint8_t proto, uint32_t ident) noexcept nogil:
    cdef FragEntry *s = t.entries + frag_hash(src, dst, proto, ident) * FRAG_WAYS
    cdef int i
    for i in range(FRAG_WAYS):
        if (s[i].used and s[i].ident == ident and s[i].proto == proto
                and memcmp(s[i].src, src, 16) == 0 and memcmp(s[i].dst, dst, 16) == 0):
            return &s[i]
    return NULL

cdef inline void frag_insert(FragTable *t, const uint8_t *src, const uint8_t *dst, uint8_t proto,
                             uint32_t ident, uint16_t sport, uint16_t dport) noexcept nogil:
    cdef FragEntry *e = frag_find(t, src, dst, proto, ident)
    cdef FragEntry *s
    cdef int i
    if e == NULL:
        s = t.entries + frag_hash(src, dst, proto, ident) * FRAG_WAYS
        e = &s[0]
        for i in range(FRAG_WAYS):
            if not s[i].used:
                e = &s[i]
                break
            if s[i].stamp < e.stamp:
                e = &s[i]
        if e.used:
            t.evicted += 1
        memcpy(e.src, src, 16)
        memcpy(e.dst, dst, 16)
        e.ident = ident
        e.proto = proto
        e.used = 1
        t.inserted += 1
    t.clock += 1
    e.stamp = t.clock
    e.sport = sport
    e.dport = dport


# --- IP ---------------------------------------------------------------------------------------

cdef int parse_ip(const uint8_t *p, size_t caplen, size_t wirelen, int want_version, bint inner,
                  L3 *out) noexcept nogil:
    """Parse an IPv4/IPv6 header chain at p. Returns PC_ERR_NONE or an error kind.

    want_version: 4 or 6 if the link type says which, 0 to take the version nibble.
    inner: a header quoted inside an ICMP error (its lengths describe the original packet, so
    they are not checked against what was captured).
    """
    cdef int version, ihl, nh, n_ext
    cdef size_t total, hlen, off, end, elen
    cdef uint16_t fo
    memset(out, 0, sizeof(L3))
    if caplen < 1:
        return PC_ERR_TRUNCATED_IP
    version = p[0] >> 4
    if (version != 4 and version != 6) or (want_version and version != want_version):
        return PC_ERR_BAD_IP_VERSION
    out.version = <uint8_t>version
    if version == 4:
        if caplen < 20:
            return PC_ERR_TRUNCATED_IP
        ihl = (p[0] & 0x0F) * 4
        if ihl < 20:
            return PC_ERR_BAD_IHL
        if caplen < <size_t>ihl:
            return PC_ERR_TRUNCATED_IP
        total = be16(p + 2)
        if total < <size_t>ihl:
            if not inner:
                return PC_ERR_BAD_TOTAL_LENGTH
            total = caplen
        if not inner and total > wirelen:
            return PC_ERR_BAD_TOTAL_LENGTH
        out.proto = p[9]
        out.src = p + 12
        out.dst = p + 16
        fo = be16(p + 6)
        out.frag_id = be16(p + 4)
        out.frag_off = (fo & 0x1FFF) * 8
        if (fo & 0x3FFF) != 0:  # MF set or offset non-zero
            out.is_frag = 1
            out.first_frag = out.frag_off == 0
        end = total if total < caplen else caplen
        out.l4 = p + ihl
        out.l4_len = end - ihl
        return PC_ERR_NONE
    # IPv6
    if caplen < 40:
        return PC_ERR_TRUNCATED_IP
    total = be16(p + 4)
    if total == 0 or inner:
        total = caplen  # jumbogram (payload length in hop-by-hop) or a quote: take what is there
    else:
        total += 40
        if total > wirelen:
            return PC_ERR_BAD_TOTAL_LENGTH
    end = total if total < caplen else caplen
    out.src = p + 8
    out.dst = p + 24
    nh = p[6]
    off = 40
    n_ext = 0
    while nh == 0 or nh == 43 or nh == 60 or nh == 44 or nh == 51:
        n_ext += 1
        if n_ext > MAX_EXT_HEADERS:
            out.proto = <uint8_t>nh
            return PC_ERR_TOO_MANY_EXT_HEADERS
        if off + 8 > end:
            out.proto = <uint8_t>nh
            return PC_ERR_TRUNCATED_IP
        if nh == 44:
            fo = be16(p + off + 2)
            out.is_frag = 1
            out.frag_off = fo & 0xFFF8
            out.first_frag = out.frag_off == 0
            out.frag_id = be32(p + off + 4)
            nh = p[off]
            off += 8
            if not out.first_frag:
                break  # a later fragment: what follows is payload, not a header
            continue
        if nh == 51:
            elen = (<size_t>p[off + 1] + 2) * 4
        else:
            elen = (<size_t>p[off + 1] + 1) * 8
        nh = p[off]
        off += elen
        if off > end:
            out.proto = <uint8_t>nh
            return PC_ERR_TRUNCATED_IP
    out.proto = <uint8_t>nh
    out.l4 = p + off
    out.l4_len = end - off
    return PC_ERR_NONE


cdef inline bint proto_has_ports(uint8_t proto) noexcept nogil:
    return proto == 6 or proto == 17 or proto == 136 or proto == 132


cdef inline bint icmp_is_error(uint8_t proto, uint8_t icmp_type) noexcept nogil:
    if proto == 1:
        return (icmp_type == 3 or icmp_type == 4 or icmp_type == 5 or icmp_type == 11
                or icmp_type == 12)
    return icmp_type >= 1 and icmp_type <= 4  # ICMPv6 errors


cdef void decode_quote(const uint8_t *p, size_t n, uint8_t outer_version, pc_quote *q) noexcept nogil:
    """The flow quoted after an ICMP error header (the invoking packet's IP header + 8 bytes)."""
    cdef L3 l3
    if parse_ip(p, n, n, outer_version, True, &l3) != PC_ERR_NONE:
        return
    put_addr(q.src_addr, l3.src, l3.version)
    put_addr(q.dst_addr, l3.dst, l3.version)
    q.protocol = l3.proto
    if (not l3.is_frag or l3.first_frag) and l3.l4_len >= 4:
        if proto_has_ports(l3.proto):
            q.sport = be16(l3.l4)
            q.dport = be16(l3.l4 + 2)
            q.flags = PC_QUOTE_VALID | PC_FLAG_HAS_PORTS  # the ports too
        elif (l3.proto == 1 or l3.proto == 58) and l3.l4_len >= 6:
            q.icmp_type = l3.l4[0]
            q.sport = be16(l3.l4 + 4)  # the query's identifier
            q.flags = PC_QUOTE_VALID


# --- tunnels ------------------------------------------------------------------------------------

cdef inline size_t l4_wire(const L3 *l3) noexcept nogil:
    """Bytes of l3's upper-layer header and what follows on the wire, as its IP length says
    (read again from the header, which begins 12 (IPv4) or 8 (IPv6) bytes before the source
    address: worked out only for a tunnel's packet, not for every packet parse_ip reads)."""
    cdef const uint8_t *ip
    cdef size_t total
    if l3.version == 4:
        ip = l3.src - 12
        total = be16(ip + 2)
    else:
        ip = l3.src - 8
        total = be16(ip + 4)
        if total == 0:
            return l3.l4_len  # a jumbogram: its length is in an option; what was captured
        total += 40
    return total - <size_t>(l3.l4 - ip)


cdef inline uint8_t ip_tunnel(uint8_t proto) noexcept nogil:
    """The tunnel an IP protocol number is (0: none)."""
    if proto == 4:
        return PC_ENCAP_IPIP
    if proto == 41:
        return PC_ENCAP_IP6IP
    if proto == 47:
        return PC_ENCAP_GRE
    return 0


cdef inline uint8_t udp_tunnel(const Tunnels *tp, uint16_t dport) noexcept nogil:
    """The tunnel a UDP destination port is (0: none)."""
    cdef int i
    for i in range(tp.n_vxlan):
        if tp.vxlan[i] == dport:
            return PC_ENCAP_VXLAN
    for i in range(tp.n_geneve):
        if tp.geneve[i] == dport:
            return PC_ENCAP_GENEVE
    return 0


cdef int tunnel_payload(uint16_t payload_type, const uint8_t *p, size_t caplen, size_t wirelen,
                        Inner *out) noexcept nogil:
    """The inner packet a tunnel carries as ``payload_type`` (an ethertype) at p: past an inner
    Ethernet header (0x6558), or an IP header itself. Returns PC_ERR_NONE or an error kind."""
    cdef size_t off = 0
    cdef int ver = 0
    cdef int err
    out.payload_type = payload_type
    if payload_type == 0x6558:
        err = link_layer(p, caplen, LT_ETHERNET, &off, &ver)
        if err != PC_ERR_NONE:
            return err
    elif payload_type == 0x0800:
        ver = 4
    elif payload_type == 0x86DD:
        ver = 6
    else:
        return PC_ERR_TUNNEL_UNSUPPORTED
    out.p = p + off
    out.caplen = caplen - off
    out.wirelen = wirelen - off if wirelen >= off else 0
    out.version = ver
    return PC_ERR_NONE


cdef int open_tunnel(uint8_t kind, const uint8_t *p, size_t caplen, size_t wirelen,
                     Inner *out) noexcept nogil:
    """Reads the tunnel header of ``kind`` at p — the UDP header for VXLAN and Geneve, the IP
    payload for the others — and where its inner packet is (``out``). Returns PC_ERR_NONE or an
    error kind; ``out`` holds what was read before an error (the VNI or key, the payload type)."""
    cdef uint16_t fl, ulen
    cdef size_t hl
    memset(out, 0, sizeof(Inner))
    if kind == PC_ENCAP_IPIP:
        return tunnel_payload(0x0800, p, caplen, wirelen, out)
    if kind == PC_ENCAP_IP6IP:
        return tunnel_payload(0x86DD, p, caplen, wirelen, out)
    if kind == PC_ENCAP_GRE:
        # RFC 2784/2890: C, K, S flags add 4 bytes each. Routing (RFC 1701) and versions other
        # than 0 (1 is PPTP's) are refused, as Linux refuses them.
        if caplen < 4:
            return PC_ERR_TRUNCATED_TUNNEL
        fl = be16(p)
        out.payload_type = be16(p + 2)
        if (fl & 0x0007) != 0 or (fl & 0x4000) != 0:
            return PC_ERR_TUNNEL_UNSUPPORTED
        hl = 4
        if fl & 0x8000:
            hl += 4
        if fl & 0x2000:
            if caplen < hl + 4:
                return PC_ERR_TRUNCATED_TUNNEL
            out.vni = be32(p + hl)
            out.has_key = 1
            hl += 4
        if fl & 0x1000:
            hl += 4
        if caplen < hl:
            return PC_ERR_TRUNCATED_TUNNEL
        return tunnel_payload(out.payload_type, p + hl, caplen - hl, wirelen - hl, out)
    # VXLAN and Geneve: after the UDP header, bounded by the UDP length.
    if caplen < 8:
        return PC_ERR_TRUNCATED_L4
    ulen = be16(p + 4)
    if ulen >= 8:
        if caplen > ulen:
            caplen = ulen
        if wirelen > ulen:
            wirelen = ulen
    p += 8
    caplen -= 8
    wirelen -= 8
    if caplen < 8:
        return PC_ERR_TRUNCATED_TUNNEL
    out.vni = be32(p + 4) >> 8
    out.has_key = 1
    if kind == PC_ENCAP_VXLAN:
        # RFC 7348: the I flag says the VNI is valid; Linux drops a packet without it.
        out.payload_type = 0x6558
        if not (p[0] & 0x08):
            out.has_key = 0
            return PC_ERR_TUNNEL_UNSUPPORTED
        return tunnel_payload(0x6558, p + 8, caplen - 8, wirelen - 8, out)
    # Geneve (RFC 8926): version 0; options are skipped by their length, but a packet whose C
    # flag says critical options are present must be dropped by an endpoint that does not
    # understand them, and this decoder understands none.
    out.payload_type = be16(p + 2)
    if (p[0] >> 6) != 0 or (p[1] & 0x40):
        return PC_ERR_TUNNEL_UNSUPPORTED
    hl = 8 + <size_t>(p[0] & 0x3F) * 4
    if caplen < hl:
        return PC_ERR_TRUNCATED_TUNNEL
    return tunnel_payload(out.payload_type, p + hl, caplen - hl, wirelen - hl, out)


cdef inline void enter_tunnel(PacketHeader *h, pc_outer *o, uint8_t kind, int depth) noexcept nogil:
    """h, which describes the packet around a tunnel, is to describe what it carries: the
    outermost header goes to ``o`` (if any), h is cleared but for what the capture says (time,
    length, interface) and the outermost tunnel's kind."""
    cdef uint64_t ts = h.ts_ns
    cdef uint32_t pkt_len = h.pkt_len
    cdef uint32_t ifindex = h.ifindex
    cdef uint8_t encap = h.encap if depth else kind
    if o != NULL:
        if depth == 0:
            memcpy(o.src_addr, h.src_addr, 16)
            memcpy(o.dst_addr, h.dst_addr, 16)
            o.ip_version = h.ip_version
            o.protocol = h.protocol
            o.encap = kind
            o.sport = h.sport if kind == PC_ENCAP_VXLAN or kind == PC_ENCAP_GENEVE else 0
            o.dport = h.dport if kind == PC_ENCAP_VXLAN or kind == PC_ENCAP_GENEVE else 0
            o.vni = 0
            o.payload_type = 0
            o.flags = 0
            o.reserved = 0
        o.depth = <uint8_t>(depth + 1)
    memset(h, 0, sizeof(PacketHeader))
    h.ts_ns = ts
    h.pkt_len = pkt_len
    h.ifindex = ifindex
    h.encap = encap


ctypedef void (*tunnel_opener)(PacketHeader *h, pc_quote *q, FragTable *ft, Tunnels *tp, const L3 *l3,
                               uint8_t tunnel) noexcept nogil

# open_tunnels, called through this pointer: the C compiler cannot inline it into decode_l3
# and so into the per-packet loops (it would: they call it once), which keeps them as tight as
# without tunnels (inlined, a plain packet took 15-20 % longer to decode).
cdef tunnel_opener OPEN_TUNNELS


cdef void decode_l3(const uint8_t *p, size_t caplen, size_t wirelen, int want_version,
                    PacketHeader *h, pc_quote *q, FragTable *ft, Tunnels *tp) noexcept nogil:
    """One IP packet into h; with ``tp``, a tunnel's packet through to the packet it carries
    (``open_tunnels``)."""
    cdef L3 l3
    cdef int err = parse_ip(p, caplen, wirelen, want_version, False, &l3)
    cdef FragEntry *e
    cdef uint8_t proto
    cdef uint8_t kind
    cdef const uint8_t *l4
    cdef size_t n
    if l3.version == 0:
        set_error(h, err)
        return
    h.ip_version = l3.version
    h.protocol = l3.proto
    if l3.src != NULL:
        put_addr(h.src_addr, l3.src, l3.version)
        put_addr(h.dst_addr, l3.dst, l3.version)
    if err != PC_ERR_NONE:
        set_error(h, err)
        return
    proto = l3.proto
    l4 = l3.l4
    n = l3.l4_len
    if l3.is_frag:
        h.flags |= PC_FLAG_FRAGMENT
        h.frag_id = l3.frag_id
        if not l3.first_frag:
            # RFC 1858: a later fragment reaching into the TCP header rewrites it.
            if proto == 6 and l3.version == 4 and l3.frag_off == 8:
                set_error(h, PC_ERR_FRAGMENT_OVERLAP)
                return
            if proto_has_ports(proto):
                e = frag_find(ft, h.src_addr, h.dst_addr, proto, l3.frag_id) if ft != NULL else NULL
                if e == NULL:
                    set_error(h, PC_ERR_FRAGMENT_UNMATCHED)
                else:
                    ft.hits += 1
                    h.sport = e.sport
                    h.dport = e.dport
                    h.flags |= PC_FLAG_HAS_PORTS
            if tp != NULL:
                kind = ip_tunnel(proto)
                if kind == 0 and proto == 17 and h.flags & PC_FLAG_HAS_PORTS:
                    kind = udp_tunnel(tp, h.dport)
                if kind:
                    OPEN_TUNNELS(h, q, ft, tp, &l3, kind)
            return
        h.flags |= PC_FLAG_FIRST_FRAGMENT
    if proto == 6:
        if n < 20:
            set_error(h, PC_ERR_TRUNCATED_L4)
            return
        if (l4[12] >> 4) < 5:
            set_error(h, PC_ERR_BAD_L4_HEADER)
            return
        h.sport = be16(l4)
        h.dport = be16(l4 + 2)
        h.tcp_flags = l4[13]
        h.flags |= PC_FLAG_HAS_PORTS
    elif proto == 17 or proto == 136:
        if n < 8:
            set_error(h, PC_ERR_TRUNCATED_L4)
            return
        if proto == 17 and be16(l4 + 4) < 8 and be16(l4 + 4) != 0:
            set_error(h, PC_ERR_BAD_L4_HEADER)
            return
        h.sport = be16(l4)
        h.dport = be16(l4 + 2)
        h.flags |= PC_FLAG_HAS_PORTS
        if tp != NULL and proto == 17:
            kind = udp_tunnel(tp, h.dport)
            if kind:
                if l3.is_frag and ft != NULL:
                    # its later fragments find these ports, and so that they are a tunnel's
                    frag_insert(ft, h.src_addr, h.dst_addr, proto, l3.frag_id, h.sport, h.dport)
                OPEN_TUNNELS(h, q, ft, tp, &l3, kind)
                return
    elif proto == 132:
        if n < 12:
            set_error(h, PC_ERR_TRUNCATED_L4)
            return
        h.sport = be16(l4)
        h.dport = be16(l4 + 2)
        h.flags |= PC_FLAG_HAS_PORTS
    elif (proto == 1 and l3.version == 4) or (proto == 58 and l3.version == 6):
        if n < 8:
            set_error(h, PC_ERR_TRUNCATED_L4)
            return
        h.icmp_type = l4[0]
        h.icmp_code = l4[1]
        if icmp_is_error(proto, l4[0]):
            h.flags |= PC_FLAG_ICMP_ERROR
            if q != NULL:
                decode_quote(l4 + 8, n - 8, l3.version, q)
        else:
            # Queries and replies (echo, ...): the identifier keys the flow for connection
            # tracking; FLAG_HAS_PORTS stays clear, policy sees no ports here.
            h.sport = be16(l4 + 4)
        return
    else:
        # IP in IP, GRE (tested here, past the common protocols: they pay nothing for it)
        if tp != NULL:
            kind = ip_tunnel(proto)
            if kind:
                OPEN_TUNNELS(h, q, ft, tp, &l3, kind)
        return
    if l3.is_frag and ft != NULL:
        frag_insert(ft, h.src_addr, h.dst_addr, proto, l3.frag_id, h.sport, h.dport)


cdef void open_tunnels(PacketHeader *h, pc_quote *q, FragTable *ft, Tunnels *tp, const L3 *l3,
                       uint8_t tunnel) noexcept nogil:
    """h describes a packet of ``tunnel`` (``l3`` its IP header): it is to describe the packet
    the tunnel carries, its outer record (``tp.outers``) the outermost header. decode_l3 calls
    this for a tunnel's packet and again for each tunnel nested in it, up to the bound (h.encap
    is 0 at the outermost)."""
    cdef Inner inner
    cdef int err
    cdef pc_outer *o = tp.outers + (h - tp.headers) if tp.outers != NULL else NULL
    if h.encap == 0:
        tp.opened += 1
        tp.depth = 0
    enter_tunnel(h, o, tunnel, tp.depth)
    if l3.is_frag:
        set_error(h, PC_ERR_TUNNEL_FRAGMENT)
        return
    if tp.depth >= MAX_TUNNEL_DEPTH:
        set_error(h, PC_ERR_TUNNEL_TOO_DEEP)
        return
    err = open_tunnel(tunnel, l3.l4, l3.l4_len, l4_wire(l3), &inner)
    if tp.depth == 0 and o != NULL:
        o.vni = inner.vni
        o.payload_type = inner.payload_type
        o.flags = PC_OUTER_HAS_KEY if inner.has_key else 0
    if err != PC_ERR_NONE:
        set_error(h, err)
        return
    tp.depth += 1
    decode_l3(inner.p, inner.caplen, inner.wirelen, inner.version, h, q, ft, tp)


OPEN_TUNNELS = open_tunnels


cdef inline int ethertype_version(uint16_t et) noexcept nogil:
    if et == 0x0800:
        return 4
    if et == 0x86DD:
        return 6
    return 0


cdef inline int family_version(uint32_t fam) noexcept nogil:
    if fam == 2:
        return 4
    if fam == 10 or fam == 24 or fam == 28 or fam == 30:
        return 6
    return 0


cdef int link_layer(const uint8_t *p, size_t caplen, uint32_t linktype, size_t *off_out,
                    int *ver_out) noexcept nogil:
    """The link-layer header of a frame: its length (``off_out``) and the IP version it
    announces (``ver_out``, 0: take the version nibble). Returns PC_ERR_NONE or an error kind."""
    cdef size_t off = 0
    cdef uint16_t et
    cdef uint32_t fam
    cdef int ver = 0
    cdef int tags = 0
    if linktype == LT_ETHERNET:
        if caplen < 14:
            return PC_ERR_TRUNCATED_LINK
        et = be16(p + 12)
        off = 14
        while et == 0x8100 or et == 0x88A8 or et == 0x9100:
            tags += 1
            if tags > MAX_VLAN_TAGS:
                return PC_ERR_TOO_MANY_VLAN_TAGS
            if caplen < off + 4:
                return PC_ERR_TRUNCATED_LINK
            et = be16(p + off + 2)
            off += 4
        ver = ethertype_version(et)
        if ver == 0:
            return PC_ERR_UNKNOWN_ETHERTYPE
    elif linktype == LT_RAW or linktype == LT_RAW_12 or linktype == LT_RAW_14:
        ver = 0
    elif linktype == LT_IPV4:
        ver = 4
    elif linktype == LT_IPV6:
        ver = 6
    elif linktype == LT_LINUX_SLL:
        if caplen < 16:
            return PC_ERR_TRUNCATED_LINK
        off = 16
        ver = ethertype_version(be16(p + 14))
        if ver == 0:
            return PC_ERR_UNKNOWN_ETHERTYPE
    elif linktype == LT_LINUX_SLL2:
        if caplen < 20:
            return PC_ERR_TRUNCATED_LINK
        off = 20
        ver = ethertype_version(be16(p))
        if ver == 0:
            return PC_ERR_UNKNOWN_ETHERTYPE
    elif linktype == LT_NULL or linktype == LT_LOOP:
        if caplen < 4:
            return PC_ERR_TRUNCATED_LINK
        off = 4
        if linktype == LT_LOOP:
            fam = be32(p)
        else:
            # Host byte order of the capturing machine, which may not be ours: take the order
            # in which the value is small.
            fam = le32(p)
            if fam > 0xFFFF:
                fam = be32(p)
        ver = family_version(fam)
        if ver == 0:
            return PC_ERR_UNKNOWN_ETHERTYPE
    else:
        return PC_ERR_UNKNOWN_LINKTYPE
    off_out[0] = off
    ver_out[0] = ver
    return PC_ERR_NONE


cdef inline void decode_frame(const uint8_t *p, size_t caplen, size_t wirelen, uint32_t linktype,
                              PacketHeader *h, pc_quote *q, FragTable *ft, Tunnels *tp) noexcept nogil:
    """Decode one frame into h (whose ts_ns, pkt_len, ifindex the caller has set)."""
    cdef size_t off = 0
    cdef int ver = 0
    cdef int err = link_layer(p, caplen, linktype, &off, &ver)
    if err != PC_ERR_NONE:
        set_error(h, err)
        return
    if wirelen < caplen:
        wirelen = caplen
    decode_l3(p + off, caplen - off, wirelen - off, ver, h, q, ft, tp)


cdef int l4_payload(const uint8_t *p, size_t caplen, uint32_t linktype, const Tunnels *tp,
                    size_t *start, size_t *end, uint32_t *seq) noexcept nogil:
    """Where a frame's TCP or UDP payload lies (``start``/``end``, offsets in the frame, end
    bounded by what was captured and by the IP and UDP lengths) and, for TCP, the sequence
    number of its first byte (``seq``; 0 for UDP); 0 when it has none (not IP, not TCP/UDP, a
    later fragment, a header cut short). With ``tp``, the tunnels the decoder opens are opened
    here too: the payload is the inner packet's."""
    cdef size_t off = 0
    cdef int ver = 0
    cdef int depth = 0
    cdef L3 l3
    cdef Inner inner
    cdef uint8_t tunnel
    cdef const uint8_t *ip
    cdef size_t ipcap, ipwire
    cdef size_t hl, n
    if link_layer(p, caplen, linktype, &off, &ver) != PC_ERR_NONE:
        return 0
    ip = p + off
    ipcap = ipwire = caplen - off
    while True:
        if parse_ip(ip, ipcap, ipwire, ver, False, &l3) != PC_ERR_NONE or l3.l4 == NULL:
            return 0
        if l3.is_frag and not l3.first_frag:
            return 0
        if tp == NULL:
            break
        tunnel = ip_tunnel(l3.proto)
        if tunnel == 0 and l3.proto == 17 and l3.l4_len >= 8:
            tunnel = udp_tunnel(tp, be16(l3.l4 + 2))
        if tunnel == 0:
            break
        if l3.is_frag or depth >= MAX_TUNNEL_DEPTH:
            return 0
        if open_tunnel(tunnel, l3.l4, l3.l4_len, l4_wire(&l3), &inner) != PC_ERR_NONE:
            return 0
        ip, ipcap, ipwire, ver = inner.p, inner.caplen, inner.wirelen, inner.version
        depth += 1
    n = l3.l4_len
    if l3.proto == 6:
        if n < 20:
            return 0
        hl = (l3.l4[12] >> 4) * 4
        seq[0] = be32(l3.l4 + 4)
    elif l3.proto == 17:
        if n < 8:
            return 0
        hl = 8
        seq[0] = 0
        if be16(l3.l4 + 4) >= 8 and be16(l3.l4 + 4) < n:
            n = be16(l3.l4 + 4)
    else:
        return 0
    if hl < 8 or hl > n:
        return 0
    start[0] = <size_t>(l3.l4 - p) + hl
    end[0] = <size_t>(l3.l4 - p) + n
    return 1


cdef inline void decode_one(const uint8_t *p, size_t caplen, size_t wirelen, uint32_t linktype,
                            uint64_t ts_ns, uint32_t ifindex, PacketHeader *h, pc_quote *q,
                            FragTable *ft, Tunnels *tp) noexcept nogil:
    """Decode one frame into h (and q: may be NULL). ``tp`` NULL opens no tunnel; else a
    tunnel's frame has its outer header written beside h (``Tunnels.outers``, if set)."""
    memset(h, 0, sizeof(PacketHeader))
    if q != NULL:
        memset(q, 0, sizeof(pc_quote))
    h.ts_ns = ts_ns
    h.pkt_len = <uint32_t>wirelen
    h.ifindex = ifindex
    decode_frame(p, caplen, wirelen, linktype, h, q, ft, tp)


cdef int tunnels_set(Tunnels *tp, vxlan_ports, geneve_ports) except -1:
    """Fills tp from two sequences of UDP ports (ValueError for a port out of range or too
    many ports)."""
    memset(tp, 0, sizeof(Tunnels))
    vxlan_ports = tuple(vxlan_ports)
    geneve_ports = tuple(geneve_ports)
    for name, ports in (("VXLAN", vxlan_ports), ("Geneve", geneve_ports)):
        if len(ports) > TUNNEL_PORTS_CAP:
            raise ValueError(f"at most {TUNNEL_PORTS_CAP} {name} ports, not {len(ports)}")
        for port in ports:
            if not isinstance(port, int) or not 1 <= port <= 65535:
                raise ValueError(f"{name} port {port!r} is not a UDP port (1-65535)")
    for port in vxlan_ports:
        tp.vxlan[tp.n_vxlan] = <uint16_t>port
        tp.n_vxlan += 1
    for port in geneve_ports:
        tp.geneve[tp.n_geneve] = <uint16_t>port
        tp.n_geneve += 1
    return 0


def error_kinds():
    """The decode error kinds of native/header_batch.h as [(name, value), ...] in value order."""
    return [
        ("ERR_NONE", PC_ERR_NONE),
        ("ERR_TRUNCATED_LINK", PC_ERR_TRUNCATED_LINK),
        ("ERR_TRUNCATED_IP", PC_ERR_TRUNCATED_IP),
        ("ERR_TRUNCATED_L4", PC_ERR_TRUNCATED_L4),
        ("ERR_BAD_IP_VERSION", PC_ERR_BAD_IP_VERSION),
        ("ERR_BAD_IHL", PC_ERR_BAD_IHL),
        ("ERR_BAD_TOTAL_LENGTH", PC_ERR_BAD_TOTAL_LENGTH),
        ("ERR_UNKNOWN_ETHERTYPE", PC_ERR_UNKNOWN_ETHERTYPE),
        ("ERR_UNKNOWN_LINKTYPE", PC_ERR_UNKNOWN_LINKTYPE),
        ("ERR_TOO_MANY_EXT_HEADERS", PC_ERR_TOO_MANY_EXT_HEADERS),
        ("ERR_TOO_MANY_VLAN_TAGS", PC_ERR_TOO_MANY_VLAN_TAGS),
        ("ERR_BAD_L4_HEADER", PC_ERR_BAD_L4_HEADER),
        ("ERR_FRAGMENT_OVERLAP", PC_ERR_FRAGMENT_OVERLAP),
        ("ERR_FRAGMENT_UNMATCHED", PC_ERR_FRAGMENT_UNMATCHED),
        ("ERR_TRUNCATED_TUNNEL", PC_ERR_TRUNCATED_TUNNEL),
        ("ERR_TUNNEL_UNSUPPORTED", PC_ERR_TUNNEL_UNSUPPORTED),
        ("ERR_TUNNEL_TOO_DEEP", PC_ERR_TUNNEL_TOO_DEEP),
        ("ERR_TUNNEL_FRAGMENT", PC_ERR_TUNNEL_FRAGMENT),
    ]


def encap_kinds():
    """The tunnel kinds of native/header_batch.h (PacketHeader.encap) as [(name, value), ...]."""
    return [
        ("ENCAP_NONE", 0),
        ("ENCAP_VXLAN", PC_ENCAP_VXLAN),
        ("ENCAP_GENEVE", PC_ENCAP_GENEVE),
        ("ENCAP_IPIP", PC_ENCAP_IPIP),
        ("ENCAP_IP6IP", PC_ENCAP_IP6IP),
        ("ENCAP_GRE", PC_ENCAP_GRE),
    ]


QUOTE_SIZE = sizeof(pc_quote)
OUTER_SIZE = sizeof(pc_outer)


def payload_spans(data, offsets, caplens, linktypes, indices, vxlan_ports=DEFAULT_VXLAN_PORTS,
                  geneve_ports=DEFAULT_GENEVE_PORTS, bint decapsulate=True):
    """For packets ``indices`` of a capture batch (``Batch.data``, ``offsets``, ``caplens``,
    ``linktypes``): an (n, 3) int64 array of each one's TCP/UDP payload as [start, end) in
    ``data`` and, for TCP, the sequence number of its first byte; (0, 0, 0) where it has none.
    Decoded natively, bounds-checked like the decoder; tunnels opened as the Reader that
    decoded the batch opened them (its ports, ``decapsulate``)."""
    import numpy as np
    cdef Tunnels ports
    tunnels_set(&ports, vxlan_ports, geneve_ports)
    cdef const Tunnels *tp = &ports if decapsulate else NULL
    cdef const uint8_t[::1] buf = data
    cdef Py_ssize_t n = len(indices)
    out = np.zeros((n, 3), dtype=np.int64)
    cdef long long[:, ::1] o = out
    cdef const unsigned long long[::1] offs = np.ascontiguousarray(offsets, dtype=np.uint64)
    cdef const unsigned int[::1] lens = np.ascontiguousarray(caplens, dtype=np.uint32)
    cdef const unsigned int[::1] lts = np.ascontiguousarray(linktypes, dtype=np.uint32)
    cdef const long long[::1] idx = np.ascontiguousarray(indices, dtype=np.int64)
    cdef Py_ssize_t k, i
    cdef size_t s, e, off, cap
    cdef uint32_t seq = 0
    with nogil:
        for k in range(n):
            i = idx[k]
            if i < 0 or i >= offs.shape[0]:
                continue
            off = offs[i]
            cap = lens[i]
            if off > <size_t>buf.shape[0] or cap > <size_t>buf.shape[0] - off:
                continue
            if cap and l4_payload(&buf[off], cap, lts[i], tp, &s, &e, &seq):
                o[k, 0] = <long long>(off + s)
                o[k, 1] = <long long>(off + e)
                o[k, 2] = <long long>seq
    return out


cdef class Decoder:
    """Decodes frames of a given link type into a header batch, with its own fragment table.

    For callers that hold raw frames rather than a capture (tests, live loops). ``decode`` fills
    ``headers`` (HEADER_DTYPE) and ``quotes`` (QUOTE_DTYPE) arrays of at least ``len(frames)``,
    and ``outers`` (OUTER_DTYPE) if given, for the packets found inside a tunnel. Tunnels are
    opened as ``Reader`` opens them (``vxlan_ports``, ``geneve_ports``, ``decapsulate``).
    """

    cdef FragTable *_ft
    cdef Tunnels _ports
    cdef bint _decapsulate

    def __cinit__(self, *args, **kwargs):
        self._ft = frag_table_new()
        if self._ft == NULL:
            raise MemoryError()

    def __init__(self, vxlan_ports=DEFAULT_VXLAN_PORTS, geneve_ports=DEFAULT_GENEVE_PORTS,
                 bint decapsulate=True):
        tunnels_set(&self._ports, vxlan_ports, geneve_ports)
        self._decapsulate = decapsulate

    def __dealloc__(self):
        frag_table_free(self._ft)

    def decode(self, frames, headers, quotes, uint32_t linktype=LT_ETHERNET, ts_ns=None,
               wire_lengths=None, outers=None):
        """Decode ``frames`` (a sequence of bytes-like) into ``headers[i]``/``quotes[i]`` (and
        ``outers[i]`` where the frame is a tunnel's)."""
        cdef Py_ssize_t n = len(frames)
        cdef Py_ssize_t i
        cdef const uint8_t[::1] buf
        cdef unsigned char[::1] hview = _as_bytes_view(headers, n, sizeof(PacketHeader), "headers")
        cdef unsigned char[::1] qview = _as_bytes_view(quotes, n, sizeof(pc_quote), "quotes")
        cdef unsigned char[::1] oview
        cdef PacketHeader *hs = <PacketHeader *>&hview[0] if n else NULL
        cdef pc_quote *qs = <pc_quote *>&qview[0] if n else NULL
        cdef pc_outer *os = NULL
        cdef Tunnels *tp = &self._ports if self._decapsulate else NULL
        cdef size_t wl
        cdef uint64_t ts
        if outers is not None:
            oview = _as_bytes_view(outers, n, sizeof(pc_outer), "outers")
            os = <pc_outer *>&oview[0] if n else NULL
        self._ports.headers = hs
        self._ports.outers = os
        for i in range(n):
            buf = bytes(frames[i]) if not isinstance(frames[i], bytes) else frames[i]
            wl = <size_t>len(buf) if wire_lengths is None else <size_t>wire_lengths[i]
            ts = 0 if ts_ns is None else <uint64_t>ts_ns[i]
            with nogil:
                decode_one(&buf[0] if buf.shape[0] else <const uint8_t *>"", buf.shape[0], wl,
                           linktype, ts, 0, &hs[i], &qs[i], self._ft, tp)

    @property
    def fragment_stats(self):
        """Fragment table counters: {"inserted", "evicted", "hits"}."""
        return {"inserted": self._ft.inserted, "evicted": self._ft.evicted, "hits": self._ft.hits}


cdef unsigned char[::1] _as_bytes_view(arr, Py_ssize_t n, size_t itemsize, str what):
    import numpy as np
    if not isinstance(arr, np.ndarray) or not arr.flags.c_contiguous or not arr.flags.writeable:
        raise TypeError(f"{what} must be a writable C-contiguous numpy array")
    if arr.dtype.itemsize != itemsize:
        raise TypeError(f"{what} must have {itemsize}-byte records, not {arr.dtype.itemsize}")
    if arr.shape[0] < n:
        raise ValueError(f"{what} holds {arr.shape[0]} records, {n} needed")
    if n == 0:
        return np.zeros(1, np.uint8)
    return arr.view(np.uint8).reshape(-1)
