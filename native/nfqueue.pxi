# NFQUEUE live loop: raw netlink to nfnetlink_queue (no libnetfilter_queue), batched receive,
# decode into the header batch, one engine call per batch without the GIL, batched verdicts.
#
# Included by _native.pyx after decode.pxi and engine_client.pxi. The inotify binding of the
# policy watcher is inotify.pxi.
#
# Protocol (include/uapi/linux/netfilter/nfnetlink_queue.h): every message is an nlmsghdr, an
# nfgenmsg (family, version, queue number big-endian) and netlink attributes. Verdicts apply per
# packet id (NFQNL_MSG_VERDICT) or to every pending id <= the given one (NFQNL_MSG_VERDICT_BATCH);
# the loop verdicts packets in id order, so a batch verdict only ever covers packets it judged
# (or, after a gap in the ids, packets lost in the socket buffer: those get the fail-mode verdict).

from libc.errno cimport errno, EINTR, EAGAIN, ENOBUFS, ENOENT, ETIMEDOUT
from libc.stdint cimport int32_t, int64_t
from posix.time cimport clock_gettime, timespec, timeval, CLOCK_REALTIME, CLOCK_MONOTONIC

cdef extern from "<sys/socket.h>" nogil:
    ctypedef unsigned int socklen_t
    struct iovec:
        void *iov_base
        size_t iov_len
    struct msghdr:
        void *msg_name
        socklen_t msg_namelen
        iovec *msg_iov
        size_t msg_iovlen
        void *msg_control
        size_t msg_controllen
        int msg_flags
    struct mmsghdr:
        msghdr msg_hdr
        unsigned int msg_len
    struct sockaddr:
        pass
    int socket(int domain, int type, int protocol)
    int bind(int fd, const sockaddr *addr, socklen_t len)
    int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
    ssize_t send(int fd, const void *buf, size_t n, int flags)
    ssize_t recv(int fd, void *buf, size_t n, int flags)
    int recvmmsg(int fd, mmsghdr *vec, unsigned int vlen, int flags, timespec *timeout)
    enum:
        AF_NETLINK
        AF_INET
        AF_INET6
        AF_UNSPEC
        SOCK_RAW
        SOCK_CLOEXEC
        SOL_SOCKET
        SO_RCVBUF
        SO_RCVBUFFORCE
        SO_RCVTIMEO
        MSG_DONTWAIT
        MSG_WAITFORONE

cdef extern from "<linux/netlink.h>" nogil:
    struct sockaddr_nl:
        unsigned short nl_family
        unsigned short nl_pad
        uint32_t nl_pid
        uint32_t nl_groups
    struct nlmsghdr:
        uint32_t nlmsg_len
        uint16_t nlmsg_type
        uint16_t nlmsg_flags
        uint32_t nlmsg_seq
        uint32_t nlmsg_pid
    struct nlattr:
        uint16_t nla_len
        uint16_t nla_type
    enum:
        NETLINK_NETFILTER
        NLM_F_REQUEST
        NLM_F_ACK
        NLM_F_DUMP
        NLMSG_ERROR
        NLMSG_DONE
        NLMSG_NOOP
        SOL_NETLINK
        NETLINK_NO_ENOBUFS

cdef extern from "<poll.h>" nogil:
    struct pollfd:
        int fd
        short events
        short revents
    int poll(pollfd *fds, unsigned long nfds, int timeout)
    enum:
        POLLIN

cdef extern from "<unistd.h>" nogil:
    int close(int fd)
    ssize_t read(int fd, void *buf, size_t n)

cdef extern from "<arpa/inet.h>" nogil:
    uint32_t htonl(uint32_t)
    uint16_t htons(uint16_t)
    uint32_t ntohl(uint32_t)
    uint16_t ntohs(uint16_t)

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    int pthread_mutex_init(pthread_mutex_t *m, const void *attr)
    int pthread_mutex_destroy(pthread_mutex_t *m)
    int pthread_mutex_lock(pthread_mutex_t *m)
    int pthread_mutex_unlock(pthread_mutex_t *m)

# nfnetlink / nfnetlink_queue constants (uapi headers; fixed ABI).
cdef enum:
    NFNL_SUBSYS_QUEUE = 3
    NFQNL_MSG_PACKET = 0
    NFQNL_MSG_VERDICT = 1
    NFQNL_MSG_CONFIG = 2
    NFQNL_MSG_VERDICT_BATCH = 3
    NFQA_PACKET_HDR = 1
    NFQA_VERDICT_HDR = 2
    NFQA_MARK = 3
    NFQA_IFINDEX_INDEV = 5
    NFQA_PAYLOAD = 10
    NFQA_CAP_LEN = 13
    NFQA_CFG_CMD = 1
    NFQA_CFG_PARAMS = 2
    NFQA_CFG_QUEUE_MAXLEN = 3
    NFQA_CFG_MASK = 4
    NFQA_CFG_FLAGS = 5
    NFQNL_CFG_CMD_BIND = 1
    NFQNL_CFG_CMD_UNBIND = 2
    NFQNL_COPY_PACKET = 2
    NFQA_CFG_F_FAIL_OPEN = 1
    NFQA_CFG_F_GSO = 4
    NF_DROP = 0
    NF_ACCEPT = 1
    NF_REPEAT = 4               # back to the hook's first rule: with the reject mark, our REJECT rule
    NLA_TYPE_MASK = 0x3FFF
    NFQ_VERDICT_MSG_LEN = 32    # nlmsghdr 16 + nfgenmsg 4 + nlattr 4 + verdict hdr 8
    NFQ_MARK_VERDICT_MSG_LEN = 40  # the same and an NFQA_MARK attribute (4 + 4)
    NFQ_HIST_BUCKETS = 16       # batch processing time histogram: 1 us * 2^k upper bounds
    FINAL_MARKED_ACCEPT = 0x40  # (not a kernel verdict) NF_REPEAT with the accept mark
    FINAL_HTTP_PENDING = 0x41   # (not a kernel verdict) NF_REPEAT with the http mark: admitted provisionally
    FINAL_HTTP_DENY = 0x42      # (not a kernel verdict) NF_REPEAT with the http deny mark: its connection is cut
    HTTP_ERRORS_MAX = 16
    NFQ_EVENT_CAP = 8192        # judged-by-policy events kept for the Python side

