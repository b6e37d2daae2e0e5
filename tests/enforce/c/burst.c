/* A bursty UDP load with per-packet latency, for the NFQUEUE benchmarks. Only ever run inside the
 * tests' own network namespaces, aimed at their own addresses.
 *
 *   burst send DST SRC DPORT NPORTS COUNT BURST RATE SECONDS
 *       From SRC (the pod's own address, raw socket, IP_HDRINCL): UDP datagrams to DST, BURST of
 *       them back to back per sendmmsg call, bursts spaced so the average is RATE packets/s (0:
 *       no pause). Datagram i goes from source port 1024 + i % 64000 to destination port
 *       DPORT + (i / 64000) % NPORTS, so the first 64000 * NPORTS are each a connection of their
 *       own. Its payload is {uint64 seq = i, uint64 CLOCK_MONOTONIC ns just before the burst's
 *       sendmmsg}. Stops after COUNT datagrams, or after SECONDS when SECONDS > 0. Prints one
 *       JSON line: sent, failed (sendmmsg errors), seconds, pps.
 *
 *   burst recv IP DPORT NPORTS CAPACITY
 *       Binds UDP sockets on IP:DPORT..DPORT+NPORTS-1 (32 MiB receive buffers, SO_TIMESTAMPNS,
 *       SO_RXQ_OVFL), prints "ready", receives with recvmmsg until SIGTERM, then prints one JSON
 *       line: datagrams received, distinct sequence numbers below CAPACITY (those have a latency),
 *       duplicates, socket drops (SO_RXQ_OVFL), and the latency percentiles in microseconds of
 *       the distinct ones: "k_*" from the kernel's receive timestamp (SO_TIMESTAMPNS, CLOCK_REALTIME
 *       converted to CLOCK_MONOTONIC with the offset sampled at start), "u_*" from the receiver's
 *       clock_gettime(CLOCK_MONOTONIC) when recvmmsg returned (adds its wake-up delay).
 *       CLOCK_MONOTONIC is one clock across network namespaces. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAXBURST 1024
#define BATCH 256

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int64_t real_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

struct payload {
    uint64_t seq;
    int64_t sent_ns;
};

static int do_send(int argc, char **argv) {
    if (argc < 10) {
        fprintf(stderr, "usage: burst send DST SRC DPORT NPORTS COUNT BURST RATE SECONDS\n");
        return 2;
    }
    in_addr_t dst = inet_addr(argv[2]), src = inet_addr(argv[3]);
    int dport = atoi(argv[4]), nports = atoi(argv[5]);
    uint64_t count = strtoull(argv[6], NULL, 10);
    int burst = atoi(argv[7]);
    double rate = atof(argv[8]), seconds = atof(argv[9]);
    if (burst < 1 || burst > MAXBURST || nports < 1) { fprintf(stderr, "bad BURST or NPORTS\n"); return 2; }
    int fd = socket(AF_INET, SOCK_RAW, IPPROTO_RAW);
    if (fd < 0) { perror("socket"); return 1; }
    int sz = 8 << 20;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof sz);

    enum { LEN = sizeof(struct iphdr) + sizeof(struct udphdr) + sizeof(struct payload) };
    static uint8_t pkts[MAXBURST][LEN];
    static struct iovec iov[MAXBURST];
    static struct mmsghdr msgs[MAXBURST];
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_addr.s_addr = dst};
    for (int k = 0; k < burst; k++) {
        struct iphdr *ip = (struct iphdr *)pkts[k];
        ip->version = 4; ip->ihl = 5; ip->ttl = 64; ip->tot_len = htons(LEN);
        ip->protocol = IPPROTO_UDP; ip->saddr = src; ip->daddr = dst;  /* kernel fills id, check */
        struct udphdr *uh = (struct udphdr *)(pkts[k] + sizeof *ip);
        uh->len = htons(LEN - sizeof *ip); uh->check = 0;              /* no UDP checksum (IPv4) */
        iov[k].iov_base = pkts[k]; iov[k].iov_len = LEN;
        msgs[k].msg_hdr.msg_iov = &iov[k]; msgs[k].msg_hdr.msg_iovlen = 1;
        msgs[k].msg_hdr.msg_name = &to; msgs[k].msg_hdr.msg_namelen = sizeof to;
    }
    int64_t start = mono_ns(), end = seconds > 0 ? start + (int64_t)(seconds * 1e9) : INT64_MAX;
    uint64_t i = 0, sent = 0, failed = 0, bursts = 0;
    for (;;) {
        if (seconds <= 0 && i >= count) break;
        int64_t now = mono_ns();
        if (now >= end) break;
        if (rate > 0) {
            int64_t due = start + (int64_t)((double)bursts * burst * 1e9 / rate);
            if (due > now) {
                struct timespec ts = {due / 1000000000LL, due % 1000000000LL};
                clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
            }
        }
        int n = burst;
        if (seconds <= 0 && count - i < (uint64_t)n) n = (int)(count - i);
        int64_t t = mono_ns();
        for (int k = 0; k < n; k++, i++) {
            struct udphdr *uh = (struct udphdr *)(pkts[k] + sizeof(struct iphdr));
            uh->source = htons((uint16_t)(1024 + i % 64000));
            uh->dest = htons((uint16_t)(dport + (i / 64000) % (uint64_t)nports));
            struct payload p = {i, t};
            memcpy(pkts[k] + sizeof(struct iphdr) + sizeof(struct udphdr), &p, sizeof p);
        }
        int off = 0;
        while (off < n) {
            int r = sendmmsg(fd, msgs + off, n - off, 0);
            if (r < 0) { failed++; off++; } else { sent += r; off += r; }
        }
        bursts++;
    }
    double secs = (mono_ns() - start) / 1e9;
    printf("{\"sent\": %lu, \"failed\": %lu, \"seconds\": %.6f, \"pps\": %.0f}\n", sent, failed, secs,
           secs > 0 ? sent / secs : 0.0);
    return 0;
}

