/*
 * astral-pktio: the replay's compiled sender and receiver (one process per host and role).
 *
 * Why C: the emulated fabric is one software switch sharing two cores with every traffic
 * source. A Python loop spends tens of microseconds per packet, so most of the machine went
 * to the lab's own agents instead of the switch. This helper does only the per-packet work;
 * everything that needs judgement stays in Python (traffic/native.py writes the plan and
 * reads the results, traffic/roce.py owns the frame layout).
 *
 *   astral-pktio send --plan PLAN --out SENT [--intf IFACE | --dump FRAMES] [--start-at NS]
 *   astral-pktio recv --intf IFACE --out RECS [--ready FILE] [--expect-bytes N]
 *                     [--idle-timeout S] [--timeout S] [--ring-mb M]
 *                     [--feedback-round-us R --feedback-delay-us D]
 *   astral-pktio serve [--tag TEXT]
 *   astral-pktio probe-send --dst IP --port P --sports LIST [--pps R] [--duration S] [--size N]
 *   astral-pktio probe-recv --port P --out FILE [--ready FILE] [--every S] [--duration S]
 *
 * send: frames come from templates the plan carries (one per QP, opcode and length); per
 * packet it writes the PSN word, the RETH or the replay header (message number, packet
 * index, send time) and the ICRC, then hands frames to the kernel in batches (sendmmsg on
 * an AF_PACKET socket, so the host link's qdisc still shapes them). Active QPs are served
 * round-robin, a packet each; QPs sharing a lane (same destination QP) run their work
 * requests in order with PSN and message numbers continuing. Pacing is a token bucket at
 * the plan's rate holding `burst` seconds of credit. `--dump` writes the frames to a file
 * (u32 length, bytes) instead of a socket: the unit tests compare them with Python's.
 * Every packet carries its own send time. The plan's entropy mode picks each packet's UDP
 * source port from the QP's set (traffic/hostlb.py entropy_ports): the QP's own (qp), the
 * next of the set each packet (packet: spraying), another after an idle gap (flowlet), or
 * another after `rounds` CNPs in a row from the receiver (plb; a filtered tap reads them).
 *
 * recv: a TPACKET_V3 ring on the interface (kernel timestamps, the first 128 bytes of each
 * frame), RoCEv2 frames to UDP 4791 kept as fixed 48-byte records for Python to account;
 * stops at `--expect-bytes` of payload, `--idle-timeout` seconds after the last packet,
 * `--timeout`, SIGTERM/SIGINT (after draining the ring) or when its interface is gone.
 * With --feedback-round-us it answers each QP's rounds (R us of arrivals) with an RC ACK,
 * or a CNP when at least half the round's packets had a one-way delay above D us.
 * Both modes stop when the process that started them dies. The last line of RECS.json says why, with
 * the ring's own drop count; the records are in RECS.json.bin.
 *
 * serve: a persistent agent, so a job that replays again and again does not start two
 * programs per host each time. It prints `ready` once its signal handlers are in place, then
 * reads one command per line on stdin, the arguments of a `send ...` or `recv ...` above
 * (separated by blanks), runs it in this process and answers `done RC` (what the one-shot
 * program would have exited with) or `error MESSAGE` (what it would have printed before
 * exiting) on stdout. Each command owns its sockets, ring, files and memory and gives them
 * all back when it ends or fails, so nothing of one reaches the next. SIGUSR1 stops the
 * command in flight as SIGTERM stops a one-shot one (a receiver drains, both write their
 * reports) and the agent waits for the next; SIGTERM, SIGINT or the end of stdin ends the
 * agent once the command in flight has stopped. `--tag` only names the process (a cluster
 * signals an agent on another server by it).
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
#include <setjmp.h>
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
#include <netinet/in.h>
#include <zlib.h>

#define PLAN_MAGIC 0x534b5041u   /* "APKS" little-endian */
#define SENT_MAGIC 0x524b5041u   /* "APKR" */
#define REC_MAGIC 0x434b5041u    /* "APKC" */
#define VERSION 3u
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
#define QP_SPORT_BASE 49152      /* vocab/flows.py: QP source ports are 49152 + 0..16383 */
#define QP_SPORTS 16384
#define OP_ACK 0x11              /* RC ACKNOWLEDGE: BTH + AETH (the round was fine) */
#define OP_CNP 0x81              /* congestion notification: BTH + 16 reserved bytes */

/* how a sender picks each packet's UDP source port (vocab.flows.ENTROPY_MODES) */
enum { E_QP, E_PACKET, E_FLOWLET, E_PLB };

static volatile sig_atomic_t stop_flag;  /* the command in flight stops (the signal's number) */
static volatile sig_atomic_t quit_flag;  /* serve: the agent ends after the command in flight */
static void on_signal(int sig) { stop_flag = sig; }
static void on_serve_signal(int sig) {
    stop_flag = sig;
    if (sig != SIGUSR1) quit_flag = 1;
}

/* In serve mode a failing command comes back to the agent's loop (with its message) instead
 * of ending the process; one-shot mode prints the message and exits, as it always has. */
static int serving;
static jmp_buf failed;
static char fail_msg[600];
static int64_t cpu_base;  /* CPU time used before the command in flight (serve mode) */

__attribute__((noreturn)) static void fail(int rc, const char *fmt, const char *arg) {
    if (serving) {
        snprintf(fail_msg, sizeof fail_msg, fmt, arg);
        longjmp(failed, rc);
    }
    fprintf(stderr, "astral-pktio: ");
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
    exit(rc);
}

__attribute__((noreturn)) static void die(const char *fmt, const char *arg) { fail(2, fmt, arg); }

/* An allocation that failed (a plan this big can only be a corrupt one): the command fails
 * with a message instead of the process crashing. */
static void *checked(void *p, const char *what) {
    if (!p) die("out of memory (%s)", what);
    return p;
}

/* The sockets and memory the command in flight holds besides its plan and files: given back
 * by release() whether it ends or fails (one-shot mode exits holding them, as before). */
static int held_fd[4] = {-1, -1, -1, -1};
static void *held_mem[4];
static void *held_ring;
static size_t held_ring_len;
static FILE *held_dump;

static int hold_fd(int fd) {
    for (int i = 0; fd >= 0 && i < 4; i++)
        if (held_fd[i] < 0) { held_fd[i] = fd; break; }
    return fd;
}

static void drop_fd(int fd) {
    if (fd < 0) return;
    for (int i = 0; i < 4; i++)
        if (held_fd[i] == fd) held_fd[i] = -1;
    close(fd);
}