cdef inline bint _allowed_by_rule(const pc_verdict *v) noexcept nogil:
    """Whether a rule (not a default, a passed tier or a profile) allowed the packet on a side."""
    return ((v.ingress.present and v.ingress.allow and v.ingress.reason == 0)
            or (v.egress.present and v.egress.allow and v.egress.reason == 0))


cdef inline size_t nla_align(size_t n) noexcept nogil:
    return (n + 3) & ~(<size_t>3)


cdef inline uint64_t now_ns(int clock) noexcept nogil:
    cdef timespec ts
    clock_gettime(clock, &ts)
    return <uint64_t>ts.tv_sec * 1000000000ULL + <uint64_t>ts.tv_nsec


# One packet as parsed from an NFQNL_MSG_PACKET message (pointers into the receive buffer).
cdef struct NfqPacket:
    uint32_t id
    uint16_t hw_protocol
    uint8_t has_hdr
    uint8_t has_payload
    const uint8_t *payload
    uint32_t caplen
    uint32_t wirelen
    uint32_t indev
    uint32_t mark  # the packet's mark as it was queued: a verdict that sets one adds to it


cdef int nfq_parse_packet(const uint8_t *msg, size_t len, NfqPacket *out) noexcept nogil:
    """Parse one netlink message (header included) of type PACKET into out. Returns 0 when it
    carried a packet header (so it can be given a verdict), -1 otherwise. Every read is bounded
    by len: malformed attributes end the parse, never read past the message."""
    cdef size_t off = sizeof(nlmsghdr) + 4  # nfgenmsg
    cdef const nlattr *a
    cdef size_t alen
    cdef uint16_t t
    memset(out, 0, sizeof(NfqPacket))
    while off + sizeof(nlattr) <= len:
        a = <const nlattr *>(msg + off)
        alen = a.nla_len
        if alen < sizeof(nlattr) or off + alen > len:
            break
        t = a.nla_type & NLA_TYPE_MASK
        if t == NFQA_PACKET_HDR and alen >= sizeof(nlattr) + 6:
            out.id = be32(msg + off + 4)
            out.hw_protocol = be16(msg + off + 8)
            out.has_hdr = 1
        elif t == NFQA_PAYLOAD:
            out.payload = msg + off + 4
            out.caplen = <uint32_t>(alen - 4)
            out.has_payload = 1
        elif t == NFQA_CAP_LEN and alen >= 8:
            out.wirelen = be32(msg + off + 4)
        elif t == NFQA_IFINDEX_INDEV and alen >= 8:
            out.indev = be32(msg + off + 4)
        elif t == NFQA_MARK and alen >= 8:
            out.mark = be32(msg + off + 4)
        off += nla_align(alen)
    if out.wirelen < out.caplen:
        out.wirelen = out.caplen
    return 0 if out.has_hdr else -1


cdef inline uint8_t *put_verdict(uint8_t *p, uint16_t queue, uint16_t kind, uint32_t verdict,
                                 uint32_t pid) noexcept nogil:
    cdef nlmsghdr *nh = <nlmsghdr *>p
    nh.nlmsg_len = NFQ_VERDICT_MSG_LEN
    nh.nlmsg_type = (NFNL_SUBSYS_QUEUE << 8) | kind
    nh.nlmsg_flags = NLM_F_REQUEST
    nh.nlmsg_seq = 0
    nh.nlmsg_pid = 0
    p[16] = AF_UNSPEC
    p[17] = 0
    (<uint16_t *>(p + 18))[0] = htons(queue)
    (<uint16_t *>(p + 20))[0] = 12
    (<uint16_t *>(p + 22))[0] = NFQA_VERDICT_HDR
    (<uint32_t *>(p + 24))[0] = htonl(verdict)
    (<uint32_t *>(p + 28))[0] = htonl(pid)
    return p + NFQ_VERDICT_MSG_LEN


cdef inline uint8_t *put_mark_verdict(uint8_t *p, uint16_t queue, uint32_t verdict, uint32_t pid,
                                      uint32_t mark) noexcept nogil:
    """One packet's verdict that also sets the packet's mark (NFQA_MARK)."""
    put_verdict(p, queue, NFQNL_MSG_VERDICT, verdict, pid)
    (<nlmsghdr *>p).nlmsg_len = NFQ_MARK_VERDICT_MSG_LEN
    (<uint16_t *>(p + 32))[0] = 8
    (<uint16_t *>(p + 34))[0] = NFQA_MARK
    (<uint32_t *>(p + 36))[0] = htonl(mark)
    return p + NFQ_MARK_VERDICT_MSG_LEN