static volatile sig_atomic_t stop;
static void on_term(int sig) { (void)sig; stop = 1; }

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* The q-quantile of n sorted values (nearest rank), in microseconds. */
static double pct(const uint32_t *v, uint64_t n, double q) {
    if (!n) return -1;
    uint64_t r = (uint64_t)(q * (double)n + 0.999999);
    if (r < 1) r = 1;
    if (r > n) r = n;
    return v[r - 1] / 1000.0;
}

static uint32_t clamp_ns(int64_t d) { return d < 0 ? 0 : d > 0xffffffffLL ? 0xffffffffu : (uint32_t)d; }

static int do_recv(int argc, char **argv) {
    if (argc < 6) { fprintf(stderr, "usage: burst recv IP DPORT NPORTS CAPACITY\n"); return 2; }
    in_addr_t ip = inet_addr(argv[2]);
    int dport = atoi(argv[3]), nports = atoi(argv[4]);
    uint64_t cap = strtoull(argv[5], NULL, 10);
    uint32_t *klat = calloc(cap ? cap : 1, sizeof *klat), *ulat = calloc(cap ? cap : 1, sizeof *ulat);
    uint8_t *seen = calloc(cap ? cap : 1, 1);
    uint32_t *ovfl = calloc((size_t)nports, sizeof *ovfl);
    int *fds = calloc((size_t)nports, sizeof *fds);
    if (!klat || !ulat || !seen || !ovfl || !fds) { perror("calloc"); return 1; }
    int ep = epoll_create1(0);
    for (int k = 0; k < nports; k++) {
        int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0), one = 1, sz = 32 << 20;
        if (fd < 0) { perror("socket"); return 1; }
        setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof sz);
        setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
        setsockopt(fd, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof one);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = ip, .sin_port = htons((uint16_t)(dport + k))};
        if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0) { perror("bind"); return 1; }
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)k};
        epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
        fds[k] = fd;
    }
    struct sigaction sa = {.sa_handler = on_term};
    sigaction(SIGTERM, &sa, NULL);
    /* CLOCK_REALTIME - CLOCK_MONOTONIC, from the tightest of a few samples */
    int64_t offset = 0, best = INT64_MAX;
    for (int k = 0; k < 16; k++) {
        int64_t a = mono_ns(), r = real_ns(), b = mono_ns();
        if (b - a < best) { best = b - a; offset = r - (a + b) / 2; }
    }
    printf("ready\n");
    fflush(stdout);

    static uint8_t bufs[BATCH][128];
    static char ctl[BATCH][256];
    static struct iovec iov[BATCH];
    static struct mmsghdr msgs[BATCH];
    uint64_t received = 0, distinct = 0, dups = 0, beyond = 0, bad = 0;
    struct epoll_event evs[64];
    while (!stop) {
        int ne = epoll_wait(ep, evs, 64, 100);
        for (int e = 0; e < ne; e++) {
            int k = (int)evs[e].data.u32;
            for (;;) {
                for (int m = 0; m < BATCH; m++) {
                    iov[m].iov_base = bufs[m]; iov[m].iov_len = sizeof bufs[m];
                    memset(&msgs[m].msg_hdr, 0, sizeof msgs[m].msg_hdr);
                    msgs[m].msg_hdr.msg_iov = &iov[m]; msgs[m].msg_hdr.msg_iovlen = 1;
                    msgs[m].msg_hdr.msg_control = ctl[m]; msgs[m].msg_hdr.msg_controllen = sizeof ctl[m];
                }
                int n = recvmmsg(fds[k], msgs, BATCH, MSG_DONTWAIT, NULL);
                if (n <= 0) break;
                int64_t unow = mono_ns();
                for (int m = 0; m < n; m++) {
                    received++;
                    if (msgs[m].msg_len < sizeof(struct payload)) { bad++; continue; }
                    struct payload p;
                    memcpy(&p, bufs[m], sizeof p);
                    int64_t kts = 0;
                    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msgs[m].msg_hdr); c; c = CMSG_NXTHDR(&msgs[m].msg_hdr, c)) {
                        if (c->cmsg_level != SOL_SOCKET) continue;
                        if (c->cmsg_type == SCM_TIMESTAMPNS) {
                            struct timespec ts;
                            memcpy(&ts, CMSG_DATA(c), sizeof ts);
                            kts = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec - offset;
                        } else if (c->cmsg_type == SO_RXQ_OVFL) {
                            memcpy(&ovfl[k], CMSG_DATA(c), sizeof ovfl[k]);
                        }
                    }
                    if (p.seq >= cap) { beyond++; continue; }
                    if (seen[p.seq]) { dups++; continue; }
                    seen[p.seq] = 1;
                    distinct++;
                    klat[p.seq] = clamp_ns((kts ? kts : unow) - p.sent_ns);
                    ulat[p.seq] = clamp_ns(unow - p.sent_ns);
                }
            }
        }
    }
    int64_t drift = 0;
    {
        int64_t a = mono_ns(), r = real_ns(), b = mono_ns();
        drift = (r - (a + b) / 2) - offset;
    }
    uint64_t j = 0;
    for (uint64_t s = 0; s < cap; s++)
        if (seen[s]) { klat[j] = klat[s]; ulat[j] = ulat[s]; j++; }
    qsort(klat, j, sizeof *klat, cmp_u32);
    qsort(ulat, j, sizeof *ulat, cmp_u32);
    uint64_t drops = 0;
    for (int k = 0; k < nports; k++) drops += ovfl[k];
    printf("{\"received\": %lu, \"distinct\": %lu, \"dups\": %lu, \"beyond\": %lu, \"bad\": %lu, \"socket_drops\": %lu, "
           "\"k_p50_us\": %.1f, \"k_p99_us\": %.1f, \"k_max_us\": %.1f, "
           "\"u_p50_us\": %.1f, \"u_p99_us\": %.1f, \"u_max_us\": %.1f, \"clock_drift_us\": %.1f}\n",
           received, distinct, dups, beyond, bad, drops,
           pct(klat, j, 0.50), pct(klat, j, 0.99), j ? klat[j - 1] / 1000.0 : -1,
           pct(ulat, j, 0.50), pct(ulat, j, 0.99), j ? ulat[j - 1] / 1000.0 : -1, drift / 1000.0);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "send") == 0) return do_send(argc, argv);
    if (argc > 1 && strcmp(argv[1], "recv") == 0) return do_recv(argc, argv);
    fprintf(stderr, "usage: burst send ... | burst recv ... (see the source)\n");
    return 2;
}
