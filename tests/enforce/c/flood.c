/* A packet flood for tests: TCP SYNs or UDP datagrams to one address and port, from many source
 * addresses of one /24 and many source ports, as fast as one core sends (or at a given rate).
 * Only ever run inside the tests' own network namespaces, aimed at their own addresses.
 *
 *   flood DST PORT tcp|udp SRC_NET(a.b.c) FIRST_HOST NHOSTS SECONDS [PPS]
 *
 * Prints "sent N" at the end. */
#include <arpa/inet.h>
#include <netinet/ip.h>
#include <netinet/tcp.h>
#include <netinet/udp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static uint16_t csum(const void *data, size_t len, uint32_t sum) {
    const uint8_t *p = data;
    for (; len > 1; p += 2, len -= 2) sum += (uint32_t)(p[0] << 8 | p[1]);
    if (len) sum += (uint32_t)(p[0] << 8);
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    return (uint16_t)~sum;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr, "usage: flood DST PORT tcp|udp SRC_NET FIRST_HOST NHOSTS SECONDS [PPS]\n");
        return 2;
    }
    in_addr_t dst = inet_addr(argv[1]);
    int port = atoi(argv[2]), tcp = strcmp(argv[3], "tcp") == 0;
    char net[32];
    snprintf(net, sizeof net, "%s.0", argv[4]);
    uint32_t base = ntohl(inet_addr(net));
    int first = atoi(argv[5]), nhosts = atoi(argv[6]);
    double seconds = atof(argv[7]), pps = argc > 8 ? atof(argv[8]) : 0;
    int fd = socket(AF_INET, SOCK_RAW, IPPROTO_RAW);
    if (fd < 0) { perror("socket"); return 1; }
    uint8_t pkt[64];
    size_t l4 = tcp ? sizeof(struct tcphdr) : sizeof(struct udphdr) + 4;
    size_t len = sizeof(struct iphdr) + l4;
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_addr.s_addr = dst};
    double start = now(), end = start + seconds;
    unsigned long sent = 0;
    for (unsigned long i = 0;; i++) {
        if ((i & 255) == 0) {
            double t = now();
            if (t >= end) break;
            if (pps > 0 && sent > (t - start) * pps) { usleep(1000); i--; continue; }
        }
        memset(pkt, 0, sizeof pkt);
        struct iphdr *ip = (struct iphdr *)pkt;
        ip->version = 4; ip->ihl = 5; ip->ttl = 64; ip->tot_len = htons((uint16_t)len);
        ip->id = htons((uint16_t)i); ip->protocol = tcp ? IPPROTO_TCP : IPPROTO_UDP;
        ip->saddr = htonl(base + (uint32_t)(first + i % (unsigned long)nhosts));
        ip->daddr = dst;
        ip->check = htons(csum(ip, sizeof *ip, 0));
        uint16_t sport = (uint16_t)(1024 + (i / (unsigned long)nhosts) % 60000);
        uint8_t pseudo[12];
        memcpy(pseudo, &ip->saddr, 4); memcpy(pseudo + 4, &ip->daddr, 4);
        pseudo[8] = 0; pseudo[9] = ip->protocol; pseudo[10] = (uint8_t)(l4 >> 8); pseudo[11] = (uint8_t)l4;
        uint32_t sum = 0;
        for (int k = 0; k < 12; k += 2) sum += (uint32_t)(pseudo[k] << 8 | pseudo[k + 1]);
        if (tcp) {
            struct tcphdr *th = (struct tcphdr *)(pkt + sizeof *ip);
            th->source = htons(sport); th->dest = htons((uint16_t)port);
            th->seq = htonl((uint32_t)i * 2654435761u); th->doff = 5; th->syn = 1; th->window = htons(64240);
            th->check = htons(csum(th, l4, sum));
        } else {
            struct udphdr *uh = (struct udphdr *)(pkt + sizeof *ip);
            uh->source = htons(sport); uh->dest = htons((uint16_t)port); uh->len = htons((uint16_t)l4);
            memcpy(pkt + sizeof *ip + sizeof *uh, "fld!", 4);
            uh->check = htons(csum(uh, l4, sum));
            if (!uh->check) uh->check = 0xffff;
        }
        if (sendto(fd, pkt, len, 0, (struct sockaddr *)&to, sizeof to) == (ssize_t)len) sent++;
    }
    printf("sent %lu\n", sent);
    return 0;
}