static void *hold_mem(void *p) {
    for (int i = 0; p && i < 4; i++)
        if (!held_mem[i]) { held_mem[i] = p; break; }
    return p;
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
static uint32_t rd24be(const uint8_t *p) { return (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2]; }

/* The ICRC's masked pseudo-header (roce._invariant_prefix): 8 bytes of ones, then IP, UDP
 * and the BTH's first 8 bytes with the fields switches may rewrite set to ones. */
static uLong prefix_crc(const uint8_t *frame) {
    uint8_t m[44];
    memset(m, 0xFF, 8);
    memcpy(m + 8, frame + 14, 36);
    m[8 + 1] = 0xFF;                    /* TOS */
    m[8 + 8] = 0xFF;                    /* TTL */
    m[8 + 10] = m[8 + 11] = 0xFF;       /* IP checksum */
    m[8 + 26] = m[8 + 27] = 0xFF;       /* UDP checksum */
    m[8 + 32] = 0xFF;                   /* BTH FECN/BECN/reserved */
    return crc32(0, m, sizeof m);
}

/* An output file written under PATH.tmp and renamed into place when complete, so a reader
 * never sees half of one (the Python side reads these as soon as they exist). The slots are
 * the command's: one that fails leaves no .tmp behind in serve mode. */
typedef struct { FILE *f; char path[4096], tmp[4112]; } Atomic;
static Atomic atomics[4];

static Atomic *atomic_open(const char *path, const char *mode) {
    Atomic *a = NULL;
    for (int i = 0; !a && i < 4; i++)  /* a command has at most two open at once */
        if (!atomics[i].f) a = &atomics[i];
    if (!a) die("too many files open to write %s", path);
    snprintf(a->path, sizeof a->path, "%s", path);
    snprintf(a->tmp, sizeof a->tmp, "%s.tmp", a->path);
    a->f = fopen(a->tmp, mode);
    if (!a->f) die("cannot write %s", a->tmp);
    return a;
}

static void atomic_commit(Atomic *a) {
    FILE *f = a->f;
    a->f = NULL;
    if (fclose(f) != 0 || rename(a->tmp, a->path) != 0) die("cannot write %s", a->path);
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

/* A lane (one destination QP): where its entropy stands and what feedback it had. */
typedef struct {
    uint32_t k, cong, moves, acks, cnps, moved, move_psn, next_psn, ip, qp;
    uint64_t pkts, rng;
    int64_t last_ns, first_move_ns;
} Lane;

typedef struct {
    uint32_t pmtu, overhead, nkinds, nplans, njobs, nlanes;
    uint32_t mode, entropies, stride, rounds;
    double rate_bps, burst_s, gap_s;
    Kind *kinds;
    Plan *plans;
    Job *jobs;
    Lane *lanes;
    uint32_t *lane_hash, hash_mask;  /* (destination IP, QP) -> lane + 1, open addressing */
} Spec;

static uint32_t lane_slot(const Spec *s, uint32_t ip, uint32_t qp) {
    return ((ip * 2654435761u) ^ (qp * 40503u)) & s->hash_mask;
}

static Lane *find_lane(Spec *s, uint32_t ip, uint32_t qp) {
    for (uint32_t h = lane_slot(s, ip, qp);; h = (h + 1) & s->hash_mask) {
        uint32_t v = s->lane_hash[h];
        if (!v) return NULL;
        Lane *l = &s->lanes[v - 1];
        if (l->ip == ip && l->qp == qp) return l;
    }
}

/* The plan being read, and the plan of the command in flight (both given back by release). */
static FILE *plan_file;
static Spec spec;

static void free_spec(Spec *s) {
    for (uint32_t i = 0; s->kinds && i < s->nkinds; i++) free(s->kinds[i].buf);
    for (uint32_t i = 0; s->plans && i < s->nplans; i++) free(s->plans[i].kinds);
    for (uint32_t i = 0; s->jobs && i < s->njobs; i++) {
        free(s->jobs[i].runs);
        free(s->jobs[i].starts);
    }
    free(s->kinds);
    free(s->plans);
    free(s->jobs);
    free(s->lanes);
    free(s->lane_hash);
    memset(s, 0, sizeof *s);
}

static void rd(FILE *f, void *p, size_t n, const char *path) {
    if (fread(p, 1, n, f) != n) die("truncated plan file %s", path);
}

static uint32_t rd32(FILE *f, const char *path) { uint32_t v; rd(f, &v, 4, path); return v; }

static void load_plan(const char *path, Spec *s) {
    FILE *f = plan_file = fopen(path, "rb");
    if (!f) die("cannot open plan %s", path);
    if (rd32(f, path) != PLAN_MAGIC || rd32(f, path) != VERSION) die("%s is not a plan", path);
    s->pmtu = rd32(f, path);
    s->overhead = rd32(f, path);
    rd(f, &s->rate_bps, 8, path);
    rd(f, &s->burst_s, 8, path);
    s->nkinds = rd32(f, path);
    s->nplans = rd32(f, path);
    s->njobs = rd32(f, path);
    s->mode = rd32(f, path);
    s->entropies = rd32(f, path);
    rd(f, &s->gap_s, 8, path);
    s->rounds = rd32(f, path);
    (void)rd32(f, path);
    if (s->mode > E_PLB || s->entropies < 1 || s->entropies > QP_SPORTS || s->rounds < 1)
        die("bad entropy settings in %s", path);
    s->stride = QP_SPORTS / s->entropies;
    s->kinds = checked(calloc(s->nkinds ? s->nkinds : 1, sizeof(Kind)), path);
    s->plans = checked(calloc(s->nplans ? s->nplans : 1, sizeof(Plan)), path);
    s->jobs = checked(calloc(s->njobs ? s->njobs : 1, sizeof(Job)), path);
    for (uint32_t i = 0; i < s->nkinds; i++) {
        Kind *k = &s->kinds[i];
        k->len = rd32(f, path);
        k->reth = rd32(f, path);
        k->ack = rd32(f, path);
        k->crc0 = rd32(f, path);
        k->hdr_end = k->reth ? HDR_END_RETH : HDR_END_PLAIN;
        if (k->len > MAX_FRAME || k->len < k->hdr_end + 4) die("bad frame length in %s", path);
        k->buf = checked(malloc(k->len), path);
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
        p->kinds = checked(malloc(sizeof(uint32_t) * (p->nframes ? p->nframes : 1)), path);
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
        j->runs = checked(malloc(sizeof(Run) * (j->nruns ? j->nruns : 1)), path);
        rd(f, j->runs, sizeof(Run) * j->nruns, path);
        for (uint32_t r = 0; r < j->nruns; r++)
            if (j->runs[r].plan >= s->nplans) die("bad plan index in %s", path);
        if (j->lane >= 65536) die("too many lanes in %s", path);
        j->next = -1;
        if (last_of_lane[j->lane] >= 0) s->jobs[last_of_lane[j->lane]].next = (int)i;
        last_of_lane[j->lane] = (int)i;
        if (j->lane + 1 > s->nlanes) s->nlanes = j->lane + 1;
    }
    fclose(f);
    plan_file = NULL;
    s->lanes = checked(calloc(s->nlanes ? s->nlanes : 1, sizeof(Lane)), path);
    uint32_t size = 2;
    while (size < 2 * s->nlanes) size <<= 1;
    s->hash_mask = size - 1;
    s->lane_hash = checked(calloc(size, sizeof(uint32_t)), path);
    for (uint32_t i = 0; i < s->njobs; i++) {
        Job *j = &s->jobs[i];
        Lane *l = &s->lanes[j->lane];
        if (l->rng || !j->nruns || !s->plans[j->runs[0].plan].nframes) continue;
        const uint8_t *b = s->kinds[s->plans[j->runs[0].plan].kinds[0]].buf;
        l->ip = rd32be(b + 30);
        l->qp = rd24be(b + 47);
        l->rng = 0x9E3779B97F4A7C15ull ^ ((uint64_t)l->ip << 24 | l->qp);
        uint32_t h = lane_slot(s, l->ip, l->qp);
        while (s->lane_hash[h]) h = (h + 1) & s->hash_mask;
        s->lane_hash[h] = j->lane + 1;
    }
}

/* Another of the lane's entropy values, at random: the flowlet and plb modes' re-path. */
static void move_lane(Spec *s, Lane *l) {
    l->rng ^= l->rng << 13; l->rng ^= l->rng >> 7; l->rng ^= l->rng << 17;
    if (s->entropies > 1) l->k = (l->k + 1 + (uint32_t)(l->rng % (s->entropies - 1))) % s->entropies;
    l->moves++;
    l->cong = 0;
    l->moved = 1;
    l->move_psn = l->next_psn;
    if (!l->first_move_ns) l->first_move_ns = now_ns(CLOCK_REALTIME);
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
        if (r < 0 && errno != ENOBUFS && errno != EAGAIN && errno != EINTR)
            fail(1, "sendmmsg: %s", strerror(errno));
        /* the interface queue is full: wait like a NIC's send queue back-pressures */
        int64_t t = now_ns(CLOCK_MONOTONIC);
        if (!give_up) give_up = t + RETRY_GIVE_UP_NS;
        else if (t > give_up) fail(1, "%s", "send queue stuck");
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
    int64_t t = now_ns(CLOCK_REALTIME);  /* each packet carries its own send time */
    if (j->frame == 0) j->t_ns = t;      /* the message's: its first packet's */
    memcpy(b, k->buf, k->len);
    be32(b + OFF_PSN, j->psn | k->ack);
    if (k->reth) {
        be64(b + 54, j->va + (uint64_t)j->seq * p->size);
        be32(b + 62, j->rkey);
        be32(b + 66, p->size);
        be32(b + 70, j->seq);
        be32(b + 74, j->frame);
        be64(b + 78, (uint64_t)t);
    } else {
        be32(b + 54, j->seq);
        be32(b + 58, j->frame);
        be64(b + 62, (uint64_t)t);
    }
    Lane *l = &s->lanes[j->lane];
    if (s->mode == E_PACKET) {
        l->k = (uint32_t)(l->pkts % s->entropies);
    } else if (s->mode == E_FLOWLET) {
        int64_t m = now_ns(CLOCK_MONOTONIC);
        if (l->pkts && (double)(m - l->last_ns) >= s->gap_s * 1e9) move_lane(s, l);
        l->last_ns = m;
    }
    l->pkts++;
    uLong crc0 = k->crc0;
    if (l->k) {  /* another entropy value of this QP's set: the ICRC's prefix changes too */
        uint32_t base = (uint32_t)(b[34] << 8 | b[35]) - QP_SPORT_BASE;
        uint32_t port = QP_SPORT_BASE + (base + l->k * s->stride) % QP_SPORTS;
        b[34] = (uint8_t)(port >> 8);
        b[35] = (uint8_t)port;
        crc0 = prefix_crc(b);
    }
    uLong c = crc32(crc0, b + OFF_PSN, k->hdr_end - OFF_PSN);
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
    l->next_psn = j->psn;
    if (++j->frame == p->nframes) {  /* the message's last frame */
        j->frame = 0;
        if (j->nstarts == j->cap) {
            uint32_t cap = j->cap ? 2 * j->cap : 16;
            int64_t *more = realloc(j->starts, sizeof(int64_t) * cap);
            if (!more) die("%s", "out of memory for the messages' start times");
            j->starts = more;
            j->cap = cap;
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

/* A socket that sees only RoCE ACKs and CNPs arriving on `intf` (classic BPF on the
 * Ethernet frame: UDP 4791, BTH opcode ACKNOWLEDGE or CNP), for the plb mode's feedback. */
static int feedback_socket(const char *intf) {
    /* ETH_P_ALL: a tap sees frames before the host's ingress hook, which drops RoCE during
     * a replay (a socket for ETH_P_IP alone would be handed them after it) */
    int fd = hold_fd(socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK, htons(ETH_P_ALL)));
    if (fd < 0) fail(1, "feedback socket: %s", strerror(errno));
    struct sock_filter code[] = {
        {BPF_LD | BPF_H | BPF_ABS, 0, 0, 12}, {BPF_JMP | BPF_JEQ | BPF_K, 0, 8, 0x0800},
        {BPF_LD | BPF_B | BPF_ABS, 0, 0, 23}, {BPF_JMP | BPF_JEQ | BPF_K, 0, 6, 17},
        {BPF_LD | BPF_H | BPF_ABS, 0, 0, 36}, {BPF_JMP | BPF_JEQ | BPF_K, 0, 4, ROCE_PORT},
        {BPF_LD | BPF_B | BPF_ABS, 0, 0, 42}, {BPF_JMP | BPF_JEQ | BPF_K, 1, 0, OP_ACK},
        {BPF_JMP | BPF_JEQ | BPF_K, 0, 1, OP_CNP},
        {BPF_RET | BPF_K, 0, 0, 64}, {BPF_RET | BPF_K, 0, 0, 0},
    };
    struct sock_fprog prog = {.len = sizeof code / sizeof code[0], .filter = code};
    if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) < 0)
        die("%s", "cannot attach the feedback filter");
#ifdef PACKET_IGNORE_OUTGOING
    int one = 1;
    setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one);
#endif
    struct sockaddr_ll sll = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL),
                              .sll_ifindex = if_nametoindex(intf)};
    if (bind(fd, (struct sockaddr *)&sll, sizeof sll) < 0) die("cannot bind %s", intf);
    return fd;
}

