/* The DPDK rte_acl peer of the ClassBench benchmark (issue 15): builds an rte_acl context from a
 * ClassBench ruleset (first line = highest priority), classifies a trace of 5-tuples through it
 * and reports, as one JSON line: build time, the bytes rte_malloc holds after the build, the
 * process's peak RSS, the classification time of ROUNDS passes over the whole trace in bursts of
 * BURST (median and best, after one untimed pass) with the classify method ALG. Writes the matched
 * rule number of every header (0-based, -1 for no match) as int32 into OUT, for the caller to check.
 *
 *   rte_acl_bench RULES TRACE OUT [ROUNDS] [BURST] [ALG]
 *
 * RULES and TRACE are the uncompressed ClassBench files; ALG is fastest (the default) | default |
 * scalar | sse | avx2 | avx512x16 | avx512x32. "fastest" times every method this CPU and build
 * offer on the one context (AVX-512 ones allowed: the EAL is told 512-bit vectors are fine) and
 * reports the one of lowest median, each method's median in "methods", and fails if two methods
 * answer differently; "default" is the method DPDK picks by itself (rte_acl_dump prints it as
 * "alg=N", enum rte_acl_classify_alg, before the JSON line). The EAL runs without hugepages, PCI
 * or shared files (a plain process). */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <arpa/inet.h>
#include <rte_acl.h>
#include <rte_eal.h>
#include <rte_malloc.h>
#include <rte_version.h>

enum { F_PROTO, F_SRC, F_DST, F_SPORT, F_DPORT, NUM_FIELDS };

/* The bytes rte_acl reads: the protocol byte first, then 4-byte groups (network byte order). */
struct tuple {
    uint8_t proto;
    uint8_t pad[3];
    uint32_t src;
    uint32_t dst;
    uint16_t sport;
    uint16_t dport;
};

static const struct rte_acl_field_def DEFS[NUM_FIELDS] = {
    {.type = RTE_ACL_FIELD_TYPE_BITMASK, .size = 1, .field_index = F_PROTO, .input_index = 0,
     .offset = offsetof(struct tuple, proto)},
    {.type = RTE_ACL_FIELD_TYPE_MASK, .size = 4, .field_index = F_SRC, .input_index = 1,
     .offset = offsetof(struct tuple, src)},
    {.type = RTE_ACL_FIELD_TYPE_MASK, .size = 4, .field_index = F_DST, .input_index = 2,
     .offset = offsetof(struct tuple, dst)},
    {.type = RTE_ACL_FIELD_TYPE_RANGE, .size = 2, .field_index = F_SPORT, .input_index = 3,
     .offset = offsetof(struct tuple, sport)},
    {.type = RTE_ACL_FIELD_TYPE_RANGE, .size = 2, .field_index = F_DPORT, .input_index = 3,
     .offset = offsetof(struct tuple, dport)},
};

RTE_ACL_RULE_DEF(acl_rule, NUM_FIELDS);

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what) {
    fprintf(stderr, "rte_acl_bench: %s\n", what);
    exit(1);
}

static uint32_t parse_ip(const char *s, unsigned *len) {
    unsigned a, b, c, d;
    if (sscanf(s, "%u.%u.%u.%u/%u", &a, &b, &c, &d, len) != 5) die("bad address in rules");
    return a << 24 | b << 16 | c << 8 | d;
}

static struct acl_rule *read_rules(const char *path, size_t *count) {
    FILE *f = fopen(path, "r");
    if (!f) die("cannot open rules");
    size_t cap = 1024, n = 0;
    struct acl_rule *rules = calloc(cap, sizeof *rules);
    char line[512], src[64], dst[64];
    unsigned slo, shi, dlo, dhi, proto, pmask;
    while (fgets(line, sizeof line, f)) {
        if (line[0] != '@') continue;
        if (sscanf(line + 1, "%63s %63s %u : %u %u : %u %x/%x", src, dst, &slo, &shi, &dlo, &dhi, &proto,
                   &pmask) != 8)
            die("bad rule line");
        if (n == cap) {
            rules = realloc(rules, 2 * cap * sizeof *rules);
            memset(rules + cap, 0, cap * sizeof *rules);
            cap *= 2;
        }
        struct acl_rule *r = &rules[n];
        unsigned slen, dlen;
        r->data.category_mask = 1;
        r->data.priority = RTE_ACL_MAX_PRIORITY - (int32_t)n; /* first line wins */
        r->data.userdata = (uint32_t)n + 1;                   /* 0 means "no match" */
        r->field[F_PROTO].value.u8 = (uint8_t)proto;
        r->field[F_PROTO].mask_range.u8 = (uint8_t)pmask;
        r->field[F_SRC].value.u32 = parse_ip(src, &slen);
        r->field[F_SRC].mask_range.u32 = slen;
        r->field[F_DST].value.u32 = parse_ip(dst, &dlen);
        r->field[F_DST].mask_range.u32 = dlen;
        r->field[F_SPORT].value.u16 = (uint16_t)slo;
        r->field[F_SPORT].mask_range.u16 = (uint16_t)shi;
        r->field[F_DPORT].value.u16 = (uint16_t)dlo;
        r->field[F_DPORT].mask_range.u16 = (uint16_t)dhi;
        n++;
    }
    fclose(f);
    *count = n;
    return rules;
}

