/*
 * view: what a router's, a node's or an observer's table is built from, as ZooKeeper last
 * told it (the members and the assignment's text), and the build. Each keeps one view and
 * rebuilds its table from it on every change. Not for reading ZooKeeper (zkm.h) nor for the
 * placement itself (shardmap.h).
 */
#ifndef RL_VIEW_H
#define RL_VIEW_H

#include <stddef.h>
#include <stdint.h>

#include "shardmap.h"

/*
 * What a table is built from, as ZooKeeper last told it: the members and the assignment's
 * text (assignment.h's format, len 0: none) and znode version. Routers and nodes both keep one
 * and rebuild their table from it on every change. Zero-initialise; rl_view_deinit frees.
 */
struct rl_view {
    struct rl_member *members;
    size_t nmembers;
    char *asg_text;
    size_t asg_len;
    int64_t asg_version; /* -1: none */
};

/* Replace the members (copied) or the assignment (copied). 0, or -ENOMEM with v unchanged. */
int rl_view_set_members(struct rl_view *v, const struct rl_member *members, size_t n);
int rl_view_set_assignment(struct rl_view *v, const char *text, size_t len, int64_t version);
void rl_view_deinit(struct rl_view *v);

/*
 * The table of a view: an assignment that does not parse is left out, with why in err
 * (err[0] is '\0' otherwise), and the table is built from the members alone. Returns 0 with
 * *out set, or an error of rl_shardmap_create.
 */
int rl_view_build(struct rl_shardmap **out, uint32_t nshards, const struct rl_view *v, char *err,
                  size_t errlen);

#endif