/* Read every ACK/CNP waiting: a CNP counts a congested round, an ACK ends a congested run;
 * `rounds` CNPs in a row re-draw the lane's entropy. Feedback about packets sent before the
 * lane's last move is about the old path and is ignored. */
static void take_feedback(Spec *s, int fd) {
    uint8_t b[64];
    ssize_t n;
    while ((n = recv(fd, b, sizeof b, MSG_DONTWAIT)) >= 54) {
        Lane *l = find_lane(s, rd32be(b + 26), rd24be(b + 47));
        if (!l) continue;
        uint32_t psn = rd24be(b + 51);
        if (l->moved && ((l->move_psn - psn - 1) & 0xFFFFFF) < (1u << 23)) continue;
        if (b[42] == OP_ACK) { l->acks++; l->cong = 0; continue; }
        l->cnps++;
        if (++l->cong >= s->rounds) move_lane(s, l);
    }
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
    Atomic *out = atomic_open(path, "wb");
    FILE *f = out->f;
    uint32_t head[4] = {SENT_MAGIC, VERSION, s->njobs, (uint32_t)interrupted};
    fwrite(head, 4, 4, f);
    fwrite(&started, 8, 1, f);
    fwrite(&finished, 8, 1, f);
    fwrite(&retries, 8, 1, f);
    int64_t cpu = cpu_ns() - cpu_base;
    fwrite(&cpu, 8, 1, f);
    for (uint32_t i = 0; i < s->njobs; i++) {
        Job *j = &s->jobs[i];
        uint32_t v[5] = {j->first_seq, j->first_psn, j->psn, j->done, j->nstarts};
        fwrite(v, 4, 5, f);
        fwrite(&j->end_ns, 8, 1, f);
        Lane *l = &s->lanes[j->lane];  /* the lane's entropy moves and feedback */
        uint32_t e[4] = {l->moves, l->acks, l->cnps, 0};
        fwrite(e, 4, 4, f);
        fwrite(&l->first_move_ns, 8, 1, f);
        fwrite(j->starts, 8, j->nstarts, f);
    }
    atomic_commit(out);
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
    Spec *s = &spec;
    load_plan(plan, s);
    static Out o;  /* big (a batch of frames): not on the stack */
    o.fd = -1;  /* what the last command left in it is not this one's */
    o.dump = NULL;
    o.n = 0;
    o.retries = 0;
    int fb = -1;
    if (dump) {
        o.dump = held_dump = fopen(dump, "wb");
        if (!o.dump) die("cannot write %s", dump);
    } else {
        if (s->mode == E_PLB) fb = feedback_socket(intf);
        o.fd = hold_fd(socket(AF_PACKET, SOCK_RAW, 0));
        if (o.fd < 0) fail(1, "socket: %s", strerror(errno));
        struct sockaddr_ll sll = {.sll_family = AF_PACKET, .sll_ifindex = if_nametoindex(intf)};
        if (!sll.sll_ifindex) die("no interface %s", intf);
        if (bind(o.fd, (struct sockaddr *)&sll, sizeof sll) < 0) die("cannot bind %s", intf);
        struct ifreq ifr = {0};
        snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", intf);
        uint32_t need = 0;
        for (uint32_t i = 0; i < s->nkinds; i++)
            if (s->kinds[i].len - 14 > need) need = s->kinds[i].len - 14;
        if (ioctl(o.fd, SIOCGIFMTU, &ifr) == 0 && (uint32_t)ifr.ifr_mtu < need) {
            char why[600];
            snprintf(why, sizeof why, "pmtu %u needs an MTU of >= %u on %s (it has %d); "
                     "use a smaller pmtu or raise the MTU", s->pmtu, need, intf, ifr.ifr_mtu);
            fail(2, "%s", why);
        }
        for (int i = 0; i < BATCH; i++) {
            o.iov[i].iov_base = o.bufs[i];
            o.msgs[i].msg_hdr.msg_iov = &o.iov[i];
            o.msgs[i].msg_hdr.msg_iovlen = 1;
        }
    }
    prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0);
    if (!serving) {  /* an agent set its own handlers once */
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
        prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0);  /* the replay that started us is gone: stop */
    }
    double spb = s->rate_bps > 0 ? 8e9 / s->rate_bps : 0.0;  /* ns per byte */
    int64_t burst = (int64_t)(s->burst_s * 1e9);
    if (start_at) sleep_until(CLOCK_REALTIME, start_at);
    int64_t started = now_ns(CLOCK_REALTIME);
    int64_t t0 = now_ns(CLOCK_MONOTONIC) - (start_at ? started - start_at : 0);
    /* lane heads wait for their start offset; later jobs of a lane wait for the head */
    int *pending = hold_mem(checked(malloc(sizeof(int) * (s->njobs + 1)), plan));
    int *active = hold_mem(checked(malloc(sizeof(int) * (s->njobs + 1)), plan));
    char *is_head = hold_mem(checked(calloc(s->njobs + 1, 1), plan));
    for (uint32_t i = 0; i < s->njobs; i++) is_head[i] = 1;
    for (uint32_t i = 0; i < s->njobs; i++)
        if (s->jobs[i].next >= 0) is_head[s->jobs[i].next] = 0;
    int np = 0, na = 0;
    for (uint32_t i = 0; i < s->njobs; i++)
        if (is_head[i]) { s->jobs[i].due = t0 + (int64_t)(s->jobs[i].start * 1e9); pending[np++] = (int)i; }
    double t_next = (double)now_ns(CLOCK_MONOTONIC);
    int interrupted = 0;
    while ((na || np) && !interrupted) {
        if (np) {  /* admit every job whose time has come */
            int64_t now = now_ns(CLOCK_MONOTONIC), soonest = INT64_MAX;
            int kept = 0;  /* admitted in the order they became pending, the rest kept */
            for (int i = 0; i < np; i++) {
                Job *j = &s->jobs[pending[i]];
                if (j->due > now) {
                    if (j->due < soonest) soonest = j->due;
                    pending[kept++] = pending[i];
                    continue;
                }
                begin(j);
                if (j->active) active[na++] = pending[i];
                else if (j->next >= 0) {  /* an empty work request: pass its place on */
                    Job *n = &s->jobs[j->next];
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
            Job *j = &s->jobs[active[a]];
            if (j->done) continue;
            uint32_t len = produce(s, j, &o);
            finished |= j->done;
            if (spb > 0) {
                t_next += (len + s->overhead) * spb;
                double d = t_next - (double)now_ns(CLOCK_MONOTONIC);
                if (d > MIN_SLEEP_NS) {
                    flush(&o);
                    if (fb >= 0) take_feedback(s, fb);
                    sleep_until(CLOCK_MONOTONIC, (int64_t)t_next);
                } else if (d < -burst) {
                    t_next -= d + burst;  /* idle or late: give back at most one bucket */
                }
            }
            if (o.n == BATCH) flush(&o);
            if (stop_flag) { interrupted = 1; break; }
        }
        flush(&o);
        if (fb >= 0) take_feedback(s, fb);
        if (finished) {
            int k = 0;
            int64_t now = now_ns(CLOCK_MONOTONIC);
            for (int a = 0; a < na; a++) {
                Job *j = &s->jobs[active[a]];
                if (!j->done) { active[k++] = active[a]; continue; }
                if (j->next >= 0) {  /* the QP's next work request: PSN and numbers continue */
                    Job *n = &s->jobs[j->next];
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
    if (fb >= 0) { take_feedback(s, fb); drop_fd(fb); }
    int64_t finished_ns = now_ns(CLOCK_REALTIME);
    if (o.dump) {
        held_dump = NULL;
        fclose(o.dump);
    } else {
        drop_fd(o.fd);
    }
    write_sent(out, s, started, finished_ns, o.retries, interrupted);
    return 0;
}

/* --- receive ------------------------------------------------------------------------------- */
typedef struct __attribute__((packed)) {
    uint64_t stamp_ns, start_ns;
    uint32_t src_ip, psn, seq, plen, dma, qp;
    uint16_t sport;
    uint8_t op, bad;              /* bad: REC_BAD_* of a frame a NIC would drop */
    uint8_t ttl, pad2[3];         /* ttl: the lane mark (vocab/lanemark.py) */
} Rec;
_Static_assert(sizeof(Rec) == 48, "record layout is shared with traffic/native.py");

/* A frame that fails a check a RoCE NIC makes is recorded with these bits set and counted
 * apart (the reader folds it as lost, not as data): the IPv4 header checksum, always; the
 * ICRC, when the whole frame is in the snap (small frames: probes, feedback, short writes). */
#define REC_BAD_IP 1u
#define REC_BAD_ICRC 2u

/* The plb mode's receiver side: per QP, the current round (it began at `start`, lasts
 * `round_ns`: about one RTT, as PLB's rounds do), its packets and how many of them queued
 * (one-way delay above `delay_ns`). */
#define FB_SLOTS 65536
typedef struct { uint32_t ip, qp, n, cong, used; int64_t start; } FbQp;

typedef struct {
    FILE *f;
    uint64_t packets, bytes, malformed, other, feedback_in, acks, cnps;
    uint64_t bad_ip, bad_icrc;    /* frames that failed the header checksum / the ICRC */
    int64_t last_ns;
    int fb_fd;                    /* -1: no feedback */
    int64_t fb_round_ns, fb_delay_ns;
    FbQp *fb;
} Sink;

/* Answer the round that just ended on this QP: a CNP when at least half of its packets
 * queued, an RC ACKNOWLEDGE otherwise. Addresses are the data packet's, reversed; the
 * frame goes out through the host's queue and the fabric like any other. */
static void send_feedback(Sink *k, const uint8_t *p, const uint8_t *ip, const uint8_t *bth,
                          uint32_t seq, int congested) {
    uint8_t f[80] = {0};
    uint32_t len = congested ? 74 : 62;
    memcpy(f, p + 6, 6);
    memcpy(f + 6, p, 6);
    f[12] = 0x08;
    uint8_t *h = f + 14;
    h[0] = 0x45;
    h[1] = ip[1] & 0xFC;          /* the data's DSCP, no ECN */
    h[2] = (uint8_t)((len - 14) >> 8); h[3] = (uint8_t)(len - 14);
    h[6] = 0x40;                  /* DF */
    h[8] = 64;
    h[9] = 17;
    memcpy(h + 12, ip + 16, 4);
    memcpy(h + 16, ip + 12, 4);
    uint32_t sum = 0;
    for (int i = 0; i < 20; i += 2) sum += (uint32_t)(h[i] << 8 | h[i + 1]);
    while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
    h[10] = (uint8_t)(~sum >> 8); h[11] = (uint8_t)~sum;
    uint8_t *u = f + 34;
    memcpy(u, ip + 20, 2);        /* the data's source port */
    u[2] = ROCE_PORT >> 8; u[3] = ROCE_PORT & 0xFF;
    u[4] = (uint8_t)((len - 34) >> 8); u[5] = (uint8_t)(len - 34);
    uint8_t *t = f + 42;
    t[0] = congested ? OP_CNP : OP_ACK;
    t[2] = t[3] = 0xFF;           /* default P_Key */
    t[4] = congested ? 0x40 : 0;  /* BECN on a CNP */
    memcpy(t + 5, bth + 5, 3);    /* the data's destination QP */
    memcpy(t + 9, bth + 9, 3);    /* the last PSN of the round */
    if (!congested) {             /* AETH: syndrome ACK (credits not used), MSN */
        t[12] = 0x1F;
        t[13] = (uint8_t)(seq >> 16); t[14] = (uint8_t)(seq >> 8); t[15] = (uint8_t)seq;
    }
    uint32_t icrc = (uint32_t)crc32(prefix_crc(f), f + OFF_PSN, len - 4 - OFF_PSN);
    memcpy(f + len - 4, &icrc, 4);
    if (send(k->fb_fd, f, len, MSG_DONTWAIT) == (ssize_t)len) {
        if (congested) k->cnps++;
        else k->acks++;
    }
}

static void count_round(Sink *k, const uint8_t *p, const uint8_t *ip, const uint8_t *bth,
                        const void *rec);

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
    uint32_t sum = 0;             /* ones' complement over the header: 0xFFFF when intact */
    for (uint32_t i = 0; i < ihl; i += 2) sum += (uint32_t)(ip[i] << 8 | ip[i + 1]);
    while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
    uint8_t bad = sum == 0xFFFF ? 0 : REC_BAD_IP;
    uint32_t n = (uint32_t)(udp[4] << 8 | udp[5]);
    const uint8_t *bth = udp + 8;
    if (n < 8 || 14 + ihl + n > len) { k->malformed++; return; }
    if (n >= 20 && (bth[0] == OP_ACK || bth[0] == OP_CNP)) { k->feedback_in++; return; }
    if (ihl == 20 && len <= snap && len >= OFF_PSN + 4) {
        uint32_t want;
        memcpy(&want, p + len - 4, 4);
        if ((uint32_t)crc32(prefix_crc(p), p + OFF_PSN, len - 4 - OFF_PSN) != want)
            bad |= REC_BAD_ICRC;
    }
    n -= 8;  /* UDP payload, as a UDP socket would return it */
    Rec r = {0};
    r.bad = bad;
    r.stamp_ns = (uint64_t)stamp;
    r.src_ip = rd32be(ip + 12);
    r.ttl = ip[8];
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
    if (bad) {                    /* dropped, as a NIC drops it: no data, no feedback */
        k->bad_ip += (bad & REC_BAD_IP) != 0;
        k->bad_icrc += (bad & REC_BAD_ICRC) != 0;
        return;
    }
    k->packets++;
    k->bytes += r.plen;
    k->last_ns = stamp;
    if (k->fb_fd >= 0 && ihl == 20) count_round(k, p, ip, bth, &r);
}

static void count_round(Sink *k, const uint8_t *p, const uint8_t *ip, const uint8_t *bth,
                        const void *rec) {
    const Rec *r = rec;
    uint32_t h = ((r->src_ip * 2654435761u) ^ (r->qp * 40503u)) & (FB_SLOTS - 1);
    for (uint32_t probe = 0; probe < FB_SLOTS; probe++, h = (h + 1) & (FB_SLOTS - 1)) {
        FbQp *q = &k->fb[h];
        if (!q->used) { q->used = 1; q->ip = r->src_ip; q->qp = r->qp; }
        else if (q->ip != r->src_ip || q->qp != r->qp) continue;
        if (!q->n) q->start = (int64_t)r->stamp_ns;
        q->cong += (int64_t)(r->stamp_ns - r->start_ns) > k->fb_delay_ns;
        q->n++;
        if ((int64_t)r->stamp_ns - q->start >= k->fb_round_ns) {  /* the round is over */
            send_feedback(k, p, ip, bth, r->seq & 0xFFFFFF, 2 * q->cong >= q->n);
            q->n = q->cong = 0;
        }
        return;
    }
}

static void write_file_atomic(const char *path, const char *text) {
    Atomic *a = atomic_open(path, "w");
    if (fputs(text, a->f) < 0) die("cannot write %s", a->tmp);
    atomic_commit(a);
}

static int cmd_recv(int argc, char **argv) {
    const char *intf = NULL, *out = NULL, *ready = NULL;
    uint64_t expect = 0;
    double idle = 0, timeout = 0;
    unsigned ring_mb = 8;
    double fb_round_us = 0, fb_delay_us = 0;
    for (int i = 0; i < argc; i++) {
        if (i + 1 >= argc) die("option %s needs a value", argv[i]);
        if (!strcmp(argv[i], "--intf")) intf = argv[++i];
        else if (!strcmp(argv[i], "--out")) out = argv[++i];
        else if (!strcmp(argv[i], "--ready")) ready = argv[++i];
        else if (!strcmp(argv[i], "--expect-bytes")) expect = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--idle-timeout")) idle = atof(argv[++i]);
        else if (!strcmp(argv[i], "--timeout")) timeout = atof(argv[++i]);
        else if (!strcmp(argv[i], "--ring-mb")) ring_mb = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--feedback-round-us")) fb_round_us = atof(argv[++i]);
        else if (!strcmp(argv[i], "--feedback-delay-us")) fb_delay_us = atof(argv[++i]);
        else die("unknown recv option %s", argv[i]);
    }
    if (!intf || !out) die("%s", "recv needs --intf and --out");
    if (ring_mb < 1 || ring_mb > 1024) die("%s", "--ring-mb must be 1..1024");
    if (fb_round_us < 0 || fb_delay_us < 0)
        die("%s", "--feedback-round-us and --feedback-delay-us must be >= 0");
    int fd = hold_fd(socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL)));
    if (fd < 0) fail(1, "socket: %s", strerror(errno));
    int v3 = TPACKET_V3, one = 1;
    if (setsockopt(fd, SOL_PACKET, PACKET_VERSION, &v3, sizeof v3) < 0) die("%s", "no TPACKET_V3");
#ifdef PACKET_IGNORE_OUTGOING
    setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one);
#endif
    (void)one;
    /* The kernel hands a block over when it is full or 10 ms old, and drops frames once every
     * block waits for us: at low rates that is after blocks x 10 ms of not being scheduled
     * whatever their size, so the ring is many small blocks, not a few big ones. */
    struct tpacket_req3 req = {.tp_block_size = 1 << 16, .tp_block_nr = ring_mb << 4,
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
    held_ring = ring;
    held_ring_len = ring_len;
    struct sockaddr_ll sll = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL),
                              .sll_ifindex = if_nametoindex(intf)};
    if (!sll.sll_ifindex) die("no interface %s", intf);
    if (bind(fd, (struct sockaddr *)&sll, sizeof sll) < 0) die("cannot bind %s", intf);
    char recs[4096];
    snprintf(recs, sizeof recs, "%s.bin", out);  /* RECS.json.bin: what Python reads */
    Atomic *rec = atomic_open(recs, "wb");
    Sink k = {.f = rec->f, .fb_fd = -1,
              .fb_round_ns = (int64_t)(fb_round_us * 1e3), .fb_delay_ns = (int64_t)(fb_delay_us * 1e3)};
    if (fb_round_us > 0) {  /* plb: answer rounds of packets with ACK/CNP frames */
        k.fb = hold_mem(checked(calloc(FB_SLOTS, sizeof(FbQp)), "feedback rounds"));
        k.fb_fd = hold_fd(socket(AF_PACKET, SOCK_RAW, 0));
        struct sockaddr_ll out = {.sll_family = AF_PACKET, .sll_ifindex = sll.sll_ifindex};
        if (k.fb_fd < 0 || bind(k.fb_fd, (struct sockaddr *)&out, sizeof out) < 0)
            die("cannot open a feedback socket on %s", intf);
    }
    setvbuf(k.f, NULL, _IOFBF, 1 << 20);
    uint32_t head[2] = {REC_MAGIC, VERSION};
    fwrite(head, 4, 2, k.f);
    if (!serving) {  /* an agent set its own handlers once */
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
        prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0);
    }
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
            if (k.packets == seen || now > drain_until) {
                reason = stop_flag == SIGINT ? "SIGINT" : stop_flag == SIGUSR1 ? "SIGUSR1" : "SIGTERM";
                break;
            }
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
    munmap(ring, ring_len);  /* the mapping would keep the socket, and its ring, alive */
    held_ring = NULL;
    drop_fd(fd);
    drop_fd(k.fb_fd);
    atomic_commit(rec);
    char text[1024];
    snprintf(text, sizeof text,
             "{\"stop_reason\": \"%s\", \"stopped_ns\": %lld, "
             "\"packets\": %llu, \"bytes\": %llu, \"malformed\": %llu, \"other\": %llu, "
             "\"bad_ip_checksum\": %llu, \"bad_icrc\": %llu, "
             "\"ring_packets\": %u, \"ring_drops\": %u, \"ring_freezes\": %u, "
             "\"feedback\": {\"acks_sent\": %llu, \"cnps_sent\": %llu, \"seen\": %llu}, "
             "\"cpu_s\": %.6f}\n",
             reason, (long long)stopped, (unsigned long long)k.packets,
             (unsigned long long)k.bytes, (unsigned long long)k.malformed,
             (unsigned long long)k.other, (unsigned long long)k.bad_ip,
             (unsigned long long)k.bad_icrc, st.tp_packets, st.tp_drops, st.tp_freeze_q_cnt,
             (unsigned long long)k.acks, (unsigned long long)k.cnps,
             (unsigned long long)k.feedback_in, (cpu_ns() - cpu_base) / 1e9);
    write_file_atomic(out, text);
    return 0;
}

