/*
 * astral-pktio: the replay's compiled sender and receiver (one process per host and role).
 *
 * Why C: the emulated fabric is one software switch sharing two cores with every traffic
 * source. A Python loop spends tens of microseconds per packet, so most of the machine went
 * to the lab's own agents instead of the switch. This helper does only the per-packet work;
 * everything that needs judgement stays in Python (traffic/pktplan.py writes the plan and
 * reads the results, traffic/roce.py owns the frame layout).
 *
 *   astral-pktio send --plan PLAN --out SENT [--intf IFACE | --dump FRAMES] [--start-at NS]
 *   astral-pktio recv --intf IFACE --out RECS [--ready FILE] [--expect-bytes N]
 *                     [--idle-timeout S] [--timeout S] [--ring-mb M]
 *
 * send: frames come from templates the plan carries (one per QP, opcode and length); per
 * packet it writes the PSN word, the RETH or the replay header (message number, packet
 * index, send time) and the ICRC, then hands frames to the kernel in batches (sendmmsg on
 * an AF_PACKET socket, so the host link's qdisc still shapes them). Active QPs are served
 * round-robin, a packet each; QPs sharing a lane (same destination QP) run their work
 * requests in order with PSN and message numbers continuing. Pacing is a token bucket at
 * the plan's rate holding `burst` seconds of credit. `--dump` writes the frames to a file
 * (u32 length, bytes) instead of a socket: the unit tests compare them with Python's.
 *
 * recv: a TPACKET_V3 ring on the interface (kernel timestamps, the first 128 bytes of each
 * frame), RoCEv2 frames to UDP 4791 kept as fixed 48-byte records for Python to account;
 * stops at `--expect-bytes` of payload, `--idle-timeout` seconds after the last packet,
 * `--timeout`, SIGTERM/SIGINT (after draining the ring) or when its interface is gone.
 * Both modes stop when the process that started them dies. The last line of RECS.json says why, with
 * the ring's own drop count; the records are in RECS.json.bin.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#define PLAN_MAGIC 0x534b5041u   /* "APKS" little-endian */
#define SENT_MAGIC 0x524b5041u   /* "APKR" */
#define REC_MAGIC 0x434b5041u    /* "APKC" */
#define VERSION 1u
#define OFF_PSN 50               /* traffic/roce.py OFF_PSN: first byte the ICRC covers as is */
#define HDR_END_PLAIN 70         /* PSN word, seq, index, send ns (roce._PACK_PLAIN) */
#define HDR_END_RETH 86          /* PSN word, VA, rkey, DMA length, seq, index, ns (_PACK_RETH) */
#define BATCH 64
#define MAX_FRAME 9216
#define MIN_SLEEP_NS 50000
#define RETRY_NS 100000
#define RETRY_GIVE_UP_NS 10000000000LL
#define ROCE_PORT 4791
#define DRAIN_NS 2000000000LL

static volatile sig_atomic_t stop_flag;
static void on_signal(int sig) { stop_flag = sig; }

static void die(const char *fmt, const char *arg) {
    fprintf(stderr, "astral-pktio: ");
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
    exit(2);
}

