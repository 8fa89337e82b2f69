/*
 * frontkind: the kinds of the router's protocol fronts besides the binary one, by which the
 * front table (fronts.c), the process's mailboxes and the worker group's counts are indexed.
 * Adding a front: its kind here, its row in fronts.c. Not for what a front is (front.h).
 */
#ifndef RL_FRONTKIND_H
#define RL_FRONTKIND_H

enum rl_front_kind {
    RL_FRONT_RLS = 0, /* [router] rls: gRPC, Envoy's ShouldRateLimit (rls_h2.c) */
    RL_FRONT_RESP,    /* [router] resp: Redis's protocol, CL.THROTTLE and RL.CHECK (resp.c) */
    RL_FRONT_KINDS
};

#endif