/* --- probe streams -------------------------------------------------------------------------- */
/* The steady probe streams of testbed/shell/probe.py, compiled: the same datagrams (sequence
 * number, send time, due time: "!Idd"), the same per-source-port accounting and the same JSON,
 * at a small fraction of the CPU (the Python receiver is the reference; a unit test runs both
 * on one stream). Plain UDP sockets: the kernel builds and checks the headers, and a frame it
 * dropped as corrupt is counted in the namespace's InHdrErrors, which the report carries. */
#define PROBE_HDR 20             /* u32 sequence number, f64 send time, f64 due time */
#define PROBE_TAIL_ROUNDS 4      /* probe.TAIL_ROUNDS */
#define PROBE_BATCH 64
#define PROBE_MAX_SPORTS 1024

typedef struct {
    uint64_t received, reordered;
    uint32_t first_seq, max_seq;
    double first, last, late, max_gap, gap_at, stall, latency_sum;
    int has_gap;
    uint32_t marks[256];
} ProbeFlow;

static double rd_f64be(const uint8_t *p) {
    uint64_t v = rd64be(p);
    double d;
    memcpy(&d, &v, sizeof d);
    return d;
}

static void wr_f64be(uint8_t *p, double d) {
    uint64_t v;
    memcpy(&v, &d, sizeof v);
    be64(p, v);
}

