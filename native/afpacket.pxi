# AF_PACKET inline bridge (bump-in-the-wire) between two interfaces, judged by the engine.
#
# Included by _native.pyx (after decode.pxi and engine_client.pxi). Two AF_PACKET SOCK_RAW
# sockets (ETH_P_ALL), one per interface, each with a TPACKET_V3 receive ring (blocks of frames,
# retired by the kernel when full or after `tov_ms`), PACKET_IGNORE_OUTGOING (our own transmits
# are not read back), promiscuous membership, and PACKET_VNET_HDR so that checksum-offload and
# GSO frames (veth hands them over unfinished) are forwarded with their offload metadata instead
# of with a half-computed checksum. One thread polls both rings and an eventfd (stop, swap); for
# each retired block it decodes the frames into the header batch, judges the IP ones through
# `EngineClient.judge_c` without the GIL (the client's own conntrack: no kernel conntrack on this
# path), sends the allowed frames unchanged to the other interface with one sendmmsg per chunk
# (iovecs point into the ring: no copy in userspace), and hands the block back to the kernel.
#
# What happens to each kind of frame (BridgeCounters says how many of each):
# - IPv4 / IPv6 (also behind up to 3 802.1Q/802.1ad tags in the frame): judged; allowed ->
#   forwarded, denied -> dropped. Malformed IP (decoder's PC_FLAG_MALFORMED) -> dropped.
# - ICMPv6 neighbour discovery (router/neighbour solicitation and advertisement, types 133-136)
#   -> forwarded without judging when `nd_bypass` (default): ND is 'untracked' in conntrack and is
#   L2 plumbing (the IPv6 analogue of ARP); Kubernetes policy is not meant to block it.
# - ARP (0x0806) -> forwarded without judging (L2 plumbing; no policy speaks about ARP).
# - Any other ethertype (LLDP, STP/802.3 length frames, MPLS, PPPoE, ...) -> dropped unless
#   `forward_other` (default off: a firewall does not let unknown encapsulations carry IP past it).
# - A frame whose VLAN tag the NIC stripped into metadata (TP_STATUS_VLAN_VALID) -> dropped and
#   counted (`vlan_stripped`): re-inserting the tag is not implemented; the bridge is for
#   untagged links (veth/NICs with rx-vlan offload off).
# - A frame larger than the ring can hold (snaplen < length) -> dropped (`truncated`).
# - An engine error on a batch -> the batch is dropped (fail closed) unless `fail_open`.

from libc.stdint cimport int32_t, int64_t
from libc.errno cimport errno, EINTR, EAGAIN
from libc.string cimport strerror

