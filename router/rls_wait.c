/*
 * rls_wait: the calls' deadline heap (rls_wait.h). Each node knows its place in the heap
 * (heap_at, 0: not in it), so a call answered before its time leaves in O(log n).
 */
#include "rls_wait.h"

#include <stdbool.h>
#include <stdlib.h>

struct rl_rls_wait {
    uv_timer_t timer;
    struct rl_rls_wait_node **heap;
    uint32_t n, cap;
    uint64_t armed_ms; /* the timer's due time; 0: not armed */
    bool closed;
    void (*expire)(struct rl_rls_wait_node *n);
    void (*on_closed)(void *arg);
    void *arg;
};

static void
heap_set(struct rl_rls_wait *w, uint32_t i, struct rl_rls_wait_node *c)
{
    w->heap[i] = c;
    c->heap_at = i + 1;
}

static void
heap_up(struct rl_rls_wait *w, uint32_t i)
{
    struct rl_rls_wait_node *c = w->heap[i];

    while (i > 0 && w->heap[(i - 1) / 2]->deadline_ms > c->deadline_ms) {
        heap_set(w, i, w->heap[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    heap_set(w, i, c);
}

static void
heap_down(struct rl_rls_wait *w, uint32_t i)
{
    struct rl_rls_wait_node *c = w->heap[i];

    for (;;) {
        uint32_t k = 2 * i + 1;

        if (k >= w->n) {
            break;
        }
        if (k + 1 < w->n && w->heap[k + 1]->deadline_ms < w->heap[k]->deadline_ms) {
            k++;
        }
        if (w->heap[k]->deadline_ms >= c->deadline_ms) {
            break;
        }
        heap_set(w, i, w->heap[k]);
        i = k;
    }
    heap_set(w, i, c);
}

void
rl_rls_wait_remove(struct rl_rls_wait *w, struct rl_rls_wait_node *n)
{
    uint32_t i;

    if (w == NULL || n->heap_at == 0) {
        return;
    }
    i = n->heap_at - 1;
    n->heap_at = 0;
    if (--w->n != i) {
        struct rl_rls_wait_node *m = w->heap[w->n];

        heap_set(w, i, m);
        heap_down(w, i);
        heap_up(w, m->heap_at - 1);
    }
}

static void wait_fire(uv_timer_t *t);

/* The timer, due at the earliest deadline. */
static void
wait_arm(struct rl_rls_wait *w, uint64_t now)
{
    uint64_t due;

    if (w->n == 0 || w->closed) {
        return;
    }
    due = w->heap[0]->deadline_ms;
    if (w->armed_ms != 0 && w->armed_ms <= due) {
        return;
    }
    w->armed_ms = due;
    uv_timer_start(&w->timer, wait_fire, due > now ? due - now : 0, 0);
}

/* The calls whose time came, each out of the heap, then expired (which may free it). */
static void
wait_fire(uv_timer_t *t)
{
    struct rl_rls_wait *w = t->data;
    uint64_t now = uv_now(t->loop);

    w->armed_ms = 0;
    while (w->n > 0 && w->heap[0]->deadline_ms <= now) {
        struct rl_rls_wait_node *n = w->heap[0];

        rl_rls_wait_remove(w, n);
        w->expire(n);
    }
    wait_arm(w, now);
}

struct rl_rls_wait *
rl_rls_wait_new(uv_loop_t *loop, void (*expire)(struct rl_rls_wait_node *n),
                void (*closed)(void *arg), void *arg)
{
    struct rl_rls_wait *w = calloc(1, sizeof(*w));

    if (w == NULL) {
        return NULL;
    }
    uv_timer_init(loop, &w->timer);
    w->timer.data = w;
    w->expire = expire;
    w->on_closed = closed;
    w->arg = arg;
    return w;
}

int
rl_rls_wait_add(struct rl_rls_wait *w, struct rl_rls_wait_node *n, uint64_t deadline_ms)
{
    if (w->closed) {
        return -1;
    }
    if (w->n == w->cap) {
        uint32_t cap = w->cap ? w->cap * 2 : 64;
        struct rl_rls_wait_node **h = realloc(w->heap, cap * sizeof(*h));

        if (h == NULL) {
            return -1;
        }
        w->heap = h;
        w->cap = cap;
    }
    n->deadline_ms = deadline_ms;
    w->heap[w->n] = n;
    n->heap_at = ++w->n;
    heap_up(w, w->n - 1);
    wait_arm(w, uv_now(w->timer.loop));
    return 0;
}

static void
wait_closed(uv_handle_t *h)
{
    struct rl_rls_wait *w = h->data;

    w->on_closed(w->arg);
}

void
rl_rls_wait_close(struct rl_rls_wait *w)
{
    if (w != NULL && !w->closed) {
        w->closed = true;
        uv_close((uv_handle_t *)&w->timer, wait_closed);
    }
}

void
rl_rls_wait_free(struct rl_rls_wait *w)
{
    if (w != NULL) {
        free(w->heap);
        free(w);
    }
}