/* probe.arrive: fold one datagram into its source port's record */
static void probe_arrive(ProbeFlow *f, uint32_t seq, double sent, double due, double now, int ttl) {
    double late = sent - due;
    if (!f->received) {
        f->received = 1;
        f->first_seq = f->max_seq = seq;
        f->first = f->last = now;
        f->late = late;
        f->latency_sum = now - sent;
        if (ttl >= 0) f->marks[ttl]++;
        return;
    }
    if (ttl >= 0) f->marks[ttl]++;
    double stall = late - f->late > 0 ? late - f->late : 0;
    double gap = now - f->last - stall;
    if (gap > f->max_gap) { f->max_gap = gap; f->gap_at = f->last; f->has_gap = 1; }
    if (stall > f->stall) f->stall = stall;
    if (seq < f->max_seq) f->reordered++;
    if (seq > f->max_seq) f->max_seq = seq;
    f->last = now;
    f->late = late;
    f->received++;
    f->latency_sum += now - sent;
}

/* a counter of this namespace's /proc/net/snmp ("Ip", "InHdrErrors"); -1 if unreadable */
static long long snmp_counter(const char *proto, const char *name) {
    FILE *f = fopen("/proc/self/net/snmp", "r");
    if (!f) return -1;
    char head[2048], vals[2048];
    long long out = -1;
    size_t plen = strlen(proto);
    while (out < 0 && fgets(head, sizeof head, f) && fgets(vals, sizeof vals, f)) {
        if (strncmp(head, proto, plen) || head[plen] != ':') continue;
        char *hs, *vs, *h = strtok_r(head + plen + 1, " \n", &hs);
        char *v = strtok_r(vals + plen + 1, " \n", &vs);
        for (; h && v; h = strtok_r(NULL, " \n", &hs), v = strtok_r(NULL, " \n", &vs))
            if (!strcmp(h, name)) { out = atoll(v); break; }
    }
    fclose(f);
    return out;
}