cdef extern from *:
    """
    #include <errno.h>
    #include <string.h>
    #include <unistd.h>
    #include <poll.h>
    #include <pthread.h>
    #include <time.h>
    #include <sys/socket.h>
    #include <sys/mman.h>
    #include <sys/eventfd.h>
    #include <net/if.h>
    #include <arpa/inet.h>
    #include <linux/if_packet.h>
    #include <linux/if_ether.h>
    #include <linux/virtio_net.h>

    #ifndef PACKET_IGNORE_OUTGOING
    #define PACKET_IGNORE_OUTGOING 23
    #endif

    typedef struct {
        int fd;
        int ifindex;
        uint8_t *map;
        size_t map_len;
        uint32_t block_size;
        uint32_t block_nr;
        uint32_t cur;
        int vnet;
    } pcbr_ring;

    static void pcbr_close(pcbr_ring *r) {
        if (r->map != NULL) {
            munmap(r->map, r->map_len);
            r->map = NULL;
        }
        if (r->fd >= 0) {
            close(r->fd);  /* also drops the promiscuous membership */
            r->fd = -1;
        }
    }

    /* Opens the ring on `ifname`. Returns 0, or -errno with *stage naming the failed step. */
    static int pcbr_open(pcbr_ring *r, const char *ifname, uint32_t block_size, uint32_t block_nr,
                         uint32_t tov_ms, int vnet, const char **stage) {
        int fd, v, err;
        unsigned idx;
        struct tpacket_req3 req;
        struct sockaddr_ll sll;
        struct packet_mreq mr;
        memset(r, 0, sizeof(*r));
        r->fd = -1;
        *stage = "if_nametoindex";
        idx = if_nametoindex(ifname);
        if (idx == 0)
            return -errno;
        *stage = "socket(AF_PACKET, SOCK_RAW)";
        fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);  /* protocol 0: nothing until bind */
        if (fd < 0)
            return -errno;
        r->fd = fd;
        r->ifindex = (int)idx;
        r->block_size = block_size;
        r->block_nr = block_nr;
        v = TPACKET_V3;
        *stage = "PACKET_VERSION TPACKET_V3";
        if (setsockopt(fd, SOL_PACKET, PACKET_VERSION, &v, sizeof v))
            goto fail;
        if (vnet) {
            v = 1;
            *stage = "PACKET_VNET_HDR";
            if (setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &v, sizeof v))
                goto fail;
            r->vnet = 1;
        }
        v = 1;
        *stage = "PACKET_IGNORE_OUTGOING";
        if (setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &v, sizeof v))
            goto fail;
        v = 4 << 20;
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof v);  /* best effort */
        memset(&req, 0, sizeof req);
        req.tp_block_size = block_size;
        req.tp_block_nr = block_nr;
        req.tp_frame_size = 2048;
        req.tp_frame_nr = (block_size / 2048) * block_nr;
        req.tp_retire_blk_tov = tov_ms;
        *stage = "PACKET_RX_RING (TPACKET_V3)";
        if (setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof req))
            goto fail;
        r->map_len = (size_t)block_size * block_nr;
        *stage = "mmap of the ring";
        r->map = (uint8_t *)mmap(NULL, r->map_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
        if (r->map == MAP_FAILED) {
            r->map = NULL;
            goto fail;
        }
        memset(&sll, 0, sizeof sll);
        sll.sll_family = AF_PACKET;
        sll.sll_protocol = htons(ETH_P_ALL);
        sll.sll_ifindex = (int)idx;
        *stage = "bind";
        if (bind(fd, (struct sockaddr *)&sll, sizeof sll))
            goto fail;
        memset(&mr, 0, sizeof mr);
        mr.mr_ifindex = (int)idx;
        mr.mr_type = PACKET_MR_PROMISC;
        *stage = "PACKET_ADD_MEMBERSHIP PACKET_MR_PROMISC";
        if (setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof mr))
            goto fail;
        return 0;
    fail:
        err = -errno;
        pcbr_close(r);
        return err;
    }

    static inline struct tpacket_block_desc *pcbr_block(const pcbr_ring *r, uint32_t i) {
        return (struct tpacket_block_desc *)(r->map + (size_t)i * r->block_size);
    }
    static inline int pcbr_block_ready(struct tpacket_block_desc *b) {
        return (__atomic_load_n(&b->hdr.bh1.block_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER) != 0;
    }
    static inline void pcbr_block_release(struct tpacket_block_desc *b) {
        __atomic_store_n(&b->hdr.bh1.block_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
    }
    static inline uint32_t pcbr_block_npkts(struct tpacket_block_desc *b) {
        return b->hdr.bh1.num_pkts;
    }
    static inline struct tpacket3_hdr *pcbr_block_first(struct tpacket_block_desc *b) {
        return (struct tpacket3_hdr *)((uint8_t *)b + b->hdr.bh1.offset_to_first_pkt);
    }
    static inline struct tpacket3_hdr *pcbr_frame_next(struct tpacket3_hdr *f) {
        return (struct tpacket3_hdr *)((uint8_t *)f + f->tp_next_offset);
    }
    static inline uint8_t *pcbr_frame_data(struct tpacket3_hdr *f) {
        return (uint8_t *)f + f->tp_mac;
    }
    static inline uint32_t pcbr_frame_snaplen(struct tpacket3_hdr *f) { return f->tp_snaplen; }
    static inline uint32_t pcbr_frame_len(struct tpacket3_hdr *f) { return f->tp_len; }
    static inline uint32_t pcbr_frame_status(struct tpacket3_hdr *f) { return f->tp_status; }
    static inline uint64_t pcbr_frame_ts(struct tpacket3_hdr *f) {
        return (uint64_t)f->tp_sec * 1000000000ull + f->tp_nsec;
    }
    /* The virtio_net_hdr the kernel wrote in front of the frame (PACKET_VNET_HDR). On transmit
     * only NEEDS_CSUM and GSO mean something; DATA_VALID is a receive-side hint: clear it. */
    static inline uint8_t *pcbr_frame_vnet(struct tpacket3_hdr *f) {
        struct virtio_net_hdr *v = (struct virtio_net_hdr *)((uint8_t *)f + f->tp_mac - sizeof(struct virtio_net_hdr));
        v->flags &= ~VIRTIO_NET_HDR_F_DATA_VALID;
        return (uint8_t *)v;
    }
    #define PCBR_VNET_LEN ((uint32_t)sizeof(struct virtio_net_hdr))
    #define PCBR_VLAN_VALID TP_STATUS_VLAN_VALID

    /* Sends the n messages of `msgs` on fd (all of them, resuming after partial sends);
     * returns how many could not be sent. */
    static size_t pcbr_send_all(int fd, struct mmsghdr *msgs, size_t n, uint64_t *tx_errno) {
        size_t done = 0;
        int rc;
        while (done < n) {
            rc = sendmmsg(fd, msgs + done, (unsigned)(n - done), 0);
            if (rc < 0) {
                if (errno == EINTR)
                    continue;
                if (errno == ENOBUFS || errno == EAGAIN) {  /* device busy: skip one, go on */
                    *tx_errno = (uint64_t)errno;
                    done += 1;
                    continue;
                }
                *tx_errno = (uint64_t)errno;
                return n - done;
            }
            done += (size_t)rc;
        }
        return 0;
    }

    static inline uint64_t pcbr_now_ns(clockid_t c) {
        struct timespec ts;
        clock_gettime(c, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    }

    #include <sys/resource.h>
    /* User and system CPU of the calling thread, ns. */
    static void pcbr_thread_cpu(uint64_t *user_ns, uint64_t *sys_ns) {
        struct rusage ru;
        if (getrusage(RUSAGE_THREAD, &ru) == 0) {
            *user_ns = (uint64_t)ru.ru_utime.tv_sec * 1000000000ull + (uint64_t)ru.ru_utime.tv_usec * 1000ull;
            *sys_ns = (uint64_t)ru.ru_stime.tv_sec * 1000000000ull + (uint64_t)ru.ru_stime.tv_usec * 1000ull;
        } else {
            *user_ns = *sys_ns = 0;
        }
    }

    /* Kernel ring statistics (reading resets them). */
    static int pcbr_stats(int fd, uint64_t *packets, uint64_t *drops, uint64_t *freezes) {
        struct tpacket_stats_v3 st;
        socklen_t len = sizeof st;
        if (fd < 0 || getsockopt(fd, SOL_PACKET, PACKET_STATISTICS, &st, &len))
            return -1;
        *packets += st.tp_packets;
        *drops += st.tp_drops;
        *freezes += st.tp_freeze_q_cnt;
        return 0;
    }
    """
    ctypedef struct pcbr_ring:
        int fd
        int ifindex
        uint8_t *map
        size_t map_len
        uint32_t block_size
        uint32_t block_nr
        uint32_t cur
        int vnet

    struct tpacket_block_desc:
        pass
    struct tpacket3_hdr:
        pass
    # Unique Cython names (C names in quotes): other .pxi files of this module declare the
    # same libc functions and structs.
    ctypedef struct br_iovec "struct iovec":
        void *iov_base
        size_t iov_len
    ctypedef struct br_msghdr "struct msghdr":
        void *msg_name
        unsigned int msg_namelen
        br_iovec *msg_iov
        size_t msg_iovlen
        void *msg_control
        size_t msg_controllen
        int msg_flags
    ctypedef struct br_mmsghdr "struct mmsghdr":
        br_msghdr msg_hdr
        unsigned int msg_len
    ctypedef struct br_pollfd "struct pollfd":
        int fd
        short events
        short revents
    ctypedef struct br_mutex_t "pthread_mutex_t":
        pass
    ctypedef struct br_cond_t "pthread_cond_t":
        pass
    ctypedef int br_clockid_t "clockid_t"
    ctypedef struct br_timespec "struct timespec":
        long tv_sec
        long tv_nsec

    enum:
        BR_POLLIN "POLLIN"
        BR_EFD_CLOEXEC "EFD_CLOEXEC"
        BR_EFD_NONBLOCK "EFD_NONBLOCK"
        BR_CLOCK_MONOTONIC "CLOCK_MONOTONIC"
        BR_CLOCK_REALTIME "CLOCK_REALTIME"
        BR_CLOCK_THREAD_CPUTIME_ID "CLOCK_THREAD_CPUTIME_ID"
        PCBR_VNET_LEN
        PCBR_VLAN_VALID

    int pcbr_open(pcbr_ring *r, const char *ifname, uint32_t block_size, uint32_t block_nr,
                  uint32_t tov_ms, int vnet, const char **stage) nogil
    void pcbr_close(pcbr_ring *r) nogil
    tpacket_block_desc *pcbr_block(const pcbr_ring *r, uint32_t i) nogil
    int pcbr_block_ready(tpacket_block_desc *b) nogil
    void pcbr_block_release(tpacket_block_desc *b) nogil
    uint32_t pcbr_block_npkts(tpacket_block_desc *b) nogil
    tpacket3_hdr *pcbr_block_first(tpacket_block_desc *b) nogil
    tpacket3_hdr *pcbr_frame_next(tpacket3_hdr *f) nogil
    uint8_t *pcbr_frame_data(tpacket3_hdr *f) nogil
    uint32_t pcbr_frame_snaplen(tpacket3_hdr *f) nogil
    uint32_t pcbr_frame_len(tpacket3_hdr *f) nogil
    uint32_t pcbr_frame_status(tpacket3_hdr *f) nogil
    uint64_t pcbr_frame_ts(tpacket3_hdr *f) nogil
    uint8_t *pcbr_frame_vnet(tpacket3_hdr *f) nogil
    size_t pcbr_send_all(int fd, br_mmsghdr *msgs, size_t n, uint64_t *tx_errno) nogil
    uint64_t pcbr_now_ns(br_clockid_t c) nogil
    int pcbr_stats(int fd, uint64_t *packets, uint64_t *drops, uint64_t *freezes) nogil
    void pcbr_thread_cpu(uint64_t *user_ns, uint64_t *sys_ns) nogil

    int br_poll "poll"(br_pollfd *fds, unsigned long nfds, int timeout) nogil
    int br_eventfd "eventfd"(unsigned int initval, int flags) nogil
    ssize_t br_read "read"(int fd, void *buf, size_t count) nogil
    ssize_t br_write "write"(int fd, const void *buf, size_t count) nogil
    int br_close "close"(int fd) nogil
    int br_mutex_init "pthread_mutex_init"(br_mutex_t *m, void *attr) nogil
    int br_mutex_destroy "pthread_mutex_destroy"(br_mutex_t *m) nogil
    int br_mutex_lock "pthread_mutex_lock"(br_mutex_t *m) nogil
    int br_mutex_unlock "pthread_mutex_unlock"(br_mutex_t *m) nogil
    int br_cond_init "pthread_cond_init"(br_cond_t *c, void *attr) nogil
    int br_cond_destroy "pthread_cond_destroy"(br_cond_t *c) nogil
    int br_cond_broadcast "pthread_cond_broadcast"(br_cond_t *c) nogil
    int br_cond_timedwait "pthread_cond_timedwait"(br_cond_t *c, br_mutex_t *m, const br_timespec *t) nogil
    int br_clock_gettime "clock_gettime"(br_clockid_t c, br_timespec *t) nogil

