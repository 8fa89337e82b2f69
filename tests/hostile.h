/*
 * hostile: a fake router on a real loopback socket, in threads of the test, for the suites
 * that test a client (librlclient, the OpenResty module) against what no real server sends.
 * It takes AUTH ([6, id, token] answered [6, id, "hostile"]) and answers every other request
 * with the CHECK reply [1, id, QUEUED, 4, 0, 1000, retry] (retry a uint 64), or, while len is
 * not 0, with a bare frame header announcing len bytes. Its mode changes that: REPEAT sends
 * each answer again 50 ms later as [1, id, ALLOWED, ...] (a late duplicate); STRAY answers
 * nothing but sends ALLOWED replies to ids never asked (0x7ffffff0, 0xfffffff0, in turn) as
 * fast as the client reads them, until it closes; WRONG_OP answers with a PING's reply
 * [2, id, "x"] (right id, wrong op). The suite sets retry, len and mode between requests; the struct must outlive the suite's connections (keep it at file scope). Not for
 * anything a real server does (harness/ starts real processes).
 */
#ifndef RL_HOSTILE_H
#define RL_HOSTILE_H

#include <stdint.h>

enum rl_hostile_mode { RL_HOSTILE_ANSWER, RL_HOSTILE_REPEAT, RL_HOSTILE_STRAY, RL_HOSTILE_WRONG_OP };

struct rl_hostile {
    volatile uint64_t retry; /* the QUEUED reply's retry_after_ms */
    volatile uint32_t len;   /* != 0: answer with a frame header of this length instead */
    volatile int mode;       /* enum rl_hostile_mode, for the requests other than AUTH */
    int lfd;
};

/* Listens on 127.0.0.1 (a free port, returned) and serves each connection in a thread of
 * its own; fails the test when it cannot. */
int rl_hostile_start(struct rl_hostile *h);

/* Stops accepting; connections end when their clients close them. */
void rl_hostile_stop(struct rl_hostile *h);

#endif