/* probe.report: the receiver's JSON, written atomically */
static void probe_report(const char *path, int port, ProbeFlow **flows, uint32_t drops) {
    Atomic *a = atomic_open(path, "w");
    FILE *o = a->f;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long bad = snmp_counter("Ip", "InHdrErrors");
    fprintf(o, "{\"port\": %d, \"t\": %.6f, \"bad_headers\": ", port,
            ts.tv_sec + ts.tv_nsec / 1e9);
    if (bad < 0) fprintf(o, "null"); else fprintf(o, "%lld", bad);
    fprintf(o, ", \"socket_drops\": %u, \"flows\": {", drops);
    uint32_t newest = 0;
    for (int sp = 0; sp < 65536; sp++)
        if (flows[sp] && flows[sp]->max_seq > newest) newest = flows[sp]->max_seq;
    int n = 0;
    for (int sp = 0; sp < 65536; sp++) {
        ProbeFlow *f = flows[sp];
        if (!f) continue;
        int64_t upto = (int64_t)newest - PROBE_TAIL_ROUNDS;
        if (upto < f->max_seq) upto = f->max_seq;
        int64_t lost = upto - f->first_seq + 1 - (int64_t)f->received;
        fprintf(o, "%s\"%d\": {\"received\": %llu, \"lost\": %lld, \"max_gap_s\": %.6f, "
                "\"gap_at\": ", n++ ? ", " : "", sp, (unsigned long long)f->received,
                (long long)(lost > 0 ? lost : 0), f->max_gap);
        if (f->has_gap) fprintf(o, "%.6f", f->gap_at); else fprintf(o, "null");
        fprintf(o, ", \"sender_stall_s\": %.6f, \"first\": %.6f, \"last\": %.6f, "
                "\"reordered\": %llu, \"mean_latency_s\": %.6f, \"marks\": {", f->stall,
                f->first, f->last, (unsigned long long)f->reordered,
                f->latency_sum / (double)f->received);
        for (int t = 0, m = 0; t < 256; t++)
            if (f->marks[t]) fprintf(o, "%s\"%d\": %u", m++ ? ", " : "", t, f->marks[t]);
        fprintf(o, "}}");
    }
    fprintf(o, "}}\n");
    atomic_commit(a);
}

