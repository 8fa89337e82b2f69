/*
 * authfail: failed AUTHs per client network, as a GCRA per entry (the time all of its failures
 * are forgiven), for conn_listen.c's refusals (docs/OPERATIONS.md, "Limits on clients"). A
 * network is an IPv4 address, or an IPv6 /64 (what one host or one site is given). Entries are
 * kept exactly, by network, in a fixed table of buckets of RL_AUTHFAIL_WAYS: an address is only
 * ever refused for its own network's failures (no slot is shared with other networks, which
 * let an attacker with many addresses shut every client out: the attack round of
 * 2026-11-30). A bucket that is full forgets the entry closest to being forgiven, so a flood
 * from more networks than the table holds costs those networks their memory of failures,
 * never another network its AUTH. No locks: the caller holds one when the table is shared.
 * (Which also means a flood from many networks gets RL_CONN_AUTHFAIL_RATE failures a second
 * from each: tokens are 16 bytes at least, against which that is no help.)
 */
#ifndef RL_AUTHFAIL_H
#define RL_AUTHFAIL_H

#include <stdint.h>

#define RL_AUTHFAIL_BUCKETS 2048u
#define RL_AUTHFAIL_WAYS 8u

struct rl_authfail_entry {
    uint8_t net[16]; /* the network: the address, its IPv6 host half zeroed */
    uint64_t full;   /* loop time (ms) at which its failures are all forgiven; 0: free */
};

struct rl_authfail {
    uint64_t seed;
    uint32_t hand; /* where a full bucket's choice starts: ties taken in turn */
    struct rl_authfail_entry e[RL_AUTHFAIL_BUCKETS][RL_AUTHFAIL_WAYS];
};

/* A new table, empty, its seed (where the buckets fall) from the kernel's random source;
 * NULL when out of memory. About 400 KB. Freed by rl_authfail_free (NULL: nothing). */
struct rl_authfail *rl_authfail_new(void);
void rl_authfail_free(struct rl_authfail *t);

/* Milliseconds before addr (16 bytes, IPv4 mapped into IPv6) may try again: its network's
 * failures past burst, at every_ms each (0: it may). */
uint64_t rl_authfail_wait(const struct rl_authfail *t, const uint8_t *addr, uint64_t now,
                          uint64_t every_ms, uint32_t burst);

/* addr failed an AUTH at now: its network's entry, made if absent, is charged every_ms. */
void rl_authfail_charge(struct rl_authfail *t, const uint8_t *addr, uint64_t now,
                        uint64_t every_ms);

#endif
