/*
 * fronts: the router's front table (fronts.c), owned by the process layer: every protocol
 * front besides the binary one, by kind. The process (rproc.h) listens for each row's front
 * and hands the table to its workers' routers (rl_router_opts.fronts). Not for what a front
 * does (front.h).
 */
#ifndef RL_FRONTS_H
#define RL_FRONTS_H

#include "front.h"

extern const struct rl_front_def rl_fronts[RL_FRONT_KINDS];

#endif