def nfq_parse(data):
    """Parse a buffer of netlink messages as nfnetlink_queue delivers them (for tests and fuzzing):
    ``[(id, hw_protocol, payload_bytes_or_None, wirelen, indev), ...]`` for every PACKET message
    that carried a packet header. Malformed input ends the parse; it never reads out of bounds."""
    cdef const uint8_t[::1] buf = bytes(data)
    cdef size_t n = buf.shape[0]
    cdef size_t off = 0
    cdef const nlmsghdr *nh
    cdef NfqPacket pk
    out = []
    if n == 0:
        return out
    while off + sizeof(nlmsghdr) <= n:
        nh = <const nlmsghdr *>(&buf[0] + off)
        if nh.nlmsg_len < sizeof(nlmsghdr) or off + nh.nlmsg_len > n:
            break
        if nh.nlmsg_type == ((NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET) and nh.nlmsg_len >= sizeof(nlmsghdr) + 4:
            if nfq_parse_packet(&buf[0] + off, nh.nlmsg_len, &pk) == 0:
                payload = None
                if pk.has_payload:
                    payload = bytes((<const char *>pk.payload)[:pk.caplen])
                out.append((pk.id, pk.hw_protocol, payload, pk.wirelen, pk.indev))
        off += nla_align(nh.nlmsg_len)
    return out


#: How long a queue's bind or configuration waits for the kernel's answer (the kernel answers at
#: once), and an unbind, whose answer is lost when the socket's buffer is full of packets after
#: the loop stopped (NETLINK_NO_ENOBUFS set); closing the socket unbinds the queue anyway.
cdef enum:
    NL_ANSWER_TIMEOUT_MS = 5000
    NL_UNBIND_TIMEOUT_MS = 200


cdef int _nl_request(int fd, bytes msg, int timeout_ms=NL_ANSWER_TIMEOUT_MS) except -2:
    """Send one netlink request with NLM_F_ACK and wait, without the GIL and at most
    ``timeout_ms``, for its answer (the error message carrying its sequence number;
    the packets and verdict errors queued before it are skipped); returns 0 or raises OSError."""
    cdef const uint8_t[::1] m = msg
    cdef uint8_t buf[8192]
    cdef ssize_t got
    cdef const nlmsghdr *nh
    cdef int32_t err
    cdef size_t off
    cdef uint32_t seq = (<const nlmsghdr *>&m[0]).nlmsg_seq
    cdef pollfd pfd
    cdef int r, e
    cdef int64_t left
    cdef uint64_t deadline = now_ns(CLOCK_MONOTONIC) + <uint64_t>timeout_ms * 1000000ULL
    if send(fd, &m[0], m.shape[0], 0) < 0:
        raise OSError(errno, f"netlink send: {_os.strerror(errno)}")
    pfd.fd = fd
    pfd.events = POLLIN
    while True:
        left = <int64_t>(deadline - now_ns(CLOCK_MONOTONIC)) // 1000000
        if left <= 0:
            raise TimeoutError(ETIMEDOUT, f"netlink: no answer to request {seq} within {timeout_ms} ms")
        with nogil:
            r = poll(&pfd, 1, <int>left)
            e = errno
            got = recv(fd, buf, sizeof(buf), MSG_DONTWAIT) if r > 0 else -1
            if r > 0:
                e = errno
        if r < 0 and e != EINTR:
            raise OSError(e, f"netlink poll: {_os.strerror(e)}")
        if r <= 0:
            continue
        if got < 0:
            if e == EINTR or e == EAGAIN:
                continue
            raise OSError(e, f"netlink recv: {_os.strerror(e)}")
        off = 0
        while off + sizeof(nlmsghdr) <= <size_t>got:
            nh = <const nlmsghdr *>(buf + off)
            if nh.nlmsg_len < sizeof(nlmsghdr) or off + nh.nlmsg_len > <size_t>got:
                break
            if nh.nlmsg_type == NLMSG_ERROR and nh.nlmsg_seq == seq and nh.nlmsg_len >= sizeof(nlmsghdr) + 4:
                err = (<const int32_t *>(buf + off + sizeof(nlmsghdr)))[0]
                if err != 0:
                    raise OSError(-err, _os.strerror(-err))
                return 0
            off += nla_align(nh.nlmsg_len)


import os as _os
import struct as _struct


def _nlattr(int kind, bytes payload):
    cdef size_t n = 4 + len(payload)
    return _struct.pack("=HH", n, kind) + payload + b"\0" * (nla_align(n) - n)


def _nfq_config_msg(int queue, bytes attrs, int seq):
    body = _struct.pack("=BBH", AF_UNSPEC, 0, htons(queue)) + attrs
    return _struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_CONFIG,
                        NLM_F_REQUEST | NLM_F_ACK, seq, 0) + body


cdef int _netlink_socket(int rcvbuf) except -1:
    cdef int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER)
    cdef sockaddr_nl sa
    cdef int one = 1
    if fd < 0:
        raise OSError(errno, f"netlink socket: {_os.strerror(errno)}")
    memset(&sa, 0, sizeof(sa))
    sa.nl_family = AF_NETLINK
    if bind(fd, <sockaddr *>&sa, sizeof(sa)) < 0:
        e = errno
        close(fd)
        raise OSError(e, f"netlink bind: {_os.strerror(e)}")
    if rcvbuf > 0:
        if setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(int)) < 0:
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(int))
    return fd


_KEEP = object()  # NfQueue.swap: the forward hook's endpoint stays