# What a frame of a chunk is to become.
cdef enum:
    ACT_DROP = 0
    ACT_FORWARD = 1
    ACT_JUDGE = 2

cdef enum:
    BR_SIDES = 2
    BR_MAX_BATCH = 8192
    BR_REVOKE_CAP = 4096


cdef struct BridgeCounters:
    uint64_t rx_frames[2]      # frames read from each interface (if1 = 0, if2 = 1)
    uint64_t rx_bytes[2]
    uint64_t tx_frames[2]      # frames forwarded out of each interface
    uint64_t tx_bytes[2]
    uint64_t judged            # IP frames given to the engine
    uint64_t allowed           # of those, allowed (policy or established)
    uint64_t denied            # of those, denied (policy, invalid, malformed per engine)
    uint64_t established       # allowed as part of a tracked connection, without policy
    uint64_t arp               # ARP frames forwarded
    uint64_t nd                # ICMPv6 neighbour discovery frames forwarded unjudged
    uint64_t other_forwarded   # other ethertypes forwarded (forward_other)
    uint64_t other_dropped     # other ethertypes dropped
    uint64_t malformed         # IP frames the decoder could not decode: dropped
    uint64_t decapsulated      # frames judged by the packet inside their tunnel (VXLAN, Geneve, IPIP, GRE)
    uint64_t tunnel_unread     # tunnel frames whose inner packet could not be read: dropped (in malformed too)
    uint64_t tunnel_not_ip     # tunnel frames carrying a frame that is not IP (ARP, ...): forwarded unjudged
    uint64_t truncated         # frames larger than a ring slot: dropped
    uint64_t vlan_stripped     # frames whose VLAN tag is in metadata only: dropped
    uint64_t tx_failed         # frames the kernel refused to send
    uint64_t tx_last_errno
    uint64_t engine_errors     # batches the engine failed on
    uint64_t blocks            # ring blocks processed
    uint64_t batches           # judge calls
    uint64_t judge_ns          # wall time inside the engine
    uint64_t loop_cpu_ns       # CPU time of the bridge thread while running
    uint64_t loop_user_ns      # ... of which in user space (rusage, 1 us resolution)
    uint64_t loop_sys_ns       # ... of which in the kernel (sendmmsg, poll, the receiving stack)
    uint64_t swaps             # engine swaps applied
    uint64_t revoked           # tracked connections removed by revalidation at a swap
    uint64_t expired           # tracked connections expired
    uint64_t kernel_packets    # PACKET_STATISTICS of both rings: packets seen
    uint64_t kernel_drops      # ... dropped because the ring was full
    uint64_t kernel_freezes
    uint64_t http_provisional  # connections admitted up to their request by http rules
    uint64_t http_allowed      # requests allowed
    uint64_t http_denied       # requests denied: the connection cut
    uint64_t http_errors       # streams that could not be judged: the connection cut
    uint64_t http_resets       # RST frames sent to cut connections (two per cut)
    uint64_t rejects_tcp       # reject: TCP resets sent back for denied segments
    uint64_t rejects_icmp      # reject: ICMP port unreachable sent back for other denied packets
    uint64_t rejects_limited   # reject: denied packets only dropped (over the rate, or none is due)




