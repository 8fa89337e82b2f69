/*
 * view: what a table is built from, as ZooKeeper last told it (view.h), and the build.
 */
#include "view.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "assignment.h"

int
rl_view_set_members(struct rl_view *v, const struct rl_member *members, size_t n)
{
    struct rl_member *copy = NULL;

    if (n > 0) {
        copy = malloc(n * sizeof(*copy));
        if (copy == NULL) {
            return -ENOMEM;
        }
        memcpy(copy, members, n * sizeof(*copy));
    }
    free(v->members);
    v->members = copy;
    v->nmembers = n;
    return 0;
}

int
rl_view_set_assignment(struct rl_view *v, const char *text, size_t len, int64_t version)
{
    char *copy = NULL;

    if (len > 0) {
        copy = malloc(len);
        if (copy == NULL) {
            return -ENOMEM;
        }
        memcpy(copy, text, len);
    }
    free(v->asg_text);
    v->asg_text = copy;
    v->asg_len = len;
    v->asg_version = version;
    return 0;
}

void
rl_view_deinit(struct rl_view *v)
{
    free(v->members);
    free(v->asg_text);
    memset(v, 0, sizeof(*v));
}

int
rl_view_build(struct rl_shardmap **out, uint32_t nshards, const struct rl_view *v, char *err,
              size_t errlen)
{
    struct rl_assignment a;
    bool have = false;
    int rc;

    if (errlen > 0) {
        err[0] = '\0';
    }
    if (v->asg_len > 0) {
        rc = rl_assignment_init(&a, nshards);
        if (rc != 0) {
            return rc;
        }
        if (rl_assignment_parse(&a, v->asg_text, v->asg_len, err, errlen) == 0) {
            have = true;
        } else {
            rl_assignment_deinit(&a);
        }
    }
    rc = rl_shardmap_create(out, nshards, v->members, v->nmembers, have ? &a : NULL);
    if (have) {
        rl_assignment_deinit(&a);
    }
    return rc;
}
