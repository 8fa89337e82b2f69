/*
 * traffic: one thread per router, sending its share of the scenario's rate open-loop (a
 * request is due every 1/rate s whether or not earlier ones were answered), pipelined on
 * one connection, and recording every request and what came back. A connection that
 * breaks loses its requests in flight (recorded as lost) and is dialled again every 100 ms;
 * requests due meanwhile are counted as unsent, as a client with no router would have.
 * Users are drawn uniformly or by Zipf (rltools) and named as scenario.c names them.
 */
#include "chaos.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reqclient.h"
#include "rng.h"
#include "shardmap.h"
#include "wire.h"
#include "zipf.h"

#define RECONNECT_US 100000
#define DRAIN_EXTRA_MS 2000

struct sender {
    struct ch_traffic *t;
    const struct ch_scenario *sc;
    struct rl_client *client;
    size_t first_pending; /* no request below this index is pending */
    uint64_t rng;
    struct rl_zipf zipf;
    uint32_t weight_total;
};

/* Every request still pending on this connection is lost. */
static void
lose(struct sender *s, int64_t now_us)
{
    struct ch_traffic *t = s->t;
    size_t n = atomic_load(&t->n);

    for (size_t i = s->first_pending; i < n; i++) {
        if (t->reqs[i].code == CH_CODE_PENDING) {
            t->reqs[i].code = CH_CODE_LOST;
            t->reqs[i].t_done_us = now_us;
            atomic_fetch_add(&t->by_code[7], 1);
            ch_report_answer(t->run->report, CH_CODE_LOST, t->reqs[i].t_send_us, now_us);
        }
    }
    s->first_pending = n;
    rl_client_destroy(s->client);
    s->client = NULL;
}

static void
record(struct sender *s, const struct rl_wire_reply *rep, int64_t now_us)
{
    struct ch_traffic *t = s->t;
    size_t n = atomic_load(&t->n);
    struct ch_req *q;
    int64_t lat_ms;

    if (rep->id == 0 || rep->id > n) {
        return;
    }
    q = &t->reqs[rep->id - 1];
    if (q->code != CH_CODE_PENDING) {
        return;
    }
    if (rep->op == RL_WIRE_OP_CHECK) {
        q->code = (uint8_t)(rep->check.code < 6 ? rep->check.code : CH_CODE_ERROR);
        q->remaining = (uint32_t)(rep->check.remaining > UINT32_MAX ? UINT32_MAX
                                                                     : rep->check.remaining);
        q->reset_ms = (uint32_t)(rep->check.reset_ms > UINT32_MAX ? UINT32_MAX
                                                                   : rep->check.reset_ms);
    } else {
        q->code = CH_CODE_ERROR;
        q->err = (uint8_t)rep->err;
    }
    q->t_done_us = now_us;
    atomic_fetch_add(&t->by_code[q->code < 6 ? q->code : 6], 1);
    ch_report_answer(t->run->report, q->code, q->t_send_us, now_us);
    lat_ms = (now_us - q->t_send_us) / 1000;
    if (lat_ms > s->sc->deadline_ms + t->run->sc->margin_ms) {
        atomic_fetch_add(&t->late, 1);
    }
    while (s->first_pending < n && t->reqs[s->first_pending].code != CH_CODE_PENDING) {
        s->first_pending++;
    }
}

/* Reads every reply that is there, waiting up to wait_ms for the first. */
static void
drain(struct sender *s, int wait_ms)
{
    struct rl_wire_reply rep;

    while (s->client != NULL) {
        int rc = rl_client_recv(s->client, &rep, wait_ms);

        if (rc == -ETIMEDOUT) {
            return;
        }
        if (rc != 0) {
            lose(s, ch_mono_us());
            return;
        }
        record(s, &rep, ch_mono_us());
        wait_ms = 0;
    }
}