cdef inline uint16_t br_ethertype(const uint8_t *p, size_t n, size_t *l3off) noexcept nogil:
    """The frame's ethertype after up to 3 VLAN tags (0 if too short), and where L3 starts."""
    cdef size_t off = 14
    cdef uint16_t et
    cdef int tags = 0
    if n < 14:
        return 0
    et = be16(p + 12)
    while (et == 0x8100 or et == 0x88A8 or et == 0x9100) and tags < MAX_VLAN_TAGS:
        if n < off + 4:
            return 0
        et = be16(p + off + 2)
        off += 4
        tags += 1
    l3off[0] = off
    return et


cdef inline bint br_is_nd(const PacketHeader *h) noexcept nogil:
    return (h.ip_version == 6 and h.protocol == 58 and (h.flags & PC_FLAG_MALFORMED) == 0
            and h.icmp_type >= 133 and h.icmp_type <= 136)


cdef class AfPacketBridge:
    """The AF_PACKET bridge between two interfaces (see native/afpacket.pxi and
    pyclassify.bridge.Bridge, its Python face). Opens both rings on construction (in the
    calling thread's network namespace); ``run()`` blocks in the loop without the GIL until
    ``stop()``; ``swap(capsule)`` hands the loop a new engine at a batch boundary; ``close()``
    releases the rings."""

    cdef pcbr_ring rings[2]
    cdef int efd
    cdef EngineClient client
    cdef object _swap_lock
    cdef br_mutex_t lock
    cdef br_cond_t cond
    cdef pc_engine_ref *pending
    cdef uint64_t swap_requested
    cdef uint64_t swap_applied
    cdef int stop_flag
    cdef int is_running
    cdef int ran
    cdef bint judge_on
    cdef bint forward_other
    cdef bint nd_bypass
    cdef bint fail_open
    cdef size_t batch
    cdef BridgeCounters c
    # The tracker's size and counters as the loop last saw them (at its start, once a second,
    # at its end): read by ``counters`` from other threads while the loop runs, so no thread
    # but the loop's touches the tracker then.
    cdef uint64_t ct_snap[CT_STATS_MAX]
    cdef size_t ct_snap_n
    cdef uint64_t ct_snap_tracked
    cdef PacketHeader *headers
    cdef pc_quote *quotes
    cdef pc_verdict *verdicts
    cdef tpacket3_hdr **frames
    cdef uint8_t *actions
    cdef int32_t *slot
    cdef br_mmsghdr *msgs
    cdef br_iovec *iovs
    cdef FragTable *ft
    cdef Tunnels tunnel_ports
    cdef Tunnels *tp  # NULL: frames judged by their outer header
    cdef pc_revoked_flow *revoked_buf
    # http rules, read in line: each judged frame's TCP payload and where its IP header starts
    cdef const uint8_t **payloads
    cdef uint32_t *plens
    cdef uint32_t *pseqs
    cdef size_t *l3offs
    cdef size_t *cuts  # frames of the chunk whose connection http rules cut (RSTs after the chunk's frames)
    cdef size_t *rejects  # frames of the chunk denied by policy, answered with reject (after its frames)
    cdef bint reject
    cdef uint32_t reject_rate  # rejects sent per second at most
    cdef uint64_t reject_window  # the second (monotonic) the count is of
    cdef uint32_t reject_count
    cdef readonly str if1
    cdef readonly str if2

    def __cinit__(self, str if1, str if2, capsule, *, uint32_t block_size=1 << 18, uint32_t block_nr=16,
                  uint32_t tov_ms=2, size_t batch=1024, bint vnet_hdr=True, bint judge=True,
                  bint forward_other=False, bint nd_bypass=True, bint fail_open=False,
                  bint conntrack=True, size_t max_entries=262144, bint tcp_loose=True,
                  bint pod_allow=True, bint host_allow=False, size_t http_connections=0, bint reject=False,
                  uint32_t reject_rate=10000, vxlan_ports=DEFAULT_VXLAN_PORTS,
                  geneve_ports=DEFAULT_GENEVE_PORTS, bint decapsulate=True):
        cdef int i, rc
        cdef const char *stage = NULL
        cdef bytes name
        self.efd = -1
        for i in range(BR_SIDES):
            memset(&self.rings[i], 0, sizeof(pcbr_ring))
            self.rings[i].fd = -1
        br_mutex_init(&self.lock, NULL)
        br_cond_init(&self.cond, NULL)
        if if1 == if2:
            raise ValueError(f"a bridge needs two different interfaces, got {if1!r} twice")
        for n in (if1, if2):
            if not n or len(n.encode()) >= 16 or "/" in n or "\0" in n:
                raise ValueError(f"invalid interface name {n!r}")
        if block_size < 4096 or block_size % 4096 or block_size & (block_size - 1):
            raise ValueError("block_size must be a power of two, at least 4096 bytes")
        if block_nr < 2 or block_nr > 4096:
            raise ValueError("block_nr must be between 2 and 4096")
        if tov_ms < 1 or tov_ms > 1000:
            raise ValueError("tov_ms must be between 1 and 1000")
        if batch < 1 or batch > BR_MAX_BATCH:
            raise ValueError(f"batch must be between 1 and {BR_MAX_BATCH}")
        # frames on the wire between nodes carry the pods' packets inside overlay tunnels:
        # judged by those, as replay judges them
        tunnels_set(&self.tunnel_ports, vxlan_ports, geneve_ports)
        self.tp = &self.tunnel_ports if decapsulate else NULL
        self.if1 = if1
        self.if2 = if2
        # http rules need the bridge's own tracker: a connection awaiting its request is
        # admitted provisionally there, and its requests read from the frames that carry them
        self.client = EngineClient(capsule, conntrack=conntrack, max_entries=max_entries,
                                   tcp_loose=tcp_loose, pod_allow=pod_allow, host_allow=host_allow,
                                   http_connections=http_connections if conntrack else 0)
        self._swap_lock = __import__("threading").Lock()
        self.judge_on = judge
        self.forward_other = forward_other
        self.nd_bypass = nd_bypass
        self.fail_open = fail_open
        self.batch = batch
        self.headers = <PacketHeader *>calloc(batch, sizeof(PacketHeader))
        self.quotes = <pc_quote *>calloc(batch, sizeof(pc_quote))
        self.verdicts = <pc_verdict *>calloc(batch, sizeof(pc_verdict))
        self.frames = <tpacket3_hdr **>calloc(batch, sizeof(tpacket3_hdr *))
        self.actions = <uint8_t *>calloc(batch, 1)
        self.slot = <int32_t *>calloc(batch, sizeof(int32_t))
        self.msgs = <br_mmsghdr *>calloc(batch, sizeof(br_mmsghdr))
        self.iovs = <br_iovec *>calloc(batch, sizeof(br_iovec))
        self.revoked_buf = <pc_revoked_flow *>calloc(BR_REVOKE_CAP, sizeof(pc_revoked_flow))
        self.payloads = <const uint8_t **>calloc(batch, sizeof(uint8_t *))
        self.plens = <uint32_t *>calloc(batch, sizeof(uint32_t))
        self.pseqs = <uint32_t *>calloc(batch, sizeof(uint32_t))
        self.l3offs = <size_t *>calloc(batch, sizeof(size_t))
        self.cuts = <size_t *>calloc(batch, sizeof(size_t))
        self.rejects = <size_t *>calloc(batch, sizeof(size_t))
        self.reject = reject
        self.reject_rate = reject_rate
        self.ft = frag_table_new()
        if (self.headers == NULL or self.quotes == NULL or self.verdicts == NULL or self.frames == NULL
                or self.actions == NULL or self.slot == NULL or self.msgs == NULL or self.iovs == NULL
                or self.revoked_buf == NULL or self.ft == NULL or self.payloads == NULL or self.plens == NULL
                or self.pseqs == NULL or self.l3offs == NULL or self.cuts == NULL
                or self.rejects == NULL):
            raise MemoryError()
        self.efd = br_eventfd(0, BR_EFD_CLOEXEC | BR_EFD_NONBLOCK)
        if self.efd < 0:
            raise OSError(errno, f"eventfd: {strerror(errno).decode()}")
        for i, n in enumerate((if1, if2)):
            name = n.encode()
            rc = pcbr_open(&self.rings[i], name, block_size, block_nr, tov_ms, vnet_hdr, &stage)
            if rc < 0:
                msg = f"AF_PACKET ring on {n!r}: {stage.decode()}: {strerror(-rc).decode()}"
                self._close_rings()
                raise OSError(-rc, msg)

    def __dealloc__(self):
        self._close_rings()
        if self.efd >= 0:
            br_close(self.efd)
            self.efd = -1
        free(self.headers)
        free(self.quotes)
        free(self.verdicts)
        free(self.frames)
        free(self.actions)
        free(self.slot)
        free(self.msgs)
        free(self.iovs)
        free(self.revoked_buf)
        free(self.payloads)
        free(self.plens)
        free(self.pseqs)
        free(self.l3offs)
        free(self.cuts)
        free(self.rejects)
        frag_table_free(self.ft)
        br_cond_destroy(&self.cond)
        br_mutex_destroy(&self.lock)

    cdef void _close_rings(self) noexcept:
        cdef int i
        for i in range(BR_SIDES):
            if self.rings[i].fd >= 0:
                pcbr_stats(self.rings[i].fd, &self.c.kernel_packets, &self.c.kernel_drops,
                           &self.c.kernel_freezes)
            pcbr_close(&self.rings[i])

    def close(self):
        """Release both rings and sockets (the loop must not be running)."""
        br_mutex_lock(&self.lock)
        busy = self.is_running
        br_mutex_unlock(&self.lock)
        if busy:
            raise RuntimeError("the bridge is running: stop() it first")
        self._close_rings()

    @property
    def closed(self):
        return self.rings[0].fd < 0

    def _wake(self):
        cdef uint64_t one = 1
        br_write(self.efd, &one, 8)

    def stop(self):
        """Ask the loop to return (from any thread); returns at once."""
        br_mutex_lock(&self.lock)
        self.stop_flag = 1
        br_mutex_unlock(&self.lock)
        self._wake()

    @property
    def running(self):
        return bool(self.is_running)

    def run(self):
        """The loop: blocks (without the GIL) until ``stop()``. Runs once per bridge."""
        cdef int rc = 0
        if self.rings[0].fd < 0:
            raise RuntimeError("the bridge is closed")
        br_mutex_lock(&self.lock)
        if self.is_running or self.ran:
            br_mutex_unlock(&self.lock)
            raise RuntimeError("the bridge loop runs once")
        self.is_running = 1
        self.ran = 1
        br_mutex_unlock(&self.lock)
        with nogil:
            rc = self._loop()
            br_mutex_lock(&self.lock)
            self.is_running = 0
            br_cond_broadcast(&self.cond)
            br_mutex_unlock(&self.lock)
        if rc != 0:
            raise OSError(rc, f"bridge loop: poll: {strerror(rc).decode()}")

    cdef int _loop(self) noexcept nogil:
        cdef br_pollfd fds[3]
        cdef int i, rc, side
        cdef uint64_t buf
        cdef uint64_t cpu0 = pcbr_now_ns(BR_CLOCK_THREAD_CPUTIME_ID)
        cdef uint64_t user0 = 0, sys0 = 0, user1 = 0, sys1 = 0
        cdef uint64_t last_expire = pcbr_now_ns(BR_CLOCK_MONOTONIC)
        cdef uint64_t now
        cdef tpacket_block_desc *b
        cdef int result = 0
        pcbr_thread_cpu(&user0, &sys0)
        for i in range(BR_SIDES):
            fds[i].fd = self.rings[i].fd
            fds[i].events = BR_POLLIN
        fds[2].fd = self.efd
        fds[2].events = BR_POLLIN
        self._snapshot_ct()
        while True:
            # Batch boundary: stop, or take a pending engine.
            br_mutex_lock(&self.lock)
            if self.stop_flag:
                br_mutex_unlock(&self.lock)
                break
            if self.pending != NULL:
                self._apply_pending()
            br_mutex_unlock(&self.lock)
            for side in range(BR_SIDES):
                b = pcbr_block(&self.rings[side], self.rings[side].cur)
                while pcbr_block_ready(b):
                    self._block(side, b)
                    pcbr_block_release(b)
                    self.rings[side].cur = (self.rings[side].cur + 1) % self.rings[side].block_nr
                    b = pcbr_block(&self.rings[side], self.rings[side].cur)
            now = pcbr_now_ns(BR_CLOCK_MONOTONIC)
            if now - last_expire > 1000000000ull and self.client.ct != NULL:
                last_expire = now
                self.c.expired += self.client.ref.api.ct_expire(self.client.ct,
                                                               pcbr_now_ns(BR_CLOCK_REALTIME), 65536)
                self._snapshot_ct()
            # Sleep only when no block is waiting on either ring.
            if (pcbr_block_ready(pcbr_block(&self.rings[0], self.rings[0].cur))
                    or pcbr_block_ready(pcbr_block(&self.rings[1], self.rings[1].cur))):
                continue
            rc = br_poll(fds, 3, 200)
            if rc < 0 and errno != EINTR:
                result = errno
                break
            if rc > 0 and fds[2].revents:
                br_read(self.efd, &buf, 8)
        self.c.loop_cpu_ns += pcbr_now_ns(BR_CLOCK_THREAD_CPUTIME_ID) - cpu0
        pcbr_thread_cpu(&user1, &sys1)
        self.c.loop_user_ns += user1 - user0
        self.c.loop_sys_ns += sys1 - sys0
        self._snapshot_ct()
        return result

    cdef void _snapshot_ct(self) noexcept nogil:
        if self.client.ct != NULL:
            self.ct_snap_tracked = self.client.ref.api.ct_len(self.client.ct)
            self.ct_snap_n = self.client.ref.api.ct_stats(self.client.ct, self.ct_snap, CT_STATS_MAX)

    cdef void _apply_pending(self) noexcept nogil:
        """Under self.lock, in the loop thread (or with the loop stopped): revalidate the tracked
        connections against the pending engine, then make it the client's engine."""
        cdef ssize_t got = 0
        if self.client.ct != NULL:
            got = self.pending.api.ct_revalidate(self.client.ct, self.pending.engine,
                                                 self.client.pod_allow, self.client.host_allow,
                                                 pcbr_now_ns(BR_CLOCK_REALTIME), self.revoked_buf,
                                                 BR_REVOKE_CAP)
            if got > 0:
                self.c.revoked += <uint64_t>got
        self.client.ref = self.pending
        self.pending = NULL
        self.swap_applied = self.swap_requested
        self.c.swaps += 1
        br_cond_broadcast(&self.cond)

    cdef void _block(self, int side, tpacket_block_desc *b) noexcept nogil:
        cdef uint32_t n = pcbr_block_npkts(b)
        cdef uint32_t i, k = 0
        cdef tpacket3_hdr *f = pcbr_block_first(b)
        self.c.blocks += 1
        for i in range(n):
            self.frames[k] = f
            k += 1
            if k == self.batch:
                self._chunk(side, k)
                k = 0
            if i + 1 < n:
                f = pcbr_frame_next(f)
        if k:
            self._chunk(side, k)

    cdef void _chunk(self, int side, size_t n) noexcept nogil:
        cdef size_t i, nj = 0, nf = 0, failed, ncut = 0, nrej = 0
        cdef tpacket3_hdr *f
        cdef const uint8_t *p
        cdef uint32_t caplen, wirelen
        cdef uint16_t et
        cdef size_t l3off = 0
        cdef PacketHeader *h
        cdef int out = 1 - side
        cdef int rc
        cdef uint64_t t0
        cdef uint32_t vlen = PCBR_VNET_LEN if self.rings[out].vnet else 0
        # 1. Classify each frame: drop, forward, or judge (decoded into the batch).
        for i in range(n):
            f = self.frames[i]
            p = pcbr_frame_data(f)
            caplen = pcbr_frame_snaplen(f)
            wirelen = pcbr_frame_len(f)
            self.c.rx_frames[side] += 1
            self.c.rx_bytes[side] += wirelen
            self.actions[i] = ACT_DROP
            if caplen < wirelen:
                self.c.truncated += 1
                continue
            if pcbr_frame_status(f) & PCBR_VLAN_VALID:
                self.c.vlan_stripped += 1
                continue
            if not self.judge_on:
                self.actions[i] = ACT_FORWARD
                continue
            et = br_ethertype(p, caplen, &l3off)
            if et == 0x0800 or et == 0x86DD:
                h = &self.headers[nj]
                decode_one(p, caplen, wirelen, LT_ETHERNET, pcbr_frame_ts(f),
                           <uint32_t>self.rings[side].ifindex, h, &self.quotes[nj], self.ft, self.tp)
                if h.flags & PC_FLAG_MALFORMED and h.encap and h.error_kind == PC_ERR_UNKNOWN_ETHERTYPE:
                    # ARP of a VXLAN device that learns its neighbours, ...: as ARP outside
                    self.c.tunnel_not_ip += 1
                    self.actions[i] = ACT_FORWARD
                elif h.flags & PC_FLAG_MALFORMED:
                    self.c.malformed += 1
                    if h.encap:
                        self.c.tunnel_unread += 1
                elif self.nd_bypass and br_is_nd(h):
                    self.c.nd += 1
                    self.actions[i] = ACT_FORWARD
                else:
                    if h.encap:
                        self.c.decapsulated += 1
                    self.actions[i] = ACT_JUDGE
                    self.slot[i] = <int32_t>nj
                    self.l3offs[nj] = l3off
                    if self.client.http != NULL:
                        self._payload_of(nj, p, caplen)
                    nj += 1
            elif et == 0x0806:
                self.c.arp += 1
                self.actions[i] = ACT_FORWARD
            elif et == 0:
                self.c.malformed += 1
            elif self.forward_other:
                self.c.other_forwarded += 1
                self.actions[i] = ACT_FORWARD
            else:
                self.c.other_dropped += 1
        # 2. Judge the IP frames in one call, without the GIL.
        if nj:
            t0 = pcbr_now_ns(BR_CLOCK_MONOTONIC)
            if self.client.http != NULL:
                rc = self.client.judge_http_c(self.headers, <const pc_quote *>self.quotes, self.payloads,
                                              self.plens, self.pseqs, nj, self.verdicts)
            else:
                rc = self.client.judge_c(self.headers, <const pc_quote *>self.quotes, nj, self.verdicts)
            self.c.judge_ns += pcbr_now_ns(BR_CLOCK_MONOTONIC) - t0
            self.c.batches += 1
            self.c.judged += nj
            if rc != PC_CAPI_OK:
                self.c.engine_errors += 1
                for i in range(nj):
                    self.verdicts[i].allow = 1 if self.fail_open else 0
                    self.verdicts[i].reason = 0
        # 3. Forward, in arrival order, what may pass (a connection http rules cut: two RSTs).
        for i in range(n):
            if self.actions[i] == ACT_JUDGE:
                if self.client.http != NULL and rc == PC_CAPI_OK and self._count_http(i):
                    self.cuts[ncut] = i
                    ncut += 1
                elif self.reject and rc == PC_CAPI_OK and not self.verdicts[self.slot[i]].allow \
                        and self.verdicts[self.slot[i]].reason == 0:  # by policy (invalid ones are dropped)
                    self.rejects[nrej] = i
                    nrej += 1
                if self.verdicts[self.slot[i]].allow:
                    self.c.allowed += 1
                    if self.verdicts[self.slot[i]].reason == 1:
                        self.c.established += 1
                else:
                    self.c.denied += 1
                    continue
            elif self.actions[i] != ACT_FORWARD:
                continue
            f = self.frames[i]
            if vlen:
                self.iovs[nf].iov_base = pcbr_frame_vnet(f)
            else:
                self.iovs[nf].iov_base = pcbr_frame_data(f)
            self.iovs[nf].iov_len = pcbr_frame_snaplen(f) + vlen
            memset(&self.msgs[nf], 0, sizeof(br_mmsghdr))
            self.msgs[nf].msg_hdr.msg_iov = &self.iovs[nf]
            self.msgs[nf].msg_hdr.msg_iovlen = 1
            self.c.tx_bytes[out] += pcbr_frame_len(f)
            nf += 1
        if nf:
            failed = pcbr_send_all(self.rings[out].fd, self.msgs, nf, &self.c.tx_last_errno)
            self.c.tx_frames[out] += nf - failed
            self.c.tx_failed += failed
        # After the frames before them (the handshake's last ACK may be among them: reset before
        # it, the server would drop the half-open connection unseen).
        for i in range(ncut):
            self._reset(side, self.cuts[i])
        for i in range(nrej):
            self._reject(side, self.rejects[i])

    cdef void _payload_of(self, size_t k, const uint8_t *p, uint32_t caplen) noexcept nogil:
        """Judged frame ``k``'s TCP payload and its first byte's sequence number (for a SYN,
        none and its own: the client's first byte follows it)."""
        cdef size_t start = 0, end = 0
        cdef uint32_t seq = 0
        self.payloads[k] = NULL
        self.plens[k] = 0
        self.pseqs[k] = 0
        if self.headers[k].protocol != 6 or not l4_payload(p, caplen, LT_ETHERNET, self.tp, &start, &end, &seq):
            return
        self.pseqs[k] = seq
        if end > start:
            self.payloads[k] = p + start
            self.plens[k] = <uint32_t>(end - start)

    cdef bint _count_http(self, size_t i) noexcept nogil:
        """Counts what http rules made of judged frame ``i``; whether it cuts its connection (a
        request denied, a stream that cannot be judged): the frame is dropped, and an RST goes
        to each end (``_reset``)."""
        cdef pc_verdict *v = &self.verdicts[self.slot[i]]
        if v.http == PC_HTTP_AWAITS and v.allow and v.reason == 0:
            self.c.http_provisional += 1
        elif v.http == PC_HTTP_REQUEST:
            if v.allow:
                self.c.http_allowed += 1
            else:
                self.c.http_denied += 1
                return True
        elif v.http >= PC_HTTP_ERROR and not v.allow:
            self.c.http_errors += 1
            return True
        return False

    cdef void _reset(self, int side, size_t i) noexcept nogil:
        """Sends the two RSTs of frame ``i`` (a client -> server segment that arrived on
        ``side``): to the server out of the other interface, as from the client, with the frame's
        own link header; to the client back out of ``side``, its MAC addresses swapped. None for a
        tunnel's frame: its ends are beyond the tunnel, and the RSTs would have to be tunnelled
        as its endpoints tunnel them; the frame is only dropped."""
        cdef tpacket3_hdr *f = self.frames[i]
        cdef const uint8_t *p = pcbr_frame_data(f)
        cdef uint32_t caplen = pcbr_frame_snaplen(f)
        cdef size_t l3 = self.l3offs[self.slot[i]]
        cdef pctr_segments seg
        cdef int k, n
        if l3 < 12 or l3 > 64 or caplen <= l3 or self.headers[self.slot[i]].encap:
            return
        n = pctr_craft(p + l3, caplen - l3, &seg)
        for k in range(n):
            if self._emit(1 - side if k == 0 else side, p, l3, k == 1, pctr_buf(&seg, k), seg.len[k]):
                self.c.http_resets += 1

    cdef void _reject(self, int side, size_t i) noexcept nogil:
        """Answers frame ``i`` (denied by policy, arrived on ``side``) as a REJECT rule would, back
        out of ``side``: a TCP segment with an RST (none for an RST), anything else with an ICMP
        port unreachable; at most ``reject_rate`` a second, the rest only dropped. A tunnel's
        frame is only dropped (the answer would have to be tunnelled to reach its sender)."""
        cdef tpacket3_hdr *f = self.frames[i]
        cdef const uint8_t *p = pcbr_frame_data(f)
        cdef uint32_t caplen = pcbr_frame_snaplen(f)
        cdef PacketHeader *h = &self.headers[self.slot[i]]
        cdef size_t l3 = self.l3offs[self.slot[i]]
        cdef pctr_segments seg
        cdef uint8_t icmp[PCTR_UNREACH_MAX]
        cdef size_t n = 0
        cdef uint64_t second = pcbr_now_ns(BR_CLOCK_MONOTONIC) // 1000000000
        if second != self.reject_window:
            self.reject_window = second
            self.reject_count = 0
        if l3 < 12 or l3 > 64 or caplen <= l3 or self.reject_count >= self.reject_rate or h.encap:
            self.c.rejects_limited += 1
            return
        if h.protocol == 6:
            if h.tcp_flags & 0x04 or pctr_craft(p + l3, caplen - l3, &seg) != 2:
                self.c.rejects_limited += 1
                return
            if self._emit(side, p, l3, True, pctr_buf(&seg, 1), seg.len[1]):
                self.c.rejects_tcp += 1
                self.reject_count += 1
            return
        n = pctr_unreachable(p + l3, caplen - l3, icmp, PCTR_UNREACH_MAX)
        if n == 0:
            self.c.rejects_limited += 1
        elif self._emit(side, p, l3, True, icmp, n):
            self.c.rejects_icmp += 1
            self.reject_count += 1

    cdef bint _emit(self, int ring, const uint8_t *frame, size_t l3, bint swap, const uint8_t *pkt,
                    size_t n) noexcept nogil:
        """Sends the IP packet ``pkt[0..n)`` out of ``ring`` behind the link header of
        ``frame`` (its first ``l3`` bytes; ``swap``: its MAC addresses swapped, to answer the
        sender) and, on a ring with PACKET_VNET_HDR, a virtio-net header without offloads."""
        cdef uint8_t buf[12 + 64 + PCTR_UNREACH_MAX]
        cdef br_iovec iov
        cdef br_mmsghdr msg
        cdef size_t vlen = PCBR_VNET_LEN if self.rings[ring].vnet else 0
        if vlen > 12 or l3 > 64 or n > PCTR_UNREACH_MAX:
            return False
        memset(buf, 0, vlen)
        memcpy(buf + vlen, frame, l3)
        if swap:
            memcpy(buf + vlen, frame + 6, 6)
            memcpy(buf + vlen + 6, frame, 6)
        memcpy(buf + vlen + l3, pkt, n)
        iov.iov_base = buf
        iov.iov_len = vlen + l3 + n
        memset(&msg, 0, sizeof(br_mmsghdr))
        msg.msg_hdr.msg_iov = &iov
        msg.msg_hdr.msg_iovlen = 1
        if pcbr_send_all(self.rings[ring].fd, &msg, 1, &self.c.tx_last_errno) == 0:
            return True
        self.c.tx_failed += 1
        return False

    def swap(self, capsule, double timeout=5.0):
        """Use the engine of ``capsule`` from the next batch on; returns once the loop has taken
        it (or at once when the loop is not running). Tracked connections the new engine denies
        are removed first (revalidation), so their next packets are judged again; returns how
        many. The previous engine's capsule is released only after the loop has moved past it."""
        cdef pc_engine_ref *ref = _engine_ref(capsule)
        cdef uint64_t ticket
        cdef br_timespec deadline
        cdef bint done = False
        cdef long extra_ns
        cdef uint64_t revoked_before = 0
        with self._swap_lock:
            with nogil:
                br_clock_gettime(BR_CLOCK_REALTIME, &deadline)
                deadline.tv_sec += <long>timeout
                extra_ns = <long>((timeout - <long>timeout) * 1e9)
                deadline.tv_nsec += extra_ns
                if deadline.tv_nsec >= 1000000000:
                    deadline.tv_sec += 1
                    deadline.tv_nsec -= 1000000000
                br_mutex_lock(&self.lock)
                revoked_before = self.c.revoked
                self.pending = ref
                self.swap_requested += 1
                ticket = self.swap_requested
                if not self.is_running:
                    self._apply_pending()
                else:
                    br_mutex_unlock(&self.lock)
                    self._wake_nogil()
                    br_mutex_lock(&self.lock)
                    while self.swap_applied < ticket and self.is_running:
                        if br_cond_timedwait(&self.cond, &self.lock, &deadline) != 0:
                            break
                    if self.swap_applied < ticket and not self.is_running:
                        self._apply_pending()  # the loop ended meanwhile
                done = self.swap_applied >= ticket
                if not done:
                    self.pending = NULL  # withdrawn: the loop keeps the engine it has
                    self.swap_requested -= 1
                br_mutex_unlock(&self.lock)
            if not done:
                raise TimeoutError("the bridge loop did not take the new engine in time")
            # The loop now uses `ref`; the old capsule (and its engine) may go.
            self.client._capsule = capsule
        return int(self.c.revoked - revoked_before)

    cdef void _wake_nogil(self) noexcept nogil:
        cdef uint64_t one = 1
        br_write(self.efd, &one, 8)

    @property
    def counters(self):
        """A snapshot of the counters (dict of ints; ``rx_frames``/... are per interface)."""
        cdef int i
        for i in range(BR_SIDES):
            if self.rings[i].fd >= 0:
                pcbr_stats(self.rings[i].fd, &self.c.kernel_packets, &self.c.kernel_drops,
                           &self.c.kernel_freezes)
        cdef dict d = self.c  # the struct as a dict (arrays as lists): no per-packet objects
        # The tracker is the loop's while it runs: its snapshot then (at most a second old); with
        # the loop stopped (it cannot start while the lock is held), the tracker itself.
        br_mutex_lock(&self.lock)
        try:
            if not self.is_running:
                self._snapshot_ct()
        finally:
            br_mutex_unlock(&self.lock)
        d["tracked"] = self.ct_snap_tracked if self.client.ct != NULL else 0
        if self.client.ct != NULL and self.ct_snap_n not in (0, len(CT_STATS_NAMES)):  # 0: none taken yet
            raise RuntimeError(f"engine ABI mismatch: the tracker keeps {self.ct_snap_n} counters, "
                               f"expected {len(CT_STATS_NAMES)}")
        for i, name in enumerate(CT_STATS_NAMES):
            # the tracker's own: early drops and refusals at its cap
            d["ct_" + name] = self.ct_snap[i] if self.client.ct != NULL else 0
        return d
