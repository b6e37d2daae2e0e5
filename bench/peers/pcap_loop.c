/* The libpcap peer of the replay benchmark (issue 15): the read loop every pcap tool starts from,
 * pcap_next_ex over a capture file, touching each packet's header and its first bytes (so the
 * data is really read), nothing else. Prints one JSON line: packets, bytes, seconds of the loop
 * (open excluded) and libpcap's version.
 *
 *   pcap_loop FILE */
#include <pcap/pcap.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: pcap_loop FILE\n");
        return 2;
    }
    char err[PCAP_ERRBUF_SIZE];
    pcap_t *p = pcap_open_offline(argv[1], err);
    if (!p) {
        fprintf(stderr, "pcap_loop: %s\n", err);
        return 1;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct pcap_pkthdr *h;
    const u_char *data;
    uint64_t packets = 0, bytes = 0, sum = 0;
    int rc;
    while ((rc = pcap_next_ex(p, &h, &data)) == 1) {
        packets++;
        bytes += h->caplen;
        if (h->caplen >= 14) sum += data[12] ^ data[13]; /* the EtherType: read the packet */
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rc == PCAP_ERROR) {
        fprintf(stderr, "pcap_loop: %s\n", pcap_geterr(p));
        return 1;
    }
    pcap_close(p);
    printf("{\"packets\": %llu, \"bytes\": %llu, \"seconds\": %.6f, \"check\": %llu, \"libpcap\": \"%s\"}\n",
           (unsigned long long)packets, (unsigned long long)bytes,
           (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9, (unsigned long long)sum,
           pcap_lib_version());
    return 0;
}
