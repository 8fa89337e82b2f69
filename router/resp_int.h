/*
 * resp_int: what the files of the RESP front share, and nothing else includes. They are
 * layered, each calling only the ones below it:
 *   resp.c        the connection: front.c's callbacks, reading commands, the per-loop state;
 *   resp_cmd.c    the command table (name, arity, flags, handler in one row) and the
 *                 dispatch through it; the connection's own commands (AUTH, HELLO, CLIENT,
 *                 COMMAND, INFO...);
 *   resp_check.c  the commands that go to the nodes (CL.THROTTLE, RL.CHECK, RL.MCHECK,
 *                 RL.ADJUST, RL.RELEASE) and
 *                 the ring of replies kept in the order of the commands;
 *   resp_in.c     the unread input and its held count (knows no router).
 * docs/RESP.md says what they serve. Not for the parsing (common/resp.c).
 */
#ifndef RL_RESP_INT_H
#define RL_RESP_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "resp.h"
#include "resp_front.h"
#include "resp_in.h"
#include "wire.h"

struct rl_front_conn;
struct rl_router;
struct rl_pending;
struct rl_client_conf;

#define RESP_PIPELINE_MAX 1024u             /* commands waiting for an answer, per connection */
#define RESP_CHUNK 16u /* slots allocated at a time: the ring grows as a pipeline deepens */
#define RESP_CHUNKS (RESP_PIPELINE_MAX / RESP_CHUNK)
#define RESP_WRITE_QUEUE_MAX (1024u * 1024) /* unsent output at which reading stops (front.c) */
#define RESP_HELD_MAX (RL_RESP_CMD_MAX + 1024u * 1024) /* unread input held per connection */
#define RESP_MCHECK_MAX 64u                            /* keys of one RL.MCHECK */
#define RESP_NAME_MAX 128u                             /* CLIENT SETNAME, HELLO SETNAME */
#define RESP_AUTH_TRIES 3u /* wrong AUTHs before the connection closes */
#define RESP_TICK_MS 1000u
#define RESP_LINGER_MS 2000u        /* after QUIT or a protocol error: input dropped this long */
#define RESP_COMPAT_VERSION "7.0.0" /* what HELLO and INFO say as redis_version */

enum resp_kind { RESP_SYNC, RESP_THROTTLE, RESP_CHECK, RESP_MCHECK };

struct resp_conn;
struct resp_slot;

/* One CHECK of a command: in flight, or answered. */
struct rl_resp_part {
    struct resp_slot *slot;
    struct rl_pending *p; /* in flight; NULL once answered */
    struct rl_wire_check_reply rep;
    uint32_t err; /* the node refused it (an ERROR code); 0: rep holds the answer */
};

/* A command whose reply is not written yet: waiting for its CHECKs, or behind one that is. */
struct resp_slot {
    struct resp_conn *c;
    uint8_t kind;
    uint8_t proto; /* c->proto when the command was read: its answer's (a HELLO after it in
                      the pipeline changes the answers of the commands after that only) */
    bool done;
    struct rl_buf out; /* the reply, once done */
    uint32_t outstanding;
    uint32_t nparts;
    struct rl_resp_part one; /* nparts == 1 */
    struct rl_resp_part *parts;
    uint64_t burst;    /* CL.THROTTLE: max_burst + 1 */
    uint64_t quantity; /* CL.THROTTLE */
};

