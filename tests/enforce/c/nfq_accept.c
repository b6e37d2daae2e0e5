/* The C baseline of the NFQUEUE benchmarks: libnetfilter_queue's documented consumer, NF_ACCEPT
 * for everything, no judging. Binds QUEUE (copy range 128, queue length MAXLEN), prints "ready",
 * counts verdicts until SIGTERM, then prints "verdicts N". Per packet by default: one verdict
 * message each; with "batch", one NFQNL_MSG_VERDICT_BATCH (nfq_set_verdict_batch) for every
 * packet of a recv buffer, the highest id of the buffer covering the rest.
 *
 *   nfq_accept QUEUE MAXLEN [batch] */
#include <arpa/inet.h>
#include <errno.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

static volatile sig_atomic_t stop;
static unsigned long verdicts;
static int batch;             /* verdicts by batch, not per packet */
static uint32_t pending_id;   /* highest id seen in this recv buffer, batch mode */
static unsigned long pending; /* packets it covers */

static void on_term(int sig) { (void)sig; stop = 1; }

static int on_packet(struct nfq_q_handle *qh, struct nfgenmsg *msg, struct nfq_data *nfa, void *data) {
    (void)msg; (void)data;
    struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
    if (!ph) return 0;
    if (batch) {
        uint32_t id = ntohl(ph->packet_id);
        if (!pending || (int32_t)(id - pending_id) > 0) pending_id = id;
        pending++;
        return 0;
    }
    verdicts++;
    return nfq_set_verdict(qh, ntohl(ph->packet_id), NF_ACCEPT, 0, NULL);
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: nfq_accept QUEUE MAXLEN [batch]\n"); return 2; }
    batch = argc > 3 && argv[3][0] == 'b';
    struct nfq_handle *h = nfq_open();
    if (!h) { perror("nfq_open"); return 1; }
    struct nfq_q_handle *qh = nfq_create_queue(h, (uint16_t)atoi(argv[1]), on_packet, NULL);
    if (!qh) { perror("nfq_create_queue"); return 1; }
    if (nfq_set_mode(qh, NFQNL_COPY_PACKET, 128) < 0) { perror("nfq_set_mode"); return 1; }
    nfq_set_queue_maxlen(qh, (uint32_t)atoi(argv[2]));
    int fd = nfq_fd(h), size = 8 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof size);
    struct sigaction sa = {.sa_handler = on_term};
    sigaction(SIGTERM, &sa, NULL);
    struct timeval tv = {0, 100000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    printf("ready\n");
    fflush(stdout);
    char buf[65536] __attribute__((aligned));
    while (!stop) {
        int n = recv(fd, buf, sizeof buf, 0);
        if (n >= 0) {
            nfq_handle_packet(h, buf, n);
            if (pending) {
                nfq_set_verdict_batch(qh, pending_id, NF_ACCEPT);
                verdicts += pending;
                pending = 0;
            }
        }
        else if (errno != EAGAIN && errno != EINTR && errno != ENOBUFS) break;
    }
    printf("verdicts %lu\n", verdicts);
    nfq_destroy_queue(qh);
    nfq_close(h);
    return 0;
}
