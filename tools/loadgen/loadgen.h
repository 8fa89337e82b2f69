/*
 * loadgen: the state of an rl-bench run, shared by its modules: the options (options.h),
 * the connections with their in-flight slots (conn.h), the worker threads that drive them
 * (worker.h), and the run as a whole with its control loop (control.h) and the bytes every
 * request shares (workload.h). Also the reply tallies: the six CHECK codes, then ERROR
 * replies and requests never answered, with their names in the report (report.h). A
 * worker's fields are its thread's own, but for `published`, which the control loop reads.
 * Declarations only.
 */
#ifndef LG_LOADGEN_H
#define LG_LOADGEN_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <uv.h>

#include "auth.h"
#include "buf.h"
#include "hist.h"
#include "wire.h"
#include "zipf.h"

/* Reply tallies: the six CHECK codes, then ERROR replies and requests never answered. */
#define BENCH_ERRORS RL_WIRE_CODE_COUNT
#define BENCH_LOST (RL_WIRE_CODE_COUNT + 1)
#define BENCH_NCOUNTS (RL_WIRE_CODE_COUNT + 2)

/* Per-connection input: room for several largest frames, so a partial frame left at the
 * end of a read always fits after compaction. */
#define BENCH_IN_CAP (256u * 1024)
#define BENCH_TLS_RAW (64u * 1024) /* a worker's buffer for the ciphertext of one read */

/* Longest encoded CHECK: prefix, fixarray, op, id, user ("u" + 10 digits), suffix. */
#define BENCH_USER_MAX 16
#define BENCH_HDR_MAX (RL_WIRE_HDR_LEN + 2 + 5)

/* How long in-flight requests may take to come back once the run stops. */
#define BENCH_DRAIN_NS (2000000000ull)
#define BENCH_CONNECT_NS (5000000000ull)

enum dist { DIST_UNIFORM, DIST_ZIPF };

struct opts {
    char *target;
    const char *token_file; /* --token-file, else $RL_TOKEN_FILE; NULL: no AUTH */
    char token[RL_AUTH_TOKEN_MAX];
    size_t token_len; /* 0: no AUTH */
    const char *tls_ca; /* --tls-ca, --tls-cert, --tls-key: TLS (common/tls.h) */
    const char *tls_cert;
    const char *tls_key;
    struct rl_tls_ctx *tls; /* built from them; NULL: plain TCP */
    unsigned connections;
    unsigned pipeline;
    uint32_t keys;
    enum dist dist;
    double zipf_s;
    const char *service;
    const char *endpoint; /* NULL: nil */
    uint32_t cost;      /* CHECK's cost; RELEASE's count */
    uint8_t op;         /* --op: RL_WIRE_OP_CHECK, _ADJUST or _RELEASE */
    int32_t delta;      /* ADJUST's delta (--delta) */
    double duration;   /* seconds */
    uint64_t requests; /* 0: run for duration */
    double rate;       /* requests/s over all connections; 0: closed loop */
    bool sequential;
    double report_every; /* seconds; 0: off */
    bool json;
    unsigned threads;
    uint64_t seed; /* 0: from the clock */
    bool has_source; /* --source: every connection from this local address */
    struct sockaddr_storage source;
};

struct worker;

struct conn {
    uv_tcp_t tcp;
    uv_connect_t connect_req;
    uv_write_t write_req;
    struct worker *w;
    unsigned index;
    bool connected;
    bool dead;
    bool writing;
    uint32_t inflight;
    char *in;
    size_t in_len;
    struct rl_buf out;  /* requests being encoded */
    struct rl_buf wbuf; /* a write that did not finish at once, in flight */
    struct rl_tls *tls; /* NULL: plain TCP */
    struct rl_buf ct;   /* TLS: out, encrypted, not yet written */
    bool up;            /* counted as connected (after the TLS handshake, with TLS) */
    /*
     * In-flight slots: a request's id is (generation << 16) | slot, so a reply finds its
     * send time in O(1) whatever order replies come in, and a stray id is recognised.
     */
    uint64_t *slot_t;
    uint16_t *slot_gen;
    uint8_t *slot_busy;
    uint16_t *free_slots;
    uint32_t nfree;
};

struct bench;

struct worker {
    struct bench *b;
    unsigned index;
    uv_thread_t thread;
    uv_loop_t loop;
    uv_check_t check;
    uv_timer_t tick;
    uv_timer_t end_timer;
    uv_poll_t tfd_poll;
    int tfd; /* timerfd for the open-loop schedule; -1 when closed loop */
    struct conn *conns;
    char *tls_raw; /* BENCH_TLS_RAW, with TLS */
    unsigned nconns;
    unsigned nconnected;
    unsigned nalive;
    unsigned rr; /* connection the next top-up starts with */
    bool running;
    bool stopping;
    bool finished;
    bool failed;
    bool connect_failed; /* a connection could not connect: the worker finishes (on_check) */
    uint64_t t0;        /* start of the run, ns (uv_hrtime) */
    uint64_t t_end;     /* last reply, or when draining gave up */
    uint64_t t_created; /* when connecting started */
    uint64_t drain_until;
    uint64_t sent;
    uint64_t budget; /* requests this worker may send; UINT64_MAX when unbounded */
    double interval_ns;
    uint64_t rng;
    uint64_t seq_next;
    struct rl_zipf zipf;
    uint64_t counts[BENCH_NCOUNTS];
    _Atomic uint64_t published[BENCH_NCOUNTS];
    struct rl_hist hist;
    struct rl_wire_decoder dec;
    struct rl_wire_reply *rep; /* slow-path decoding: the struct is large */
    char err[160];
};

struct bench {
    struct opts o;
    struct sockaddr_storage addr;
    struct worker *workers;
    uv_loop_t loop;
    uv_signal_t sigint;
    uv_signal_t sigterm;
    uv_timer_t report;
    uv_async_t done_async;
    atomic_int stop; /* 1: stop sending and drain; 2: stop now */
    atomic_uint ndone;
    uint64_t t_start;
    uint64_t last_report_t;
    uint64_t last_counts[BENCH_NCOUNTS];
    /* The encoded bytes that are the same in every request. */
    char prefix[RL_WIRE_SERVICE_MAX + 8];
    size_t prefix_len;
    char suffix[RL_WIRE_ENDPOINT_MAX + 16];
    size_t suffix_len;
};

/* The tallies' names, as the report prints them. */
extern const char *const lg_count_names[BENCH_NCOUNTS];

static inline void
lg_worker_count(struct worker *w, unsigned what, uint64_t n)
{
    w->counts[what] += n;
}

#endif