static int cmd_probe_recv(int argc, char **argv) {
    const char *out = NULL, *ready = NULL;
    int port = 0;
    double every = 0, duration = 0;
    for (int i = 0; i < argc; i++) {
        if (i + 1 >= argc) die("option %s needs a value", argv[i]);
        if (!strcmp(argv[i], "--port")) port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--out")) out = argv[++i];
        else if (!strcmp(argv[i], "--ready")) ready = argv[++i];
        else if (!strcmp(argv[i], "--every")) every = atof(argv[++i]);
        else if (!strcmp(argv[i], "--duration")) duration = atof(argv[++i]);
        else die("unknown probe-recv option %s", argv[i]);
    }
    if (!out || port <= 0 || port > 65535) die("%s", "probe-recv needs --port (1..65535) and --out");
    if (every < 0 || duration < 0) die("%s", "--every and --duration must be >= 0");
    int fd = hold_fd(socket(AF_INET, SOCK_DGRAM, 0));
    if (fd < 0) fail(1, "socket: %s", strerror(errno));
    int one = 1, buf = 4 << 20;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buf, sizeof buf) < 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
    setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof one);
    setsockopt(fd, IPPROTO_IP, IP_RECVTTL, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) < 0) fail(1, "bind: %s", strerror(errno));
    ProbeFlow **flows = hold_mem(checked(calloc(65536, sizeof(ProbeFlow *)), "probe flows"));
    if (!serving) {
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
        prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0);
    }
    char readytext[64], readypath[4112];
    snprintf(readytext, sizeof readytext, "{\"port\": %d}\n", port);
    snprintf(readypath, sizeof readypath, "%s.ready", out);
    write_file_atomic(ready ? ready : readypath, readytext);
    static uint8_t data[PROBE_BATCH][2048];
    static char ctl[PROBE_BATCH][256];
    struct mmsghdr msgs[PROBE_BATCH];
    struct iovec iov[PROBE_BATCH];
    struct sockaddr_in from[PROBE_BATCH];
    int64_t start = now_ns(CLOCK_MONOTONIC), due = every > 0 ? start + (int64_t)(every * 1e9) : 0;
    int64_t end = duration > 0 ? start + (int64_t)(duration * 1e9) : 0;
    uint32_t drops = 0;
    int nflows = 0;
    while (!stop_flag) {
        int64_t now = now_ns(CLOCK_MONOTONIC);
        if (end && now >= end) break;
        if (due && now >= due) {
            probe_report(out, port, flows, drops);
            due += (int64_t)(every * 1e9);
        }
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 100) <= 0) continue;  /* a signal, or a tenth of a second */
        for (int i = 0; i < PROBE_BATCH; i++) {
            iov[i] = (struct iovec){.iov_base = data[i], .iov_len = sizeof data[i]};
            msgs[i].msg_hdr = (struct msghdr){.msg_name = &from[i], .msg_namelen = sizeof from[i],
                                              .msg_iov = &iov[i], .msg_iovlen = 1,
                                              .msg_control = ctl[i], .msg_controllen = sizeof ctl[i]};
        }
        int n = recvmmsg(fd, msgs, PROBE_BATCH, MSG_DONTWAIT, NULL);
        for (int i = 0; i < n; i++) {
            struct msghdr *h = &msgs[i].msg_hdr;
            double at = -1;
            int ttl = -1;
            for (struct cmsghdr *c = CMSG_FIRSTHDR(h); c; c = CMSG_NXTHDR(h, c)) {
                if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_TIMESTAMPNS) {
                    struct timespec t;
                    memcpy(&t, CMSG_DATA(c), sizeof t);
                    at = t.tv_sec + t.tv_nsec / 1e9;
                } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_RXQ_OVFL) {
                    uint32_t d;
                    memcpy(&d, CMSG_DATA(c), sizeof d);
                    if (d > drops) drops = d;
                } else if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TTL) {
                    int t;
                    memcpy(&t, CMSG_DATA(c), sizeof t);
                    if (t >= 0 && t < 256) ttl = t;
                }
            }
            if (msgs[i].msg_len < PROBE_HDR) continue;
            if (at < 0) {
                struct timespec t;
                clock_gettime(CLOCK_REALTIME, &t);
                at = t.tv_sec + t.tv_nsec / 1e9;
            }
            int sp = ntohs(from[i].sin_port);
            if (!flows[sp]) {
                if (nflows >= PROBE_MAX_SPORTS) continue;  /* a stranger spraying ports */
                flows[sp] = checked(calloc(1, sizeof(ProbeFlow)), "probe flow");
                nflows++;
            }
            probe_arrive(flows[sp], rd32be(data[i]), rd_f64be(data[i] + 4),
                         rd_f64be(data[i] + 12), at, ttl);
        }
    }
    probe_report(out, port, flows, drops);
    for (int sp = 0; sp < 65536; sp++) free(flows[sp]);
    return 0;
}

/* probe.send: `pps` rounds a second, each one datagram per source port, lossless at the
 * sender (a datagram the host's full interface queue refuses is sent again). Prints the
 * summary JSON on stdout. */
static int cmd_probe_send(int argc, char **argv) {
    const char *dst = NULL, *sports_arg = NULL;
    int port = 0, size = 200;
    double pps = 200, duration = 5;
    for (int i = 0; i < argc; i++) {
        if (i + 1 >= argc) die("option %s needs a value", argv[i]);
        if (!strcmp(argv[i], "--dst")) dst = argv[++i];
        else if (!strcmp(argv[i], "--port")) port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sports")) sports_arg = argv[++i];
        else if (!strcmp(argv[i], "--pps")) pps = atof(argv[++i]);
        else if (!strcmp(argv[i], "--duration")) duration = atof(argv[++i]);
        else if (!strcmp(argv[i], "--size")) size = atoi(argv[++i]);
        else die("unknown probe-send option %s", argv[i]);
    }
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (!dst || inet_pton(AF_INET, dst, &to.sin_addr) != 1) die("%s", "probe-send needs --dst IPv4");
    if (port <= 0 || port > 65535 || !sports_arg) die("%s", "probe-send needs --port and --sports");
    if (!(pps > 0) || duration < 0 || size < PROBE_HDR || size > 1472)
        die("%s", "--pps must be > 0, --duration >= 0, --size 20..1472");
    int sports[PROBE_MAX_SPORTS], ns = 0;
    char spec[4096];
    snprintf(spec, sizeof spec, "%s", sports_arg);
    char *save;
    for (char *part = strtok_r(spec, ",", &save); part; part = strtok_r(NULL, ",", &save)) {
        int lo = atoi(part), hi = lo;
        char *dash = strchr(part, '-');
        if (dash) hi = atoi(dash + 1);
        if (lo <= 0 || hi > 65535 || hi < lo) die("bad --sports %s", sports_arg);
        for (int p = lo; p <= hi; p++) {
            if (ns >= PROBE_MAX_SPORTS) die("%s", "more than 1024 --sports");
            sports[ns++] = p;
        }
    }
    int *fds = hold_mem(checked(calloc((size_t)ns, sizeof(int)), "probe sockets"));
    for (int i = 0; i < ns; i++) fds[i] = -1;
    if (!serving) {
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
        prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0);
    }
    int one = 1, rc = 0;
    for (int i = 0; i < ns && !rc; i++) {
        struct sockaddr_in me = {.sin_family = AF_INET, .sin_port = htons((uint16_t)sports[i])};
        fds[i] = socket(AF_INET, SOCK_DGRAM, 0);
        if (fds[i] < 0 || setsockopt(fds[i], IPPROTO_IP, IP_RECVERR, &one, sizeof one) < 0 ||
            bind(fds[i], (struct sockaddr *)&me, sizeof me) < 0) {
            fprintf(stderr, "astral-pktio: probe-send: source port %d: %s\n", sports[i],
                    strerror(errno));
            rc = 1;
        }
    }
    uint8_t pkt[1472] = {0};
    int64_t t0 = now_ns(CLOCK_MONOTONIC), dur = (int64_t)(duration * 1e9);
    struct timespec w0;
    clock_gettime(CLOCK_REALTIME, &w0);
    double wall0 = w0.tv_sec + w0.tv_nsec / 1e9, interval = 1.0 / pps;
    uint64_t seq = 0, errors = 0, retries = 0;
    while (!rc && !stop_flag && now_ns(CLOCK_MONOTONIC) - t0 < dur) {
        struct timespec w;
        clock_gettime(CLOCK_REALTIME, &w);
        be32(pkt, (uint32_t)seq);
        wr_f64be(pkt + 4, w.tv_sec + w.tv_nsec / 1e9);
        wr_f64be(pkt + 12, wall0 + (double)seq * interval);
        for (int i = 0; i < ns; i++) {
            int64_t give_up = now_ns(CLOCK_MONOTONIC) + 10000000000LL;
            for (int tries = 0;; tries++) {
                if (sendto(fds[i], pkt, (size_t)size, 0, (struct sockaddr *)&to, sizeof to) >= 0)
                    break;
                int e = errno;
                /* an earlier datagram's ICMP error reported now (this one did not go): once;
                 * a full interface queue: again after a moment, as a NIC backs off */
                int pending = e == ECONNREFUSED || e == EHOSTUNREACH || e == ENETUNREACH ||
                              e == EHOSTDOWN;
                if ((pending && tries == 0) || ((e == ENOBUFS || e == EAGAIN) && !stop_flag &&
                                                now_ns(CLOCK_MONOTONIC) < give_up)) {
                    retries++;
                    if (!pending) usleep(100);
                    continue;
                }
                errors++;
                break;
            }
        }
        seq++;
        sleep_until(CLOCK_MONOTONIC, t0 + (int64_t)((double)seq * interval * 1e9));
    }
    for (int i = 0; i < ns; i++)
        if (fds[i] >= 0) close(fds[i]);
    if (rc) return rc;
    printf("{\"sent_per_sport\": %llu, \"sports\": [", (unsigned long long)seq);
    for (int i = 0; i < ns; i++) printf("%s%d", i ? ", " : "", sports[i]);
    printf("], \"errors\": %llu, \"pps\": %g, \"queue_retries\": %llu}\n",
           (unsigned long long)errors, pps, (unsigned long long)retries);
    fflush(stdout);
    return 0;
}