static int64_t now_ns(clockid_t clk) {
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_until(clockid_t clk, int64_t t) {
    struct timespec ts = {.tv_sec = t / 1000000000LL, .tv_nsec = t % 1000000000LL};
    while (clock_nanosleep(clk, TIMER_ABSTIME, &ts, NULL) == EINTR && !stop_flag) {
    }
}

/* CPU time this process used so far (user + system), for the benchmark's split by component */
static int64_t cpu_ns(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ((int64_t)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000LL +
           ((int64_t)ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000LL;
}

static void be32(uint8_t *p, uint32_t v) {
    p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
}
static void be64(uint8_t *p, uint64_t v) { be32(p, v >> 32); be32(p + 4, (uint32_t)v); }
static uint32_t rd32be(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static uint64_t rd64be(const uint8_t *p) { return (uint64_t)rd32be(p) << 32 | rd32be(p + 4); }

/* An output file written under PATH.tmp and renamed into place when complete, so a reader
 * never sees half of one (the Python side reads these as soon as they exist). */
typedef struct { FILE *f; char path[4096], tmp[4112]; } Atomic;

static FILE *atomic_open(Atomic *a, const char *path, const char *mode) {
    snprintf(a->path, sizeof a->path, "%s", path);
    snprintf(a->tmp, sizeof a->tmp, "%s.tmp", a->path);
    a->f = fopen(a->tmp, mode);
    if (!a->f) die("cannot write %s", a->tmp);
    return a->f;
}

static void atomic_commit(Atomic *a) {
    if (fclose(a->f) != 0 || rename(a->tmp, a->path) != 0) die("cannot write %s", a->path);
}

/* --- plan ---------------------------------------------------------------------------------- */
typedef struct {
    uint32_t len, reth, ack, crc0, hdr_end;
    uint32_t tail_crc;            /* CRC of the constant bytes after the patched header */
    uLong tail_op;                /* crc32_combine_op operator for the tail's length */
    uint8_t *buf;
} Kind;

typedef struct { uint32_t size, nframes; uint32_t *kinds; uint64_t wire; } Plan;
typedef struct { uint32_t plan, count; } Run;

typedef struct {
    uint32_t lane, psn, rkey, nruns, seq;
    double start;
    uint64_t va;
    Run *runs;
    /* progress */
    uint32_t run, left, frame, first_seq, first_psn, done, active;
    int64_t t_ns, end_ns, due;
    int64_t *starts;
    uint32_t nstarts, cap;
    int next;                     /* the lane's next job, -1 if none */
} Job;

typedef struct {
    uint32_t pmtu, overhead, nkinds, nplans, njobs;
    double rate_bps, burst_s;
    Kind *kinds;
    Plan *plans;
    Job *jobs;
} Spec;

static void rd(FILE *f, void *p, size_t n, const char *path) {
    if (fread(p, 1, n, f) != n) die("truncated plan file %s", path);
}

static uint32_t rd32(FILE *f, const char *path) { uint32_t v; rd(f, &v, 4, path); return v; }

static void load_plan(const char *path, Spec *s) {
    FILE *f = fopen(path, "rb");
    if (!f) die("cannot open plan %s", path);
    if (rd32(f, path) != PLAN_MAGIC || rd32(f, path) != VERSION) die("%s is not a plan", path);
    s->pmtu = rd32(f, path);
    s->overhead = rd32(f, path);
    rd(f, &s->rate_bps, 8, path);
    rd(f, &s->burst_s, 8, path);
    s->nkinds = rd32(f, path);
    s->nplans = rd32(f, path);
    s->njobs = rd32(f, path);
    s->kinds = calloc(s->nkinds, sizeof(Kind));
    s->plans = calloc(s->nplans, sizeof(Plan));
    s->jobs = calloc(s->njobs, sizeof(Job));
    for (uint32_t i = 0; i < s->nkinds; i++) {
        Kind *k = &s->kinds[i];
        k->len = rd32(f, path);
        k->reth = rd32(f, path);
        k->ack = rd32(f, path);
        k->crc0 = rd32(f, path);
        k->hdr_end = k->reth ? HDR_END_RETH : HDR_END_PLAIN;
        if (k->len > MAX_FRAME || k->len < k->hdr_end + 4) die("bad frame length in %s", path);
        k->buf = malloc(k->len);
        rd(f, k->buf, k->len, path);
        uint32_t tail = k->len - 4 - k->hdr_end;
        k->tail_crc = crc32(0, k->buf + k->hdr_end, tail);
#if ZLIB_VERNUM >= 0x12c0
        k->tail_op = crc32_combine_gen(tail);
#else
        k->tail_op = tail;
#endif
    }
    for (uint32_t i = 0; i < s->nplans; i++) {
        Plan *p = &s->plans[i];
        p->size = rd32(f, path);
        p->nframes = rd32(f, path);
        p->kinds = malloc(sizeof(uint32_t) * (p->nframes ? p->nframes : 1));
        rd(f, p->kinds, 4 * p->nframes, path);
        for (uint32_t j = 0; j < p->nframes; j++) {
            if (p->kinds[j] >= s->nkinds) die("bad kind index in %s", path);
            p->wire += s->kinds[p->kinds[j]].len;
        }
    }
    int last_of_lane[65536];
    memset(last_of_lane, -1, sizeof last_of_lane);
    for (uint32_t i = 0; i < s->njobs; i++) {
        Job *j = &s->jobs[i];
        j->lane = rd32(f, path);
        rd(f, &j->start, 8, path);
        j->psn = rd32(f, path);
        j->rkey = rd32(f, path);
        rd(f, &j->va, 8, path);
        j->nruns = rd32(f, path);
        j->runs = malloc(sizeof(Run) * (j->nruns ? j->nruns : 1));
        rd(f, j->runs, sizeof(Run) * j->nruns, path);
        for (uint32_t r = 0; r < j->nruns; r++)
            if (j->runs[r].plan >= s->nplans) die("bad plan index in %s", path);
        if (j->lane >= 65536) die("too many lanes in %s", path);
        j->next = -1;
        if (last_of_lane[j->lane] >= 0) s->jobs[last_of_lane[j->lane]].next = (int)i;
        last_of_lane[j->lane] = (int)i;
    }
    fclose(f);
}

/* --- send ---------------------------------------------------------------------------------- */
typedef struct {
    int fd;
    FILE *dump;
    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH];
    uint8_t bufs[BATCH][MAX_FRAME];
    int n;
    uint64_t retries;
} Out;

static void flush(Out *o) {
    if (o->dump) {
        for (int i = 0; i < o->n; i++) {
            uint32_t len = (uint32_t)o->iov[i].iov_len;
            fwrite(&len, 4, 1, o->dump);
            fwrite(o->bufs[i], 1, len, o->dump);
        }
        o->n = 0;
        return;
    }
    int done = 0;
    int64_t give_up = 0;
    while (done < o->n) {
        int r = sendmmsg(o->fd, o->msgs + done, o->n - done, 0);
        if (r > 0) { done += r; continue; }
        if (r < 0 && errno != ENOBUFS && errno != EAGAIN && errno != EINTR) {
            perror("astral-pktio: sendmmsg");
            exit(1);
        }
        /* the interface queue is full: wait like a NIC's send queue back-pressures */
        int64_t t = now_ns(CLOCK_MONOTONIC);
        if (!give_up) give_up = t + RETRY_GIVE_UP_NS;
        else if (t > give_up) { fprintf(stderr, "astral-pktio: send queue stuck\n"); exit(1); }
        o->retries++;
        sleep_until(CLOCK_MONOTONIC, t + RETRY_NS);
    }
    o->n = 0;
}

/* The job's next frame, copied into the batch; returns its length. */
static uint32_t produce(Spec *s, Job *j, Out *o) {
    Run *run = &j->runs[j->run];
    Plan *p = &s->plans[run->plan];
    Kind *k = &s->kinds[p->kinds[j->frame]];
    uint8_t *b = o->bufs[o->n];
    if (j->frame == 0) j->t_ns = now_ns(CLOCK_REALTIME);
    memcpy(b, k->buf, k->len);
    be32(b + OFF_PSN, j->psn | k->ack);
    if (k->reth) {
        be64(b + 54, j->va + (uint64_t)j->seq * p->size);
        be32(b + 62, j->rkey);
        be32(b + 66, p->size);
        be32(b + 70, j->seq);
        be32(b + 74, j->frame);
        be64(b + 78, (uint64_t)j->t_ns);
    } else {
        be32(b + 54, j->seq);
        be32(b + 58, j->frame);
        be64(b + 62, (uint64_t)j->t_ns);
    }
    uLong c = crc32(k->crc0, b + OFF_PSN, k->hdr_end - OFF_PSN);
#if ZLIB_VERNUM >= 0x12c0
    c = crc32_combine_op(c, k->tail_crc, k->tail_op);
#else
    c = crc32_combine(c, k->tail_crc, (z_off_t)k->tail_op);
#endif
    uint32_t icrc = (uint32_t)c;
    memcpy(b + k->len - 4, &icrc, 4);  /* little-endian on the wire, as roce._ICRC */
    o->iov[o->n].iov_base = b;
    o->iov[o->n].iov_len = k->len;
    o->n++;
    j->psn = (j->psn + 1) & 0xFFFFFF;
    if (++j->frame == p->nframes) {  /* the message's last frame */
        j->frame = 0;
        if (j->nstarts == j->cap) {
            j->cap = j->cap ? 2 * j->cap : 16;
            j->starts = realloc(j->starts, sizeof(int64_t) * j->cap);
        }
        j->starts[j->nstarts++] = j->t_ns;
        j->seq++;
        if (--j->left == 0) {
            if (++j->run < j->nruns) j->left = j->runs[j->run].count;
            else { j->done = 1; j->end_ns = now_ns(CLOCK_REALTIME); }
        }
    }
    return k->len;
}

static void begin(Job *j) {
    j->first_seq = j->seq;
    j->first_psn = j->psn;
    j->run = 0;
    while (j->run < j->nruns && j->runs[j->run].count == 0) j->run++;
    if (j->run == j->nruns) { j->done = 1; j->end_ns = now_ns(CLOCK_REALTIME); return; }
    j->left = j->runs[j->run].count;
    j->active = 1;
}

static void write_sent(const char *path, Spec *s, int64_t started, int64_t finished,
                       uint64_t retries, int interrupted) {
    Atomic out;
    FILE *f = atomic_open(&out, path, "wb");
    uint32_t head[4] = {SENT_MAGIC, VERSION, s->njobs, (uint32_t)interrupted};
    fwrite(head, 4, 4, f);
    fwrite(&started, 8, 1, f);
    fwrite(&finished, 8, 1, f);
    fwrite(&retries, 8, 1, f);
    int64_t cpu = cpu_ns();
    fwrite(&cpu, 8, 1, f);
    for (uint32_t i = 0; i < s->njobs; i++) {
        Job *j = &s->jobs[i];
        uint32_t v[5] = {j->first_seq, j->first_psn, j->psn, j->done, j->nstarts};
        fwrite(v, 4, 5, f);
        fwrite(&j->end_ns, 8, 1, f);
        fwrite(j->starts, 8, j->nstarts, f);
    }
    atomic_commit(&out);
}

static int cmd_send(int argc, char **argv) {
    const char *plan = NULL, *out = NULL, *intf = NULL, *dump = NULL;
    int64_t start_at = 0;
    for (int i = 0; i < argc; i++) {
        if (i + 1 >= argc) die("option %s needs a value", argv[i]);
        if (!strcmp(argv[i], "--plan")) plan = argv[++i];
        else if (!strcmp(argv[i], "--out")) out = argv[++i];
        else if (!strcmp(argv[i], "--intf")) intf = argv[++i];
        else if (!strcmp(argv[i], "--dump")) dump = argv[++i];
        else if (!strcmp(argv[i], "--start-at")) start_at = atoll(argv[++i]);
        else die("unknown send option %s", argv[i]);
    }
    if (!plan || !out || (!intf == !dump)) die("%s", "send needs --plan, --out and one of --intf/--dump");
    static Spec s;
    load_plan(plan, &s);
    static Out o;
    if (dump) {
        o.dump = fopen(dump, "wb");
        if (!o.dump) die("cannot write %s", dump);
    } else {
        o.fd = socket(AF_PACKET, SOCK_RAW, 0);
        if (o.fd < 0) { perror("astral-pktio: socket"); return 1; }
        struct sockaddr_ll sll = {.sll_family = AF_PACKET, .sll_ifindex = if_nametoindex(intf)};
        if (!sll.sll_ifindex) die("no interface %s", intf);
        if (bind(o.fd, (struct sockaddr *)&sll, sizeof sll) < 0) die("cannot bind %s", intf);
        struct ifreq ifr = {0};
        snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", intf);
        uint32_t need = 0;
        for (uint32_t i = 0; i < s.nkinds; i++)
            if (s.kinds[i].len - 14 > need) need = s.kinds[i].len - 14;
        if (ioctl(o.fd, SIOCGIFMTU, &ifr) == 0 && (uint32_t)ifr.ifr_mtu < need) {
            fprintf(stderr, "astral-pktio: pmtu %u needs an MTU of >= %u on %s (it has %d); "
                    "use a smaller pmtu or raise the MTU\n", s.pmtu, need, intf, ifr.ifr_mtu);
            return 2;
        }
        for (int i = 0; i < BATCH; i++) {
            o.iov[i].iov_base = o.bufs[i];
            o.msgs[i].msg_hdr.msg_iov = &o.iov[i];
            o.msgs[i].msg_hdr.msg_iovlen = 1;
        }
    }
    prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0);  /* the replay that started us is gone: stop */
    double spb = s.rate_bps > 0 ? 8e9 / s.rate_bps : 0.0;  /* ns per byte */
    int64_t burst = (int64_t)(s.burst_s * 1e9);
    if (start_at) sleep_until(CLOCK_REALTIME, start_at);
    int64_t started = now_ns(CLOCK_REALTIME);
    int64_t t0 = now_ns(CLOCK_MONOTONIC) - (start_at ? started - start_at : 0);
    /* lane heads wait for their start offset; later jobs of a lane wait for the head */
    int *pending = malloc(sizeof(int) * (s.njobs + 1));
    int *active = malloc(sizeof(int) * (s.njobs + 1));
    char *is_head = calloc(s.njobs + 1, 1);
    for (uint32_t i = 0; i < s.njobs; i++) is_head[i] = 1;
    for (uint32_t i = 0; i < s.njobs; i++)
        if (s.jobs[i].next >= 0) is_head[s.jobs[i].next] = 0;
    int np = 0, na = 0;
    for (uint32_t i = 0; i < s.njobs; i++)
        if (is_head[i]) { s.jobs[i].due = t0 + (int64_t)(s.jobs[i].start * 1e9); pending[np++] = (int)i; }
    double t_next = (double)now_ns(CLOCK_MONOTONIC);
    int interrupted = 0;
    while ((na || np) && !interrupted) {
        if (np) {  /* admit every job whose time has come */
            int64_t now = now_ns(CLOCK_MONOTONIC), soonest = INT64_MAX;
            int kept = 0;  /* admitted in the order they became pending, the rest kept */
            for (int i = 0; i < np; i++) {
                Job *j = &s.jobs[pending[i]];
                if (j->due > now) {
                    if (j->due < soonest) soonest = j->due;
                    pending[kept++] = pending[i];
                    continue;
                }
                begin(j);
                if (j->active) active[na++] = pending[i];
                else if (j->next >= 0) {  /* an empty work request: pass its place on */
                    Job *n = &s.jobs[j->next];
                    int64_t due = t0 + (int64_t)(n->start * 1e9);
                    n->psn = j->psn;
                    n->seq = j->seq;
                    n->due = due > now ? due : now;
                    pending[np++] = j->next;  /* looked at later in this same pass */
                }
            }
            np = kept;
            if (!na) {
                if (np) sleep_until(CLOCK_MONOTONIC, soonest < now + 1000000000LL ? soonest : now + 1000000000LL);
                if (stop_flag) interrupted = 1;
                continue;
            }
        }
        int finished = 0;
        for (int a = 0; a < na; a++) {
            Job *j = &s.jobs[active[a]];
            if (j->done) continue;
            uint32_t len = produce(&s, j, &o);
            finished |= j->done;
            if (spb > 0) {
                t_next += (len + s.overhead) * spb;
                double d = t_next - (double)now_ns(CLOCK_MONOTONIC);
                if (d > MIN_SLEEP_NS) {
                    flush(&o);
                    sleep_until(CLOCK_MONOTONIC, (int64_t)t_next);
                } else if (d < -burst) {
                    t_next -= d + burst;  /* idle or late: give back at most one bucket */
                }
            }
            if (o.n == BATCH) flush(&o);
            if (stop_flag) { interrupted = 1; break; }
        }
        flush(&o);
        if (finished) {
            int k = 0;
            int64_t now = now_ns(CLOCK_MONOTONIC);
            for (int a = 0; a < na; a++) {
                Job *j = &s.jobs[active[a]];
                if (!j->done) { active[k++] = active[a]; continue; }
                if (j->next >= 0) {  /* the QP's next work request: PSN and numbers continue */
                    Job *n = &s.jobs[j->next];
                    n->psn = j->psn;
                    n->seq = j->seq;
                    int64_t due = t0 + (int64_t)(n->start * 1e9);
                    n->due = due > now ? due : now;
                    pending[np++] = j->next;
                }
            }
            na = k;
        }
    }
    flush(&o);
    int64_t finished_ns = now_ns(CLOCK_REALTIME);
    if (o.dump) fclose(o.dump);
    else close(o.fd);
    write_sent(out, &s, started, finished_ns, o.retries, interrupted);
    return 0;
}

/* --- receive ------------------------------------------------------------------------------- */
typedef struct __attribute__((packed)) {
    uint64_t stamp_ns, start_ns;
    uint32_t src_ip, psn, seq, plen, dma, qp;
    uint16_t sport;
    uint8_t op, pad;
    uint32_t pad2;
} Rec;
_Static_assert(sizeof(Rec) == 48, "record layout is shared with traffic/pktplan.py");

typedef struct { FILE *f; uint64_t packets, bytes, malformed, other; int64_t last_ns; } Sink;

/* The ring keeps only each frame's first SNAP bytes (headers, RETH, replay header): copying
 * whole frames would be done in the softirq of whoever delivers them, here the switch. */
#define SNAP 128

/* p: the captured bytes (snap of them), len: the frame's length on the wire */
static void take(Sink *k, const uint8_t *p, uint32_t snap, uint32_t len, int64_t stamp) {
    if (snap < 14 + 20 + 8 + 12) { k->other++; return; }
    if (p[12] != 0x08 || p[13] != 0x00) { k->other++; return; }
    const uint8_t *ip = p + 14;
    uint32_t ihl = (ip[0] & 0xF) * 4;
    if ((ip[0] >> 4) != 4 || ip[9] != 17 || ihl < 20 || snap < 14 + ihl + 8 + 12) {
        k->other++;
        return;
    }
    const uint8_t *udp = ip + ihl;
    if ((udp[2] << 8 | udp[3]) != ROCE_PORT) { k->other++; return; }
    uint32_t n = (uint32_t)(udp[4] << 8 | udp[5]);
    const uint8_t *bth = udp + 8;
    if (n < 8 || 14 + ihl + n > len) { k->malformed++; return; }
    n -= 8;  /* UDP payload, as a UDP socket would return it */
    Rec r = {0};
    r.stamp_ns = (uint64_t)stamp;
    r.src_ip = rd32be(ip + 12);
    r.sport = (uint16_t)(udp[0] << 8 | udp[1]);
    if (n < 32) { k->malformed++; return; }
    r.op = bth[0];
    uint32_t pad = (bth[1] >> 4) & 3;
    r.psn = rd32be(bth + 8) & 0xFFFFFF;
    r.qp = rd32be(bth + 4) & 0xFFFFFF;
    uint32_t captured = snap - 14 - ihl - 8;  /* of the UDP payload */
    if (r.op == 0x07 || r.op == 0x08) {
        if (captured < 28) { k->malformed++; return; }
        r.seq = rd32be(bth + 12);
        r.start_ns = rd64be(bth + 20);
        r.plen = n - 16 - pad;
    } else if (r.op == 0x06 || r.op == 0x0A) {
        if (n < 48 || captured < 44) { k->malformed++; return; }
        r.dma = rd32be(bth + 24);
        r.seq = rd32be(bth + 28);
        r.start_ns = rd64be(bth + 36);
        r.plen = n - 32 - pad;
    } else { k->malformed++; return; }
    fwrite(&r, sizeof r, 1, k->f);
    k->packets++;
    k->bytes += r.plen;
    k->last_ns = stamp;
}

static void write_file_atomic(const char *path, const char *text) {
    Atomic a;
    if (fputs(text, atomic_open(&a, path, "w")) < 0) die("cannot write %s", a.tmp);
    atomic_commit(&a);
}

static int cmd_recv(int argc, char **argv) {
    const char *intf = NULL, *out = NULL, *ready = NULL;
    uint64_t expect = 0;
    double idle = 0, timeout = 0;
    unsigned ring_mb = 8;
    for (int i = 0; i < argc; i++) {
        if (i + 1 >= argc) die("option %s needs a value", argv[i]);
        if (!strcmp(argv[i], "--intf")) intf = argv[++i];
        else if (!strcmp(argv[i], "--out")) out = argv[++i];
        else if (!strcmp(argv[i], "--ready")) ready = argv[++i];
        else if (!strcmp(argv[i], "--expect-bytes")) expect = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--idle-timeout")) idle = atof(argv[++i]);
        else if (!strcmp(argv[i], "--timeout")) timeout = atof(argv[++i]);
        else if (!strcmp(argv[i], "--ring-mb")) ring_mb = (unsigned)atoi(argv[++i]);
        else die("unknown recv option %s", argv[i]);
    }
    if (!intf || !out) die("%s", "recv needs --intf and --out");
    if (ring_mb < 1 || ring_mb > 1024) die("%s", "--ring-mb must be 1..1024");
    int fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
    if (fd < 0) { perror("astral-pktio: socket"); return 1; }
    int v3 = TPACKET_V3, one = 1;
    if (setsockopt(fd, SOL_PACKET, PACKET_VERSION, &v3, sizeof v3) < 0) die("%s", "no TPACKET_V3");
#ifdef PACKET_IGNORE_OUTGOING
    setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one);
#endif
    (void)one;
    struct tpacket_req3 req = {.tp_block_size = 1 << 20, .tp_block_nr = ring_mb,
                               .tp_frame_size = 1 << 11, .tp_retire_blk_tov = 10};
    req.tp_frame_nr = req.tp_block_size / req.tp_frame_size * req.tp_block_nr;
    if (setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof req) < 0) die("%s", "no RX ring");
    struct sock_filter snap[] = {{BPF_RET | BPF_K, 0, 0, SNAP}};  /* accept SNAP bytes of each */
    struct sock_fprog prog = {.len = 1, .filter = snap};
    if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) < 0)
        die("%s", "cannot attach the snap-length filter");
    size_t ring_len = (size_t)req.tp_block_size * req.tp_block_nr;
    uint8_t *ring = mmap(NULL, ring_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_LOCKED, fd, 0);
    if (ring == MAP_FAILED) ring = mmap(NULL, ring_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (ring == MAP_FAILED) die("%s", "cannot map the RX ring");
    struct sockaddr_ll sll = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL),
                              .sll_ifindex = if_nametoindex(intf)};
    if (!sll.sll_ifindex) die("no interface %s", intf);
    if (bind(fd, (struct sockaddr *)&sll, sizeof sll) < 0) die("cannot bind %s", intf);
    char recs[4096];
    snprintf(recs, sizeof recs, "%s.bin", out);  /* RECS.json.bin: what Python reads */
    Atomic rec;
    Sink k = {.f = atomic_open(&rec, recs, "wb")};
    setvbuf(k.f, NULL, _IOFBF, 1 << 20);
    uint32_t head[2] = {REC_MAGIC, VERSION};
    fwrite(head, 4, 2, k.f);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0);
    if (ready) {
        char text[256];
        snprintf(text, sizeof text, "{\"pid\": %d, \"port\": %d, \"kernel_timestamps\": true, "
                 "\"ring_bytes\": %zu}\n", getpid(), ROCE_PORT, ring_len);
        write_file_atomic(ready, text);
    }
    int64_t t_start = now_ns(CLOCK_MONOTONIC), idle_since = t_start, drain_until = 0;
    uint64_t seen = 0;
    const char *reason = "signal";
    unsigned blk = 0;
    struct pollfd pfd = {.fd = fd, .events = POLLIN | POLLERR};
    for (;;) {
        struct tpacket_block_desc *bd = (void *)(ring + (size_t)blk * req.tp_block_size);
        if (bd->hdr.bh1.block_status & TP_STATUS_USER) {
            struct tpacket3_hdr *h = (void *)((uint8_t *)bd + bd->hdr.bh1.offset_to_first_pkt);
            for (uint32_t i = 0; i < bd->hdr.bh1.num_pkts; i++) {
                int64_t stamp = (int64_t)h->tp_sec * 1000000000LL + h->tp_nsec;
                take(&k, (uint8_t *)h + h->tp_mac, h->tp_snaplen, h->tp_len, stamp);
                h = (void *)((uint8_t *)h + h->tp_next_offset);
            }
            __sync_synchronize();
            bd->hdr.bh1.block_status = TP_STATUS_KERNEL;
            blk = (blk + 1) % req.tp_block_nr;
            if (expect && k.bytes >= expect) { reason = "expect_bytes"; break; }
            continue;
        }
        int64_t now = now_ns(CLOCK_MONOTONIC);
        if (stop_flag) {  /* drain what is still coming for a bounded while, then stop */
            if (!drain_until) drain_until = now + DRAIN_NS;
            if (k.packets == seen || now > drain_until) { reason = stop_flag == SIGINT ? "SIGINT" : "SIGTERM"; break; }
        }
        if (k.packets != seen) { seen = k.packets; idle_since = now; }
        else if (k.packets && idle > 0 && now - idle_since >= (int64_t)(idle * 1e9)) { reason = "idle"; break; }
        if (timeout > 0 && now - t_start >= (int64_t)(timeout * 1e9)) { reason = "timeout"; break; }
        if (poll(&pfd, 1, 50) > 0 && (pfd.revents & (POLLERR | POLLHUP | POLLNVAL)) &&
            !if_nametoindex(intf)) {
            reason = "interface_gone";  /* the fabric was torn down under us */
            break;
        }
    }
    int64_t stopped = now_ns(CLOCK_REALTIME);
    struct tpacket_stats_v3 st = {0};
    socklen_t sl = sizeof st;
    getsockopt(fd, SOL_PACKET, PACKET_STATISTICS, &st, &sl);
    close(fd);
    atomic_commit(&rec);
    char text[1024];
    snprintf(text, sizeof text,
             "{\"stop_reason\": \"%s\", \"stopped_ns\": %lld, "
             "\"packets\": %llu, \"bytes\": %llu, \"malformed\": %llu, \"other\": %llu, "
             "\"ring_packets\": %u, \"ring_drops\": %u, \"ring_freezes\": %u, "
             "\"cpu_s\": %.6f}\n",
             reason, (long long)stopped, (unsigned long long)k.packets,
             (unsigned long long)k.bytes, (unsigned long long)k.malformed,
             (unsigned long long)k.other, st.tp_packets, st.tp_drops, st.tp_freeze_q_cnt,
             cpu_ns() / 1e9);
    write_file_atomic(out, text);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "send")) return cmd_send(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "recv")) return cmd_recv(argc - 2, argv + 2);
    fprintf(stderr, "usage: astral-pktio send --plan PLAN --out SENT (--intf IFACE | --dump FILE) "
                    "[--start-at NS]\n       astral-pktio recv --intf IFACE --out RECS.json "
                    "[--ready FILE] [--expect-bytes N] [--idle-timeout S] [--timeout S] "
                    "[--ring-mb M]\n");
    return 2;
}
