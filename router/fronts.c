/*
 * fronts: the router's front table, owned by the process layer (rproc.c listens for each
 * row's front and hands its table to every worker's router, whose front.c adopts the
 * sockets by it), as Pelikan's core_run(&processor) or nginx's module contexts: one row per
 * protocol front besides the binary one (session.c), naming its protocol (struct
 * rl_front_ops: rls_h2.c, resp.c) and where it listens in the config. Adding a front is a
 * row here and its kind in front.h. Not for what a front does (front.c, the protocols).
 */
#include "fronts.h"

#include "conf.h"

static void
rls_listen(const struct rl_conf *conf, const char **host, uint16_t *port)
{
    *host = conf->rls_host;
    *port = conf->rls_port;
}

static void
resp_listen(const struct rl_conf *conf, const char **host, uint16_t *port)
{
    *host = conf->resp_host;
    *port = conf->resp_port;
}

const struct rl_front_def rl_fronts[RL_FRONT_KINDS] = {
    [RL_FRONT_RLS] = {&rl_rls_h2_ops, rls_listen},
    [RL_FRONT_RESP] = {&rl_resp_ops, resp_listen},
};