/* --- serve -------------------------------------------------------------------------------- */
/* Give back everything the command that just ended (or failed) held. */
static void release(void) {
    for (int i = 0; i < 4; i++) {
        if (atomics[i].f) {  /* a report it did not finish: no half file for a reader */
            fclose(atomics[i].f);
            atomics[i].f = NULL;
            unlink(atomics[i].tmp);
        }
        free(held_mem[i]);
        held_mem[i] = NULL;
    }
    if (held_ring) munmap(held_ring, held_ring_len);
    held_ring = NULL;
    for (int i = 0; i < 4; i++) drop_fd(held_fd[i]);
    if (held_dump) fclose(held_dump);
    held_dump = NULL;
    if (plan_file) fclose(plan_file);
    plan_file = NULL;
    free_spec(&spec);
}

/* The next line of stdin (its newline cut off), or NULL at the end of stdin or once told to
 * quit; `*too_long` says the line did not fit (it was skipped). Signals are blocked outside
 * this wait and let through only inside ppoll, so a SIGTERM cannot slip in between looking
 * at the flag and waiting. */
static char line_buf[65536];
static size_t line_len, line_used;

static char *next_line(const sigset_t *waiting, int *too_long) {
    static int skipping;  /* the rest of a line too long to hold */
    memmove(line_buf, line_buf + line_used, line_len - line_used);
    line_len -= line_used;
    line_used = 0;
    for (;;) {
        char *nl = memchr(line_buf, '\n', line_len);
        if (nl) {
            *nl = 0;
            line_used = (size_t)(nl - line_buf) + 1;
            *too_long = skipping;
            skipping = 0;
            return line_buf;
        }
        if (line_len == sizeof line_buf - 1) { skipping = 1; line_len = 0; }
        if (quit_flag) return NULL;
        struct pollfd in = {.fd = 0, .events = POLLIN};
        if (ppoll(&in, 1, NULL, waiting) < 0) {
            if (errno == EINTR) continue;
            return NULL;
        }
        ssize_t n = read(0, line_buf + line_len, sizeof line_buf - 1 - line_len);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n <= 0) {  /* the end: a last line without its newline still counts */
            if (!line_len || skipping) return NULL;
            line_buf[line_len] = 0;
            line_used = line_len;
            *too_long = 0;
            return line_buf;
        }
        line_len += (size_t)n;
    }
}

/* Write all of `text` to stdout (the agent's answers); -1 once nobody reads them. */
static int say(const char *text) {
    size_t left = strlen(text);
    while (left) {
        ssize_t n = write(1, text, left);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        text += n;
        left -= (size_t)n;
    }
    return 0;
}

/* Run one command (`argv[0]` send or recv) and put its answer in `reply`. A failure anywhere
 * in it comes back here through fail(), and release() gives back what it held. */
static void serve_one(int argc, char **argv, char *reply, size_t size) {
    if (setjmp(failed)) {
        for (char *c = fail_msg; *c; c++)
            if (*c == '\n' || *c == '\r') *c = ' ';  /* one line per answer */
        snprintf(reply, size, "error %s\n", fail_msg);
        return;
    }
    if (!argc) die("%s", "empty command (send ... or recv ...)");
    int rc;
    if (!strcmp(argv[0], "send")) rc = cmd_send(argc - 1, argv + 1);
    else if (!strcmp(argv[0], "recv")) rc = cmd_recv(argc - 1, argv + 1);
    else die("unknown command %s (send or recv)", argv[0]);
    snprintf(reply, size, "done %d\n", rc);
}

#define MAX_ARGS 64

static int cmd_serve(int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        if (i + 1 >= argc) die("option %s needs a value", argv[i]);
        if (!strcmp(argv[i], "--tag")) i++;  /* names the process only */
        else die("unknown serve option %s", argv[i]);
    }
    struct sigaction sa = {.sa_handler = on_serve_signal};  /* no SA_RESTART: waits return */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);  /* nobody reading the answers: say() sees it and we end */
    prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0);
    sigset_t stops, waiting, usr1;
    sigemptyset(&stops);
    sigaddset(&stops, SIGUSR1);
    sigaddset(&stops, SIGTERM);
    sigaddset(&stops, SIGINT);
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &stops, &waiting);
    serving = 1;
    if (say("ready\n") < 0) return 0;
    char *line, reply[700];
    int too_long;
    while ((line = next_line(&waiting, &too_long))) {
        /* a SIGUSR1 still pending was sent before this line was written, so it was meant
         * for the command before, which has ended */
        struct timespec none = {0, 0};
        while (sigtimedwait(&usr1, NULL, &none) > 0) {
        }
        if (!quit_flag) stop_flag = 0;
        char *args[MAX_ARGS];
        int n = 0;
        for (char *tok = strtok(line, " \t\r"); tok && n <= MAX_ARGS; tok = strtok(NULL, " \t\r"))
            if (n++ < MAX_ARGS) args[n - 1] = tok;
        if (too_long) {
            snprintf(reply, sizeof reply, "error command longer than %zu bytes\n", sizeof line_buf - 1);
        } else if (n > MAX_ARGS) {
            snprintf(reply, sizeof reply, "error more than %d arguments\n", MAX_ARGS);
        } else {
            cpu_base = cpu_ns();
            sigprocmask(SIG_SETMASK, &waiting, NULL);
            serve_one(n, args, reply, sizeof reply);
            sigprocmask(SIG_BLOCK, &stops, NULL);
            release();
        }
        if (say(reply) < 0 || quit_flag) break;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "send")) return cmd_send(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "recv")) return cmd_recv(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "serve")) return cmd_serve(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "probe-send")) return cmd_probe_send(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "probe-recv")) return cmd_probe_recv(argc - 2, argv + 2);
    fprintf(stderr, "usage: astral-pktio send --plan PLAN --out SENT (--intf IFACE | --dump FILE) "
                    "[--start-at NS]\n       astral-pktio recv --intf IFACE --out RECS.json "
                    "[--ready FILE] [--expect-bytes N] [--idle-timeout S] [--timeout S] "
                    "[--ring-mb M] [--feedback-round-us R --feedback-delay-us D]\n"
                    "       astral-pktio serve [--tag TEXT]  (one send/recv command a line)\n"
                    "       astral-pktio probe-send --dst IP --port P --sports LIST [--pps R] "
                    "[--duration S] [--size N]\n"
                    "       astral-pktio probe-recv --port P --out FILE [--ready FILE] "
                    "[--every S] [--duration S]\n");
    return 2;
}