cdef class NfQueue:
    """One NFQUEUE queue bound over raw netlink, judged by an ``EngineClient``.

    ``open()`` binds the queue (copy mode packet with ``copy_range`` bytes: headers only; queue
    length; fail-open and GSO flags). ``run()`` is the loop: it releases the GIL for good and
    returns after ``stop()``. Per wake-up it receives up to ``batch`` packets with one
    ``recvmmsg``, decodes them (raw IP) into the header batch, calls the engine once for the
    batch, and sends every verdict with one ``send``: NFQNL_MSG_VERDICT_BATCH per run of equal
    verdicts (``batch_verdicts``), else one NFQNL_MSG_VERDICT per packet; with ``reject_mark``, a
    packet policy denies is handed back to the hook (NF_REPEAT) with that packet mark, for the
    REJECT rules at the top of our chains to answer; with ``accept_mark``, a packet a rule allowed
    (not a default or a passed tier: the early host-endpoint hooks, where what no rule decides goes
    on) is handed back with that mark, for our chain's first rule to act on (NOTRACK; skip normal
    host policy). With ``http_mark``, a new TCP connection denied only for want of its HTTP
    request (``http`` rules) is handed back with that mark instead, admitted provisionally: our
    chain marks the connection, whose client-to-server packets then go to an HTTP loop. With
    ``http_deny_mark`` the loop is that HTTP loop: it judges each segment's requests
    (``EngineClient(http_connections=...)``) and lets it pass, or cuts its connection: a TCP reset
    to both ends (``TcpResetter``) and the packet handed back with that mark, for our chain to
    mark the connection denied and drop it. With ``dns``, the loop judges nothing: each packet is a DNS answer whose
    addresses are learned into the engine's domain facts before it is handed back with
    ``accept_mark`` (so a connection the client opens on the answer finds them). With
    ``repeat_accepted`` (a host endpoint's forward hook, ``EngineClient(via=...)``), every packet
    the loop lets on goes back with ``accept_mark``: the chain's later rules (the workload's own
    policy) still judge it. A mark a verdict sets is added to the packet's own (kube-proxy's and
    others' bits stay). A malformed packet is
    dropped when failing closed and accepted when failing open; an engine error gives the whole
    batch the fail-mode verdict. Nothing allocates a Python object per packet: ``stats`` counts,
    ``drain_events()`` hands the policy-judged packets over in bulk.
    """

    cdef int fd
    cdef readonly int queue
    cdef readonly bint fail_open
    cdef readonly bint batch_verdicts
    cdef readonly uint32_t reject_mark  # 0: a denied packet is dropped; else sent back with this mark
    cdef readonly uint32_t accept_mark  # 0: an allowed packet is accepted; else one a rule allowed is sent back with it
    cdef readonly bint dns  # a DNS-learning loop (see the class doc)
    cdef readonly uint32_t http_mark  # 0: a connection awaiting its HTTP request is denied; else admitted with it
    cdef readonly uint32_t http_deny_mark  # nonzero: an HTTP loop (see the class doc)
    cdef readonly bint repeat_accepted  # every packet let on goes back with accept_mark (see the class doc)
    cdef TcpResetter resetter
    cdef uint64_t c_http_provisional, c_http_allowed, c_http_denied, c_http_full, c_http_resets, c_http_held
    cdef uint64_t c_http_errors[HTTP_ERRORS_MAX]
    cdef uint64_t c_dns_answers, c_dns_learned
    cdef uint64_t c_dns_errors[16]
    cdef int copy_range
    cdef int maxlen
    cdef int nbatch
    cdef int bufsize
    cdef int rcvbuf
    cdef bint gso
    cdef EngineClient client
    cdef FragTable *ft
    cdef pthread_mutex_t engine_lock
    cdef pthread_mutex_t event_lock
    cdef volatile int stopping
    cdef volatile int running
    # receive
    cdef uint8_t *rx
    cdef iovec *iov
    cdef mmsghdr *mm
    # batch
    cdef NfqPacket *pk
    cdef PacketHeader *hdr
    cdef pc_quote *quo
    cdef pc_verdict *ver
    cdef uint8_t *final
    cdef uint8_t *tx
    cdef uint32_t last_done
    # counters
    cdef uint64_t c_received, c_accepted, c_dropped, c_malformed, c_errors, c_batches, c_lost
    cdef uint64_t c_verdict_msgs, c_send_errors, c_recv_errors, c_netlink_errors, c_event_drops
    cdef uint64_t c_policy, c_established, c_swaps, c_rejected
    cdef uint64_t hist[NFQ_HIST_BUCKETS + 1]
    cdef uint64_t hist_sum_ns
    # events (policy-judged packets) for metrics and logs
    cdef PacketHeader *ev_h
    cdef pc_verdict *ev_v
    cdef size_t ev_n

    def __cinit__(self, EngineClient client, int queue, bint fail_open=False, int copy_range=128,
                  int maxlen=4096, int batch=64, bint batch_verdicts=True, bint gso=True,
                  int rcvbuf=8 << 20, uint32_t reject_mark=0, uint32_t accept_mark=0, bint dns=False,
                  uint32_t http_mark=0, uint32_t http_deny_mark=0, bint repeat_accepted=False):
        if not 0 <= queue <= 65535:
            raise ValueError(f"queue number {queue} out of range 0-65535")
        if not 40 <= copy_range <= 65535:
            raise ValueError("copy_range must be between 40 and 65535 bytes")
        if not 1 <= batch <= 1024:
            raise ValueError("batch must be between 1 and 1024")
        if maxlen < 1:
            raise ValueError("maxlen must be positive")
        self.fd = -1
        self.client = client
        self.queue = queue
        self.fail_open = fail_open
        self.batch_verdicts = batch_verdicts
        self.reject_mark = reject_mark
        self.accept_mark = accept_mark
        self.dns = dns
        if dns and not accept_mark:
            raise ValueError("a DNS-learning loop hands answers back with accept_mark: give one")
        self.http_mark = http_mark
        self.http_deny_mark = http_deny_mark
        if repeat_accepted and not accept_mark:
            raise ValueError("repeat_accepted hands packets back with accept_mark: give one")
        self.repeat_accepted = repeat_accepted
        self.resetter = None
        self.copy_range = copy_range
        self.maxlen = maxlen
        self.nbatch = batch
        self.gso = gso
        self.rcvbuf = rcvbuf
        # a packet message: nlmsghdr + nfgenmsg + attributes (~100 bytes) + the copied bytes
        self.bufsize = copy_range + 512
        pthread_mutex_init(&self.engine_lock, NULL)
        pthread_mutex_init(&self.event_lock, NULL)
        self.ft = frag_table_new()
        self.rx = <uint8_t *>calloc(batch, self.bufsize)
        self.iov = <iovec *>calloc(batch, sizeof(iovec))
        self.mm = <mmsghdr *>calloc(batch, sizeof(mmsghdr))
        self.pk = <NfqPacket *>calloc(batch, sizeof(NfqPacket))
        self.hdr = <PacketHeader *>calloc(batch, sizeof(PacketHeader))
        self.quo = <pc_quote *>calloc(batch, sizeof(pc_quote))
        self.ver = <pc_verdict *>calloc(batch, sizeof(pc_verdict))
        self.final = <uint8_t *>calloc(batch, 1)
        self.tx = <uint8_t *>calloc(2 * batch + 2, NFQ_MARK_VERDICT_MSG_LEN)
        self.ev_h = <PacketHeader *>calloc(NFQ_EVENT_CAP, sizeof(PacketHeader))
        self.ev_v = <pc_verdict *>calloc(NFQ_EVENT_CAP, sizeof(pc_verdict))
        if (self.ft == NULL or self.rx == NULL or self.iov == NULL or self.mm == NULL or self.pk == NULL
                or self.hdr == NULL or self.quo == NULL or self.ver == NULL or self.final == NULL
                or self.tx == NULL or self.ev_h == NULL or self.ev_v == NULL):
            raise MemoryError()

    def __dealloc__(self):
        if self.fd >= 0:
            close(self.fd)
            self.fd = -1
        frag_table_free(self.ft)
        free(self.rx); free(self.iov); free(self.mm); free(self.pk); free(self.hdr); free(self.quo)
        free(self.ver); free(self.final); free(self.tx); free(self.ev_h); free(self.ev_v)
        pthread_mutex_destroy(&self.engine_lock)
        pthread_mutex_destroy(&self.event_lock)

    def open(self):
        """Open the netlink socket and bind the queue. OSError (EPERM without CAP_NET_ADMIN,
        EBUSY when another process holds the queue) is raised as the kernel reports it."""
        if self.fd >= 0:
            return
        if self.http_deny_mark and self.resetter is None:
            self.resetter = TcpResetter()  # raw sockets: CAP_NET_RAW
        cdef int one = 1
        cdef int fd = _netlink_socket(self.rcvbuf)
        try:
            # Lost messages are seen as gaps in the packet ids (and given the fail-mode verdict),
            # not as ENOBUFS errors.
            setsockopt(fd, SOL_NETLINK, NETLINK_NO_ENOBUFS, &one, sizeof(int))
            _nl_request(fd, _nfq_config_msg(self.queue, _nlattr(NFQA_CFG_CMD, _struct.pack("=BBH", NFQNL_CFG_CMD_BIND, 0, htons(AF_INET))), 1))
            flags = (NFQA_CFG_F_FAIL_OPEN if self.fail_open else 0) | (NFQA_CFG_F_GSO if self.gso else 0)
            attrs = (_nlattr(NFQA_CFG_PARAMS, _struct.pack(">IB", self.copy_range, NFQNL_COPY_PACKET))
                     + _nlattr(NFQA_CFG_QUEUE_MAXLEN, _struct.pack(">I", self.maxlen))
                     + _nlattr(NFQA_CFG_FLAGS, _struct.pack(">I", flags))
                     + _nlattr(NFQA_CFG_MASK, _struct.pack(">I", NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO)))
            _nl_request(fd, _nfq_config_msg(self.queue, attrs, 2))
        except BaseException:
            close(fd)
            raise
        self.fd = fd

    def close(self):
        """Unbind the queue and close the socket (the loop must have returned)."""
        if self.running:
            raise RuntimeError("stop the loop before closing the queue")
        if self.fd >= 0:
            try:
                _nl_request(self.fd, _nfq_config_msg(self.queue, _nlattr(NFQA_CFG_CMD, _struct.pack("=BBH", NFQNL_CFG_CMD_UNBIND, 0, 0)), 3),
                            NL_UNBIND_TIMEOUT_MS)
            except OSError:
                pass
            close(self.fd)
            self.fd = -1

    def stop(self):
        """Ask the loop to return (within its 100 ms poll timeout)."""
        self.stopping = 1

    def run(self):
        """The loop, without the GIL, until ``stop()``."""
        if self.fd < 0:
            raise RuntimeError("open() the queue first")
        self.stopping = 0
        self.running = 1
        try:
            with nogil:
                self._loop()
        finally:
            self.running = 0

    def swap(self, capsule, bint revalidate=True, via_endpoint=_KEEP):
        """Judge with a new engine from the next batch on; with ``revalidate``, re-judge the
        tracked connections against it and return ``(count, flows)`` of those now denied.
        ``via_endpoint`` (a forward-hook loop): the host endpoint's index in the new engine, or
        None when it has none. Done at a batch boundary (the loop holds the engine lock for a
        whole batch), so the caller may release the old engine as soon as this returns."""
        if via_endpoint is not _KEEP and not self.client.via:
            raise ValueError("via_endpoint is for a forward-hook loop")
        with nogil:
            pthread_mutex_lock(&self.engine_lock)
        try:
            self.client.swap(capsule)
            if via_endpoint is not _KEEP:
                self.client.via_endpoint = -1 if via_endpoint is None else via_endpoint
            self.c_swaps += 1
            if revalidate:
                return self.client.revalidate(capsule)
            return 0, []
        finally:
            pthread_mutex_unlock(&self.engine_lock)

    @property
    def tracked(self):
        """Connections in the engine's own tracker."""
        return self.client.tracked

    @property
    def stats(self):
        """Counters since open: received, accepted, dropped (rejected: those of them handed back to
        be rejected), malformed, errors, batches, lost
        (packets missed in the socket buffer, given the fail-mode verdict), policy/established
        (engine reasons), verdict_msgs, send_errors, recv_errors, netlink_errors, event_drops,
        swaps."""
        return {
            "received": self.c_received, "accepted": self.c_accepted, "dropped": self.c_dropped,
            "rejected": self.c_rejected,
            "dns_answers": self.c_dns_answers,
            "dns_learned": self.c_dns_learned,
            "malformed": self.c_malformed, "errors": self.c_errors, "batches": self.c_batches,
            "lost": self.c_lost, "policy": self.c_policy, "established": self.c_established,
            "verdict_msgs": self.c_verdict_msgs, "send_errors": self.c_send_errors,
            "recv_errors": self.c_recv_errors, "netlink_errors": self.c_netlink_errors,
            "event_drops": self.c_event_drops, "swaps": self.c_swaps,
            "http_provisional": self.c_http_provisional, "http_requests_allowed": self.c_http_allowed,
            "http_requests_denied": self.c_http_denied, "http_table_full": self.c_http_full,
            "http_resets": self.c_http_resets, "http_held": self.c_http_held,
        }

    def admit_http(self, NfQueue http_loop, uint32_t mark):
        """From now on, hand a new connection denied only for want of its HTTP request back with
        ``mark``, admitted provisionally, and have ``http_loop`` (an HTTP loop) follow it."""
        self.client.share_http(http_loop.client)
        self.http_mark = mark

    def http_errors(self):
        """Request streams an HTTP loop cut because they could not be judged, by
        ``HTTP_ERROR_NAMES`` index."""
        return [self.c_http_errors[i] for i in range(HTTP_ERRORS_MAX)]

    def dns_errors(self):
        """Malformed DNS answers a DNS-learning loop saw, by ``DNS_ERROR_NAMES`` index."""
        return [self.c_dns_errors[i + 1] for i in range(15)]

    def batch_histogram(self):
        """Per-batch processing time (decode + judge + verdict send): ``(upper_bounds_s,
        counts, sum_s)``; bucket k holds batches of at most 2^k microseconds, the last the rest."""
        bounds = [float(1 << k) * 1e-6 for k in range(NFQ_HIST_BUCKETS)]
        counts = [self.hist[k] for k in range(NFQ_HIST_BUCKETS + 1)]
        return bounds, counts, self.hist_sum_ns * 1e-9

    def drain_events(self):
        """The packets judged by policy since the last call (at most 8192 are kept; more are
        counted in ``event_drops``): ``(headers_bytes, verdicts_bytes, n)`` to view with
        ``HEADER_DTYPE`` / ``VERDICT_DTYPE``."""
        cdef size_t n
        with nogil:
            pthread_mutex_lock(&self.event_lock)
        try:
            n = self.ev_n
            h = bytes((<char *>self.ev_h)[:n * sizeof(PacketHeader)]) if n else b""
            v = bytes((<char *>self.ev_v)[:n * sizeof(pc_verdict)]) if n else b""
            self.ev_n = 0
        finally:
            pthread_mutex_unlock(&self.event_lock)
        return h, v, n

    cdef void _loop(self) noexcept nogil:
        cdef pollfd pfd
        cdef int got, i, r
        cdef size_t off, dlen
        cdef const nlmsghdr *nh
        cdef uint8_t *base
        cdef int npk
        cdef uint16_t ptype = (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET
        for i in range(self.nbatch):
            self.iov[i].iov_base = self.rx + <size_t>i * self.bufsize
            self.iov[i].iov_len = self.bufsize
            memset(&self.mm[i], 0, sizeof(mmsghdr))
            self.mm[i].msg_hdr.msg_iov = &self.iov[i]
            self.mm[i].msg_hdr.msg_iovlen = 1
        while not self.stopping:
            pfd.fd = self.fd
            pfd.events = POLLIN
            pfd.revents = 0
            r = poll(&pfd, 1, 100)
            if r <= 0:
                continue
            got = recvmmsg(self.fd, self.mm, self.nbatch, MSG_DONTWAIT, NULL)
            if got < 0:
                if errno != EINTR and errno != EAGAIN:
                    self.c_recv_errors += 1
                continue
            npk = 0
            for i in range(got):
                base = self.rx + <size_t>i * self.bufsize
                dlen = self.mm[i].msg_len
                off = 0
                while off + sizeof(nlmsghdr) <= dlen:
                    nh = <const nlmsghdr *>(base + off)
                    if nh.nlmsg_len < sizeof(nlmsghdr) or off + nh.nlmsg_len > dlen:
                        self.c_malformed += 1
                        break
                    if nh.nlmsg_type == ptype and nh.nlmsg_len >= sizeof(nlmsghdr) + 4:
                        if nfq_parse_packet(base + off, nh.nlmsg_len, &self.pk[npk]) == 0:
                            npk += 1
                            if npk == self.nbatch:
                                # more packets than slots (several per datagram): judge these first
                                self._process(npk)
                                npk = 0
                        else:
                            self.c_malformed += 1  # no packet header: nothing to give a verdict to
                    elif nh.nlmsg_type == NLMSG_ERROR:
                        if nh.nlmsg_len >= sizeof(nlmsghdr) + 4 and (<const int32_t *>(base + off + sizeof(nlmsghdr)))[0] != 0:
                            self.c_netlink_errors += 1
                    off += nla_align(nh.nlmsg_len)
            if npk:
                self._process(npk)

    cdef void _learn_dns(self, int n) noexcept nogil:
        """Learn each packet's DNS answer (raw IP: its TCP/UDP payload), then hand every one
        back with the accept mark; a malformed answer is counted and passes, teaching nothing."""
        cdef int i, got
        cdef size_t start, end
        cdef uint32_t seq
        cdef uint8_t err
        cdef uint64_t ts = now_ns(CLOCK_REALTIME)
        cdef NfqPacket *p
        for i in range(n):
            p = &self.pk[i]
            self.final[i] = FINAL_MARKED_ACCEPT
            if not (p.has_payload and p.caplen > 0):
                continue
            if not l4_payload(p.payload, p.caplen, LT_RAW, NULL, &start, &end, &seq) or end <= start:
                continue
            err = 0
            pthread_mutex_lock(&self.engine_lock)
            got = self.client.dns_learn_c(p.payload + start, end - start, ts, (p.payload[0] >> 4 == 4 and p.payload[9] == 6)
                                          or (p.payload[0] >> 4 == 6 and p.payload[6] == 6), &err)
            pthread_mutex_unlock(&self.engine_lock)
            self.c_dns_answers += 1
            if got > 0:
                self.c_dns_learned += got
            if 0 < err < 16:
                self.c_dns_errors[err] += 1
        self.c_accepted += n
        self.c_received += n
        self._send_verdicts(n, NF_ACCEPT)
        self.c_batches += 1

    cdef bint _follow_http(self, int i) noexcept nogil:
        """Have the HTTP loop follow the connection packet ``i`` (a SYN) opens, from the
        client's first byte; false if it cannot (the table is full): the connection is denied."""
        cdef NfqPacket *p = &self.pk[i]
        cdef size_t start, end
        cdef uint32_t seq = 0
        if not (self.hdr[i].tcp_flags & 0x02):
            return False  # only a SYN: a connection picked up mid-stream could carry unread bytes
        if not l4_payload(p.payload, p.caplen, LT_RAW, NULL, &start, &end, &seq):
            return False
        if self.client.http_watch_c(&self.hdr[i], seq + 1) == 1:
            return True
        self.c_http_full += 1
        return False

    cdef void _judge_http(self, int n) noexcept nogil:
        """Each packet is a client-to-server segment of a connection admitted provisionally:
        its requests are judged; one denied (or a stream that cannot be judged) cuts the
        connection: a reset to both ends, and the packet back to the hook with the deny mark."""
        cdef int i, rc
        cdef size_t start, end
        cdef uint32_t seq
        cdef uint64_t ts = now_ns(CLOCK_REALTIME)
        cdef uint8_t failv = NF_ACCEPT if self.fail_open else NF_DROP
        cdef NfqPacket *p
        cdef PacketHeader *h
        cdef int sent = 0  # verdicts of packets before this one already sent
        for i in range(n):
            p = &self.pk[i]
            h = &self.hdr[i]
            if not (p.has_payload and p.caplen > 0):
                self.c_malformed += 1
                self.final[i] = failv
                continue
            decode_one(p.payload, p.caplen, p.wirelen, LT_RAW, ts, p.indev, h, &self.quo[i], self.ft, NULL)
            if h.flags & PC_FLAG_MALFORMED or h.protocol != 6:
                self.c_malformed += 1
                self.final[i] = failv
                continue
            seq = 0
            if not l4_payload(p.payload, p.caplen, LT_RAW, NULL, &start, &end, &seq) or end < start:
                start = end = 0
            pthread_mutex_lock(&self.engine_lock)
            rc = self.client.http_judge_c(h, seq, p.payload + start, end - start, &self.ver[i])
            pthread_mutex_unlock(&self.engine_lock)
            if rc < 0:
                self.c_errors += 1
                self.final[i] = failv
                continue
            if self.ver[i].http == PC_HTTP_REQUEST:
                if self.ver[i].allow:
                    self.c_http_allowed += 1
                else:
                    self.c_http_denied += 1
                self.c_policy += 1
            elif self.ver[i].http == PC_HTTP_TABLE_FULL:
                self.c_http_full += 1
            elif self.ver[i].http >= PC_HTTP_ERROR and self.ver[i].http - PC_HTTP_ERROR < HTTP_ERRORS_MAX:
                self.c_http_errors[self.ver[i].http - PC_HTTP_ERROR] += 1
            if rc == 1:
                self.final[i] = NF_ACCEPT
                self.c_accepted += 1
            elif rc == 2:  # after a gap in what was read: dropped, the client resends it in order
                self.final[i] = NF_DROP
                self.c_http_held += 1
                self.c_dropped += 1
            else:
                # The packets before it go first (the handshake's last ACK may be among them:
                # reset before it, the server would drop the connection unseen), then the
                # resets, then this packet back to the hook, to be marked and dropped.
                if i > sent:
                    self._send_range(sent, i, failv)
                    sent = i
                self.c_http_resets += self.resetter.reset(p.payload, p.caplen)
                self.final[i] = FINAL_HTTP_DENY
                self.c_dropped += 1
        self.c_received += n
        self._send_range(sent, n, failv)
        self._record_events(n)
        self.c_batches += 1

    cdef void _process(self, int n) noexcept nogil:
        if self.dns:
            self._learn_dns(n)
            return
        if self.http_deny_mark:
            self._judge_http(n)
            return
        cdef uint64_t t0 = now_ns(CLOCK_MONOTONIC)
        cdef uint64_t ts = now_ns(CLOCK_REALTIME)
        cdef int i, rc
        cdef NfqPacket *p
        cdef PacketHeader *h
        cdef uint8_t failv = NF_ACCEPT if self.fail_open else NF_DROP
        cdef uint64_t dt
        cdef int k
        for i in range(n):
            p = &self.pk[i]
            if p.has_payload and p.caplen > 0:
                # what the kernel hands this hook is judged as it is: a tunnel's inner packet
                # comes through netfilter again, decapsulated, from the tunnel's device
                decode_one(p.payload, p.caplen, p.wirelen, LT_RAW, ts, p.indev, &self.hdr[i],
                           &self.quo[i], self.ft, NULL)
            else:
                memset(&self.hdr[i], 0, sizeof(PacketHeader))
                memset(&self.quo[i], 0, sizeof(pc_quote))
                self.hdr[i].flags = PC_FLAG_MALFORMED | PC_FLAG_TRUNCATED
                self.hdr[i].error_kind = PC_ERR_TRUNCATED_IP
        pthread_mutex_lock(&self.engine_lock)
        rc = self.client.judge_c(self.hdr, <const pc_quote *>self.quo, n, self.ver)
        pthread_mutex_unlock(&self.engine_lock)
        if rc != PC_CAPI_OK:
            self.c_errors += n
        for i in range(n):
            h = &self.hdr[i]
            if h.flags & PC_FLAG_MALFORMED:
                self.c_malformed += 1
                self.final[i] = failv
            elif rc != PC_CAPI_OK:
                self.final[i] = failv
            else:
                if (not self.ver[i].allow and self.http_mark and self.ver[i].http == PC_HTTP_AWAITS
                        and self._follow_http(i)):
                    self.final[i] = FINAL_HTTP_PENDING
                    self.ver[i].allow = 1  # admitted (provisionally), as the log says
                    self.c_http_provisional += 1
                elif not self.ver[i].allow:
                    self.final[i] = NF_REPEAT if self.reject_mark else NF_DROP
                elif self.accept_mark and (self.repeat_accepted or _allowed_by_rule(&self.ver[i])):
                    self.final[i] = FINAL_MARKED_ACCEPT
                else:
                    self.final[i] = NF_ACCEPT
                if self.ver[i].reason == 0:
                    self.c_policy += 1
                elif self.ver[i].reason == 1:
                    self.c_established += 1
            if (self.final[i] == NF_ACCEPT or self.final[i] == FINAL_MARKED_ACCEPT
                    or self.final[i] == FINAL_HTTP_PENDING):
                self.c_accepted += 1
            else:
                self.c_dropped += 1
                if self.final[i] == NF_REPEAT:
                    self.c_rejected += 1
        self.c_received += n
        self._send_verdicts(n, failv)
        if rc == PC_CAPI_OK:
            self._record_events(n)
        self.c_batches += 1
        dt = (now_ns(CLOCK_MONOTONIC) - t0) // 1000
        k = 0
        while k < NFQ_HIST_BUCKETS and dt > (1ULL << k):
            k += 1
        self.hist[k] += 1
        self.hist_sum_ns += now_ns(CLOCK_MONOTONIC) - t0

    cdef void _send_verdicts(self, int n, uint8_t failv) noexcept nogil:
        self._send_range(0, n, failv)

    cdef void _send_range(self, int first, int n, uint8_t failv) noexcept nogil:
        """The verdicts of packets ``first..n-1`` of the batch, in one send."""
        cdef uint8_t *w = self.tx
        cdef int i = first, j
        cdef uint32_t id
        cdef uint32_t expected
        cdef uint64_t msgs = 0
        while i < n:
            id = self.pk[i].id
            expected = self.last_done + 1
            if <int32_t>(id - expected) > 0:
                # ids expected..id-1 were never received (lost in the socket buffer, or queued
                # before we bound): give whatever of them is pending the fail-mode verdict.
                self.c_lost += id - expected
                w = put_verdict(w, <uint16_t>self.queue, NFQNL_MSG_VERDICT_BATCH, failv, id - 1)
                msgs += 1
            msgs += 1
            if self.final[i] == NF_REPEAT:
                # rejected: back to the hook with the reject mark, one packet at a time
                j = i
                w = put_mark_verdict(w, <uint16_t>self.queue, NF_REPEAT, id, self.pk[i].mark | self.reject_mark)
            elif self.final[i] == FINAL_MARKED_ACCEPT:
                j = i
                w = put_mark_verdict(w, <uint16_t>self.queue, NF_REPEAT, id, self.pk[i].mark | self.accept_mark)
            elif self.final[i] == FINAL_HTTP_PENDING:
                j = i
                w = put_mark_verdict(w, <uint16_t>self.queue, NF_REPEAT, id, self.pk[i].mark | self.http_mark)
            elif self.final[i] == FINAL_HTTP_DENY:
                j = i
                w = put_mark_verdict(w, <uint16_t>self.queue, NF_REPEAT, id, self.pk[i].mark | self.http_deny_mark)
            elif self.batch_verdicts:
                j = i
                while (j + 1 < n and self.final[j + 1] == self.final[i]
                       and self.pk[j + 1].id == self.pk[j].id + 1):
                    j += 1
                if j == i:
                    w = put_verdict(w, <uint16_t>self.queue, NFQNL_MSG_VERDICT, self.final[i], id)
                else:
                    w = put_verdict(w, <uint16_t>self.queue, NFQNL_MSG_VERDICT_BATCH, self.final[i],
                                    self.pk[j].id)
            else:
                j = i
                w = put_verdict(w, <uint16_t>self.queue, NFQNL_MSG_VERDICT, self.final[i], id)
            if <int32_t>(self.pk[j].id - self.last_done) > 0:
                self.last_done = self.pk[j].id
            i = j + 1
        self.c_verdict_msgs += msgs
        while send(self.fd, self.tx, <size_t>(w - self.tx), 0) < 0:
            if errno != EINTR:
                self.c_send_errors += 1
                break

    cdef void _record_events(self, int n) noexcept nogil:
        cdef int i
        pthread_mutex_lock(&self.event_lock)
        for i in range(n):
            if self.ver[i].reason != 0 or (self.hdr[i].flags & PC_FLAG_MALFORMED):
                continue
            if self.ev_n >= NFQ_EVENT_CAP:
                self.c_event_drops += 1
                continue
            memcpy(&self.ev_h[self.ev_n], &self.hdr[i], sizeof(PacketHeader))
            memcpy(&self.ev_v[self.ev_n], &self.ver[i], sizeof(pc_verdict))
            self.ev_n += 1
        pthread_mutex_unlock(&self.event_lock)