/* A RESP connection's protocol state (front.c holds the socket). */
struct resp_conn {
    struct rl_front_conn *fc;
    struct rl_router *r;
    struct rl_resp *g;       /* r's RESP state (r->resp) */
    struct resp_in in;       /* unread input: an incomplete command, or commands waiting */
    struct rl_buf out;       /* replies ready to write */
    /* ring of RESP_PIPELINE_MAX slots, in chunks of RESP_CHUNK allocated as the pipeline
     * deepens (resp_room); never moved, as answers in flight point into them */
    struct resp_slot *chunk[RESP_CHUNKS];
    uint32_t head, nslots;
    size_t chunk_bytes;  /* of the chunks allocated */
    size_t parts_bytes;  /* of the MCHECKs' part arrays in use */
    size_t slots_held;   /* held in buffer_memory (rl_front_hold) for both, with room for one
                            more chunk's and RL.MCHECK's worth when resp_room made it */
    uint64_t partial_ms; /* loop time since which an incomplete command waits; 0: none */
    uint64_t quit_ms;    /* loop time of the QUIT or protocol error; 0: none */
    uint64_t opened_ms;  /* loop time it was adopted ([clients] auth_timeout) */
    uint64_t id;
    int proto; /* 2, or 3 after HELLO 3 */
    bool authed;
    uint32_t auth_fails;
    const struct rl_client_conf *principal;
    /* rl_wire_tenant of (principal, peer), the same for every command until AUTH changes
     * the principal: computed once for tenant_of */
    uint32_t tenant;
    bool tenant_set;
    const struct rl_client_conf *tenant_of;
    char name[RESP_NAME_MAX];
    size_t name_len;
    bool quit, closing;
    bool paused; /* rl_front_pause asked: the ring is full and commands wait unread */
};

/* rl_resp.counts, in the order of RL_RESP_COUNT_NAMES */
enum { RESP_N_COMMANDS, RESP_N_THROTTLES, RESP_N_CHECKS, RESP_N_ERRORS, RESP_N_PROTOCOL };

/* A command's handler: its arguments, and where a reply written now goes. */
#define ARGS const struct rl_resp_cmd *cmd, struct rl_buf *b

static inline int
put_kv(struct rl_buf *b, const char *k, int64_t v)
{
    return rl_resp_put_str(b, k) != 0 || rl_resp_put_int(b, v) != 0 ? -1 : 0;
}

/* ---- resp_cmd.c ----------------------------------------------------------------------- */

/* Runs one command through the command table (c->g->cmd). -ENOMEM: close. */
int resp_command(struct resp_conn *c, const struct rl_resp_cmd *cmd);

/* ---- resp_check.c --------------------------------------------------------------------- */

/* Where a reply written now goes (c->out, or a slot of its own behind the replies that
 * wait); NULL: no slot free. */
struct rl_buf *resp_reply_to(struct resp_conn *c);

/* Moves the replies of the slots done at the head of the ring to c->out. -1: out of memory. */
int resp_drain(struct resp_conn *c);

/* Closing: orphans the CHECKs in flight and frees the ring. */
void resp_slots_free(struct resp_conn *c);

/* The slot k places after the head of c's ring (its chunk allocated). */
static inline struct resp_slot *
resp_slot_at(struct resp_conn *c, uint32_t k)
{
    uint32_t i = (c->head + k) % RESP_PIPELINE_MAX;

    return &c->chunk[i / RESP_CHUNK][i % RESP_CHUNK];
}

/* Whether c may run one more command: a slot free in its ring, and the memory of the slot and
 * of an RL.MCHECK's parts held in [clients] buffer_memory (a connection with nothing in flight
 * may make room as one that needs input bytes does, rl_front_hold; one with commands in
 * flight waits for their answers instead). False: the command waits, unread. */
bool resp_room(struct resp_conn *c);

/* The handlers of CL.THROTTLE, RL.CHECK, RL.MCHECK (arity checked by the table): an error
 * reply goes to b; otherwise a slot waits for the answer. -ENOMEM: close. */
int resp_throttle(struct resp_conn *c, ARGS);
int resp_check(struct resp_conn *c, ARGS);
int resp_mcheck(struct resp_conn *c, ARGS);
/* RL.ADJUST and RL.RELEASE, likewise (an ADJUST or a RELEASE, answered as RL.CHECK). */
int resp_adjust(struct resp_conn *c, ARGS);
int resp_release(struct resp_conn *c, ARGS);

#endif