static void
queue_one(struct sender *s, int64_t now_us)
{
    struct ch_traffic *t = s->t;
    const struct ch_scenario *sc = s->sc;
    size_t i = atomic_load(&t->n);
    struct ch_req *q = &t->reqs[i];
    struct rl_wire_req req = {0};
    char user[24];
    uint32_t pick = (uint32_t)(rl_rng_next(&s->rng) % s->weight_total), svc = 0;

    while (pick >= sc->services[svc].weight) {
        pick -= sc->services[svc].weight;
        svc++;
    }
    memset(q, 0, sizeof(*q));
    q->user = sc->zipf ? rl_zipf_sample(&s->zipf, &s->rng)
                       : (uint32_t)(rl_rng_next(&s->rng) % sc->users);
    q->service = (uint8_t)svc;
    q->router = (uint8_t)t->router;
    q->code = CH_CODE_PENDING;
    ch_user_name(user, sizeof(user), q->user);
    q->shard = rl_shardmap_shard(rl_shardmap_key_hash(sc->services[svc].name,
                                                      strlen(sc->services[svc].name), user,
                                                      strlen(user)),
                                 sc->shards);
    req.op = RL_WIRE_OP_CHECK;
    req.id = (uint32_t)(i + 1);
    req.service.ptr = sc->services[svc].name;
    req.service.len = (uint32_t)strlen(sc->services[svc].name);
    req.user.ptr = user;
    req.user.len = (uint32_t)strlen(user);
    req.cost = 1;
    q->t_send_ms = ch_now_ms();
    q->t_send_us = now_us;
    if (rl_client_queue(s->client, &req) != 0) {
        q->code = CH_CODE_LOST;
        q->t_done_us = now_us;
        atomic_fetch_add(&t->by_code[7], 1);
        ch_report_answer(t->run->report, CH_CODE_LOST, now_us, now_us);
    }
    atomic_store(&t->n, i + 1);
}

static void *
traffic_main(void *arg)
{
    struct ch_traffic *t = arg;
    const struct ch_scenario *sc = t->run->sc;
    struct sender s = {.t = t, .sc = sc, .rng = 0x5eed0000u + (uint64_t)t->router};
    uint32_t rate = sc->rate / (uint32_t)sc->routers +
                    (t->router < (int)(sc->rate % (uint32_t)sc->routers) ? 1 : 0);
    int64_t interval_us = rate > 0 ? 1000000 / rate : 1000000, next_due = ch_mono_us(),
            next_dial = 0;

    for (int i = 0; i < sc->nservices; i++) {
        s.weight_total += sc->services[i].weight;
    }
    if (sc->zipf) {
        rl_zipf_init(&s.zipf, sc->users, 1.0);
    }
    while (!atomic_load(&t->stop)) {
        int64_t now = ch_mono_us();
        bool queued = false;

        if (s.client == NULL && now >= next_dial) {
            if (ch_run_connect(t->run, true, t->router, &s.client, 200) != 0) {
                s.client = NULL;
            }
            next_dial = now + RECONNECT_US;
            now = ch_mono_us();
        }
        while (next_due <= now) {
            next_due += interval_us;
            if (s.client == NULL) {
                atomic_fetch_add(&t->unsent, 1);
                ch_report_unsent(t->run->report, now);
            } else if (atomic_load(&t->n) < t->cap) {
                queue_one(&s, now);
                queued = true;
            }
        }
        if (queued && rl_client_flush(s.client, 200) != 0) {
            lose(&s, ch_mono_us());
        }
        if (s.client != NULL) {
            /* rounded up: a request may leave up to 1 ms late, but the thread never spins */
            int64_t wait = (next_due - ch_mono_us() + 999) / 1000;

            drain(&s, wait < 0 ? 0 : wait > 5 ? 5 : (int)wait);
        } else {
            int64_t until = next_due < next_dial ? next_due : next_dial;

            ch_sleep_us(until - ch_mono_us());
        }
    }
    /* The answers still owed: wait for them as a client would, then give up. */
    for (int64_t end = ch_mono_us() + (sc->deadline_ms + sc->margin_ms + DRAIN_EXTRA_MS) * 1000;
         s.client != NULL && s.first_pending < atomic_load(&t->n) && ch_mono_us() < end;) {
        drain(&s, 10);
    }
    rl_client_destroy(s.client);
    return NULL;
}

int
ch_traffic_start(struct ch_traffic *t, struct ch_run *r, int router)
{
    const struct ch_scenario *sc = r->sc;
    uint64_t per = sc->rate / (uint64_t)sc->routers + 1;

    memset(t, 0, sizeof(*t));
    t->run = r;
    t->router = router;
    t->cap = (size_t)(per * (uint64_t)(sc->duration_ms + 5000) / 1000 * 11 / 10 + 1000);
    t->reqs = calloc(t->cap, sizeof(*t->reqs));
    if (t->reqs == NULL) {
        return -ENOMEM;
    }
    if (pthread_create(&t->thread, NULL, traffic_main, t) != 0) {
        free(t->reqs);
        t->reqs = NULL;
        return -EAGAIN;
    }
    t->started = true;
    return 0;
}

void
ch_traffic_stop(struct ch_traffic *t)
{
    if (t->started) {
        atomic_store(&t->stop, true);
        pthread_join(t->thread, NULL);
        t->started = false;
    }
}