static struct tuple *read_trace(const char *path, size_t *count) {
    FILE *f = fopen(path, "r");
    if (!f) die("cannot open trace");
    size_t cap = 1 << 16, n = 0;
    struct tuple *t = calloc(cap, sizeof *t);
    uint64_t src, dst, sport, dport, proto;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64, &src, &dst, &sport, &dport,
                   &proto) != 5)
            continue;
        if (n == cap) {
            cap *= 2;
            t = realloc(t, cap * sizeof *t);
        }
        memset(&t[n], 0, sizeof t[n]);
        t[n].proto = (uint8_t)proto;
        t[n].src = htonl((uint32_t)src);
        t[n].dst = htonl((uint32_t)dst);
        t[n].sport = htons((uint16_t)sport);
        t[n].dport = htons((uint16_t)dport);
        n++;
    }
    fclose(f);
    *count = n;
    return t;
}

static size_t heap_bytes(void) {
    struct rte_malloc_socket_stats s;
    size_t total = 0;
    for (int sock = 0; sock < RTE_MAX_NUMA_NODES; sock++)
        if (rte_malloc_get_socket_stats(sock, &s) == 0) total += s.heap_allocsz_bytes;
    return total;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static const struct {
    const char *name;
    enum rte_acl_classify_alg alg;
} ALGS[] = {
    {"default", RTE_ACL_CLASSIFY_DEFAULT}, {"scalar", RTE_ACL_CLASSIFY_SCALAR},
    {"sse", RTE_ACL_CLASSIFY_SSE},         {"avx2", RTE_ACL_CLASSIFY_AVX2},
    {"avx512x16", RTE_ACL_CLASSIFY_AVX512X16}, {"avx512x32", RTE_ACL_CLASSIFY_AVX512X32},
};

int main(int argc, char **argv) {
    if (argc < 4) die("usage: rte_acl_bench RULES TRACE OUT [ROUNDS] [BURST] [ALG]");
    int rounds = argc > 4 ? atoi(argv[4]) : 5;
    uint32_t burst = argc > 5 ? (uint32_t)atoi(argv[5]) : 64;
    const char *alg = argc > 6 ? argv[6] : "fastest";
    int fastest = strcmp(alg, "fastest") == 0;
    if (rounds < 1 || rounds > 1000 || burst < 1) die("bad ROUNDS or BURST");

    char *eal[] = {"rte_acl_bench", "--no-huge", "--no-pci", "--no-shconf", "--no-telemetry", "-m", "6144",
                   "-l", "0", "--log-level", "lib.eal:error",
                   fastest || strcmp(alg, "avx512x16") == 0 || strcmp(alg, "avx512x32") == 0 ? "--force-max-simd-bitwidth=512"
                                                                                   : "--log-level=user1:error"};
    if (rte_eal_init((int)(sizeof eal / sizeof eal[0]), eal) < 0) die("rte_eal_init failed");

    size_t nrules, ntrace;
    struct acl_rule *rules = read_rules(argv[1], &nrules);
    struct tuple *trace = read_trace(argv[2], &ntrace);
    if (nrules == 0 || ntrace == 0) die("empty rules or trace");

    size_t heap0 = heap_bytes();
    double t0 = now();
    struct rte_acl_param prm = {.name = "bench", .socket_id = SOCKET_ID_ANY,
                                .rule_size = RTE_ACL_RULE_SZ(NUM_FIELDS), .max_rule_num = (uint32_t)nrules};
    struct rte_acl_ctx *ctx = rte_acl_create(&prm);
    if (!ctx) die("rte_acl_create failed");
    if (rte_acl_add_rules(ctx, (const struct rte_acl_rule *)rules, (uint32_t)nrules) != 0) die("rte_acl_add_rules failed");
    struct rte_acl_config cfg = {.num_categories = 1, .num_fields = NUM_FIELDS, .max_size = 0};
    memcpy(cfg.defs, DEFS, sizeof DEFS);
    int rc = rte_acl_build(ctx, &cfg);
    if (rc != 0) {
        fprintf(stderr, "rte_acl_build: %s\n", strerror(-rc));
        return 1;
    }
    double build_s = now() - t0;
    size_t heap = heap_bytes() - heap0;
    for (size_t i = 0; i < sizeof ALGS / sizeof ALGS[0]; i++)
        if (strcmp(alg, ALGS[i].name) == 0 && ALGS[i].alg != RTE_ACL_CLASSIFY_DEFAULT &&
            rte_acl_set_ctx_classify(ctx, ALGS[i].alg) != 0)
            die("that algorithm is not available on this CPU or build");

    const uint8_t **data = malloc(ntrace * sizeof *data);
    uint32_t *res = malloc(ntrace * sizeof *res), *best_res = malloc(ntrace * sizeof *best_res);
    for (size_t i = 0; i < ntrace; i++) data[i] = (const uint8_t *)&trace[i];
    double *secs = malloc(rounds * sizeof *secs);
    double best_median = -1, best_best = 0;
    const char *best_name = alg;
    char methods[512] = "";
    size_t n_algs = sizeof ALGS / sizeof ALGS[0];
    for (size_t a = 0; a < n_algs; a++) {
        if (fastest) {
            if (ALGS[a].alg == RTE_ACL_CLASSIFY_DEFAULT || rte_acl_set_ctx_classify(ctx, ALGS[a].alg) != 0) continue;
        } else if (a > 0) {
            break; /* one method, set above */
        }
        for (int r = -1; r < rounds; r++) { /* round -1 warms the caches, untimed */
            double s = now();
            for (size_t i = 0; i < ntrace; i += burst) {
                uint32_t m = (uint32_t)(ntrace - i < burst ? ntrace - i : burst);
                rte_acl_classify(ctx, data + i, res + i, m, 1);
            }
            if (r >= 0) secs[r] = now() - s;
        }
        qsort(secs, rounds, sizeof *secs, cmp_double);
        double median = secs[rounds / 2];
        if (fastest) {
            size_t used = strlen(methods);
            snprintf(methods + used, sizeof methods - used, "%s\"%s\": %.6f", used ? ", " : "", ALGS[a].name, median);
            if (best_median >= 0 && memcmp(res, best_res, ntrace * sizeof *res) != 0)
                die("two classify methods answered differently");
        }
        if (best_median < 0 || median < best_median) {
            best_median = median;
            best_best = secs[0];
            best_name = fastest ? ALGS[a].name : alg;
            memcpy(best_res, res, ntrace * sizeof *res);
        }
    }
    if (best_median < 0) die("no classify method available");

    FILE *out = fopen(argv[3], "wb");
    if (!out) die("cannot open OUT");
    for (size_t i = 0; i < ntrace; i++) {
        int32_t id = (int32_t)best_res[i] - 1;
        fwrite(&id, sizeof id, 1, out);
    }
    fclose(out);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru); /* peak RSS: the build's temporary memory is the most of it */
    fflush(stdout);
    if (!fastest) rte_acl_dump(ctx); /* prints "alg=N", the classify method in use (rte_acl_classify_alg) */
    fflush(stdout);
    printf("{\"rules\": %zu, \"headers\": %zu, \"build_s\": %.6f, \"heap_bytes\": %zu, \"rounds\": %d, "
           "\"burst\": %u, \"median_s\": %.6f, \"best_s\": %.6f, \"alg\": \"%s\", \"methods\": {%s}, "
           "\"dpdk\": \"%s\", \"max_rss_kb\": %ld}\n",
           nrules, ntrace, build_s, heap, rounds, burst, best_median, best_best, best_name, methods, rte_version(),
           ru.ru_maxrss);
    rte_acl_free(ctx);
    rte_eal_cleanup();
    return 0;
}
