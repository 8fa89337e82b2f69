/*
 * proxy: a TCP forwarder on loopback for integration tests, to cut one process off from
 * another (a node from ZooKeeper) while both keep running. One thread, poll(2), at most
 * RL_PROXY_PAIRS connections. Not for production traffic.
 */
#ifndef RL_TEST_PROXY_H
#define RL_TEST_PROXY_H

#define RL_PROXY_PAIRS 32

enum rl_proxy_mode {
    RL_PROXY_PASS,      /* forward both ways */
    RL_PROXY_BLACKHOLE, /* accept, read nothing, forward nothing: a silent partition */
};

struct rl_proxy;

/* Listens on 127.0.0.1:*port (chosen when 0) and forwards to 127.0.0.1:target. 0 or -errno. */
int rl_proxy_start(struct rl_proxy **out, int target, int *port);
void rl_proxy_set_mode(struct rl_proxy *p, enum rl_proxy_mode mode);
/* Stops the thread and closes every socket; NULL is a no-op. */
void rl_proxy_stop(struct rl_proxy *p);

#endif
