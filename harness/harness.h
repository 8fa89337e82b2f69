/*
 * harness: what integration tests need to run real processes on loopback and always stop
 * them: a per-process temp directory, free ports, spawning with PR_SET_PDEATHSIG, stopping
 * with a deadline, a throwaway ZooKeeper server (Debian's package, run with java) and
 * wrappers that start rl-node and rl-router and wait until they listen.
 * Not for unit tests of a module, and not a cluster model: a test states what it checks.
 * Part of the process-harness library rlproc (harness/: harness.c the temp files and ports,
 * harness_proc.c the processes, harness_server.c, harness_zk.c, the fault proxy
 * of proxy.h, the HTTP client of httpget.h), which the integration suites and rl-chaos link;
 * it has no test framework in it (tests/rltest.h adds Check's).
 *
 * Ownership. Every process and temp directory belongs to the process that created it
 * (getpid() at the time). rl_harness_cleanup(), which also runs at exit and on SIGTERM,
 * SIGINT, SIGHUP and SIGALRM when those would otherwise kill the test, touches only what
 * the calling process owns. So with Check's fork mode, a ZooKeeper started in an unchecked
 * fixture (the runner process) survives the tests, and a test's own processes die with the
 * test's child process, however it ends: exit, failed assertion (Check calls _exit), crash,
 * timeout (Check sends SIGKILL) or SIGKILL of the test binary, because every spawned process
 * has PR_SET_PDEATHSIG = SIGKILL, and so does a forked test process that spawns (it dies
 * with Check's runner, rather than run on without its timer). Caveats: the kernel ties it to the
 * *thread* that spawned, so spawn from the test's main thread (or one that outlives the
 * process); and it reaches the direct child only, so a program that forks its own children
 * must put them in its process group, which rl_harness_cleanup() kills as a whole.
 * With CK_FORK=no every test shares one process, so a cleanup in a checked teardown also
 * stops what an unchecked fixture started.
 *
 * Environment: RL_KEEP_TMP=1 keeps temp directories (and prints where they are);
 * RL_BIN_DIR overrides the build directory compiled in; RL_JAVA and RL_ZK_CLASSPATH
 * override the java binary and ZooKeeper's classpath; RL_ZK_LOG_LEVEL (default "warn")
 * sets the ZooKeeper server's log level in its log file.
 *
 * Every function returns 0 or a negative errno unless its comment says otherwise.
 * Timeouts are in milliseconds. Check's default test timeout (4 s) is too short for a test
 * that starts ZooKeeper: give such test cases tcase_set_timeout(tc, 30) or more.
 */
#ifndef RL_HARNESS_H
#define RL_HARNESS_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* At most this many processes alive at once per test process. */
#define RL_HARNESS_MAX_PROCS 64
/* How long the start wrappers wait for a port, and stops wait before SIGKILL. */
#define RL_HARNESS_START_TIMEOUT_MS 15000
#define RL_HARNESS_STOP_TIMEOUT_MS 10000
/* Longest znode name rl_harness_zk_children() returns, NUL included. */
#define RL_HARNESS_ZK_NAME_MAX 256

/* ---- Files ----------------------------------------------------------------------------- */

/*
 * This process's temp directory, created on first use. The test binary's first process
 * (Check's runner) owns a root, mkdtemp of rl-test-XXXXXX in $TMPDIR or /tmp, whichever
 * process creates it; every other process (a forked test) gets its own pPID-XXXXXX in it.
 * A process's cleanup removes its own directory, and the runner's exit removes the root, so
 * tests that failed an assertion or were killed on timeout leave nothing behind either.
 * Returns a string that stays valid until rl_harness_cleanup(), or NULL with errno set.
 */
const char *rl_harness_tmpdir(void);

/* Formats a path under rl_harness_tmpdir() into buf. -ENAMETOOLONG if it does not fit. */
int rl_harness_tmppath(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Writes a file from a format, atomically (a temporary beside it, then rename(2)). */
int rl_harness_write_file(const char *path, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/*
 * Reads up to len - 1 bytes of a file into buf and NUL-terminates it (logs, for assertions).
 * Returns the number of bytes read, or a negative errno.
 */
int rl_harness_read_file(const char *path, char *buf, size_t len);

/*
 * Runs a program to its end (a tool: rl-cli, rl-chaos...), argv[0] resolved as for
 * rl_harness_spawn, with its stdout and stderr in a fresh file of the tmpdir read back into
 * out (len bytes, NUL-terminated). Returns its exit status (0..255), or a negative errno:
 * -ETIMEDOUT after timeout_ms (it is killed), -ECHILD if a signal ended it.
 */
int rl_harness_run(const char *const argv[], char *out, size_t len, int timeout_ms);

/* Prints the last max_lines lines of a log to stderr, framed with its path (on failures). */
void rl_harness_print_log(const char *path, int max_lines);

/* ---- TLS ------------------------------------------------------------------------------- */

/* A throwaway self-signed CA made with the openssl command: DIR/NAME.pem and DIR/NAME.key.
 * Returns 0, or the failed run's status (its output printed). */
int rl_harness_tls_ca(const char *dir, const char *name);

/* A certificate for NAME (subjectAltName IP 127.0.0.1) signed by DIR/CA.pem: DIR/NAME.pem and
 * DIR/NAME.key, mode 0600. Returns 0, or the failed run's status. */
int rl_harness_tls_cert(const char *dir, const char *name, const char *ca);

/* ---- Ports ----------------------------------------------------------------------------- */

/*
 * A loopback TCP port that nothing is bound to now, never returned before in this process
 * or its ancestors. It is drawn below the kernel's ephemeral range (ip_local_port_range),
 * so the outgoing connections of the processes under test cannot take it before the
 * server binds it. Returns the port (> 0) or a negative errno.
 */
int rl_harness_free_port(void);

/* Polls until a TCP connect to host:port succeeds; -ETIMEDOUT after timeout_ms. */
int rl_harness_wait_port(const char *host, int port, int timeout_ms);

/* ---- Processes ------------------------------------------------------------------------- */

/*
 * Starts argv[0] with arguments argv (NULL-terminated) in its own process group, stdin from
 * /dev/null, stdout and stderr appended to log_path (NULL: /dev/null), other descriptors
 * closed, signal mask and dispositions reset, and PR_SET_PDEATHSIG = SIGKILL. A bare name
 * ("rl-node") is looked up in the build directory, then in $PATH; the environment is
 * inherited (setenv() before spawning to pass variables). The process is registered
 * for rl_harness_cleanup() and *pid set. Returns -ENOENT, -EACCES... if exec failed (the
 * child is reaped), -EAGAIN if RL_HARNESS_MAX_PROCS are running.
 */
int rl_harness_spawn(const char *const argv[], const char *log_path, pid_t *pid);

/*
 * Waits up to timeout_ms (0: just looks) for a process of ours to exit, and reaps it; on
 * success *status (may be NULL) holds its wait status (WIFEXITED...). Returns -ETIMEDOUT
 * if it still runs (it is left running), -ECHILD if pid is not a running process of ours.
 */
int rl_harness_wait(pid_t pid, int timeout_ms, int *status);

/*
 * Sends sig to the process, waits up to timeout_ms for it to exit, then SIGKILLs its process
 * group. The process is reaped either way (its group's stragglers are killed), and *status
 * (may be NULL) holds its wait status. Returns 0 if it exited within the timeout,
 * -ETIMEDOUT if it had to be killed, -ECHILD if pid is not a running process of ours.
 */
int rl_harness_stop(pid_t pid, int sig, int timeout_ms, int *status);

/* SIGKILLs the process's group and reaps it: a crash, as the rest of the cluster sees it. */
int rl_harness_kill9(pid_t pid);

/* Sends pid SIGSTOP and waits (up to 10 s) until the kernel shows it stopped (state T in
 * /proc/PID/stat): kill(2) returns before a process running on another core has stopped,
 * and a test that counts on the pause must not race it. 0, or a negative errno. */
int rl_harness_pause(pid_t pid);

/*
 * SIGKILLs every process this process spawned that still runs (the whole process group),
 * reaps them, closes nothing else, and removes this process's temp directory unless
 * RL_KEEP_TMP=1. Idempotent; runs at exit; call it from a checked teardown too.
 */
void rl_harness_cleanup(void);

/* How many processes spawned through the harness (by this process or, in Check's fork mode,
 * by the runner before the fork) are running. */
int rl_harness_live_procs(void);

/*
 * Windows of an hour (fixed_window and sliding_window_counter "per 1h") are aligned to the
 * epoch, so they end at every wall-clock hour: a test counting in one across that instant
 * sees its counts restart. rl_harness_clear_of_hour(need_ms) sleeps past the hour's end when
 * less than need_ms is left before it, saying so on stderr. With
 * rl_harness_set_hour_clear(need_ms) (the test suites' rl_test_run sets
 * RL_HARNESS_HOUR_CLEAR_MS; rl-chaos, which counts in windows of seconds, sets nothing), a
 * cluster's first process, ZooKeeper or a server started while no harness process runs,
 * calls it first, so a test that starts its cluster has that long before an hour's end.
 */
#define RL_HARNESS_HOUR_CLEAR_MS 30000
void rl_harness_clear_of_hour(int need_ms);
void rl_harness_set_hour_clear(int need_ms);
/* What a cluster's first process calls: rl_harness_clear_of_hour(the set need), if any. */
void rl_harness_first_of_cluster(void);

/* ---- ZooKeeper ------------------------------------------------------------------------- */

/*
 * Where a process runs in a multi-host test (scripts/netns.sh): a network namespace it is
 * started in (`ip netns exec NETNS`, so the test must run as root) and the address it binds
 * and is dialled at. Zeroed: this process's namespace and 127.0.0.1, as everywhere else.
 */
struct rl_harness_host {
    char netns[64];
    char addr[64]; /* an IPv4 or IPv6 literal */
    bool any;      /* listen on the wildcard (0.0.0.0, or [::]), and be dialled at addr */
};

/* A standalone ZooKeeper server. Zero it before the first rl_harness_zk_start(). */
struct rl_harness_zk {
    int port;                /* client port on 127.0.0.1, chosen at the first start */
    pid_t pid;               /* the JVM while it runs, else 0 */
    char connect[96];        /* "127.0.0.1:PORT" (or its host's): cluster.conf's zookeeper */
    char dir[PATH_MAX];      /* zoo.cfg, data/ and zk.log */
    char log_path[PATH_MAX]; /* the JVM's stdout and stderr */
    int64_t start_ms;        /* how long the last start took until ZooKeeper served */
    struct rl_harness_host host; /* set before the first start; zeroed: loopback, here */
};

/*
 * Starts the server and waits (up to 30 s) until it serves (the "srvr" four-letter word
 * answers with its version, which it does only once its database is loaded). On a zeroed
 * struct, picks a port and a directory under rl_harness_tmpdir(), writes zoo.cfg
 * (tickTime 200 ms, sessions 400 ms..30 s, admin server off, all four-letter words); on a
 * stopped one, starts again on the same port and data. Returns -EALREADY if it runs,
 * -ECHILD if the JVM exited first (its log is printed), -ETIMEDOUT.
 */
int rl_harness_zk_start(struct rl_harness_zk *zk);

/*
 * Picks the port and the directory and writes zoo.cfg as the first rl_harness_zk_start()
 * would, without starting the server: zk->connect is then known, for a test whose clients
 * must exist before the server does. The start that follows uses that port (it cannot try
 * another if someone took it meanwhile). 0 if already prepared; -EALREADY if it runs.
 */
int rl_harness_zk_prepare(struct rl_harness_zk *zk);

/*
 * SIGTERM, wait, SIGKILL after RL_HARNESS_STOP_TIMEOUT_MS. Data stays for a restart.
 * For an outage without losing sessions, kill(zk->pid, SIGSTOP) and later SIGCONT.
 */
int rl_harness_zk_stop(struct rl_harness_zk *zk);

/* Stops it if it runs and starts it again on the same port with the same data. */
int rl_harness_zk_restart(struct rl_harness_zk *zk);

/*
 * Reads the children of path with a short-lived session of the C client, sorted by name,
 * into names (at most max of them, truncated to RL_HARNESS_ZK_NAME_MAX - 1 bytes). Returns
 * how many children there are (like snprintf, may exceed max), -ENOENT if path does not
 * exist, -ETIMEDOUT if no session could be made within 5 s.
 */
int rl_harness_zk_children(const char *connect, const char *path,
                           char names[][RL_HARNESS_ZK_NAME_MAX], int max);

/*
 * Reads the data of path into buf, NUL-terminated, truncated to len - 1 bytes. Returns the
 * data's full length, -ENOENT if path does not exist, -ETIMEDOUT.
 */
int rl_harness_zk_get(const char *connect, const char *path, char *buf, size_t len);

/* Creates path (and missing parents, empty) as a persistent znode holding data, or sets it. */
int rl_harness_zk_put(const char *connect, const char *path, const void *data, size_t len);

/* Deletes path as an unauthenticated client: 0, or the errno of zk_errno (-EACCES: ACL). */
int rl_harness_zk_delete(const char *connect, const char *path);

/* Polls until path has exactly want children (no path counts as none); -ETIMEDOUT. */
int rl_harness_zk_wait_children(const char *connect, const char *path, int want, int timeout_ms);

/* ---- rl-node and rl-router ------------------------------------------------------------- */

/* rl_harness_node_start() flags. */
#define RL_HARNESS_TEST_CLOCK 0x1u /* --test-clock */

/* A program under test, started by the wrappers below and restartable as it was. */
struct rl_harness_server {
    char program[16];        /* "rl-node" or "rl-router" */
    char config[PATH_MAX];   /* --config */
    char name[64];           /* a node's --name; empty for a router */
    int port;                /* --listen 127.0.0.1:PORT; 0: the config's, and no wait */
    unsigned flags;          /* RL_HARNESS_TEST_CLOCK */
    int workers;             /* a router's --workers; 0: the config's */
    pid_t pid;               /* while it runs, else 0 */
    int status;              /* wait status of its last exit */
    char log_path[PATH_MAX]; /* stdout and stderr, appended across restarts */
    struct rl_harness_host host; /* where it runs; zeroed: loopback, here */
};

/*
 * Starts "rl-node --config CONFIG --name NAME [--listen 127.0.0.1:PORT] [--test-clock]"
 * logging to TMPDIR/node-NAME.log, and with a port waits until it accepts connections.
 * Returns -ECHILD if it exited first (s->status holds why, its log is printed), -ETIMEDOUT
 * (it is killed).
 */
int rl_harness_node_start(struct rl_harness_server *s, const char *config, const char *name,
                          int port, unsigned flags);

/* Routers under test serve with this many workers (--workers) unless a test says otherwise
 * (or $RL_TEST_ROUTER_WORKERS, for comparing runs): the suites exercise the threads' sharing. */
#define RL_HARNESS_ROUTER_WORKERS 2

/* As rl_harness_node_start(), for "rl-router --config CONFIG [--listen 127.0.0.1:PORT]
 * --workers RL_HARNESS_ROUTER_WORKERS". */
int rl_harness_router_start(struct rl_harness_server *s, const char *config, int port);

/* The same with --workers N (0: none given, the config's [router] workers or one per core). */
int rl_harness_router_start_workers(struct rl_harness_server *s, const char *config, int port,
                                    int workers);

/*
 * rl_harness_node_start() and rl_harness_router_start_workers() on another host: started
 * under `ip netns exec host->netns` (when set), listening on host->addr:PORT, waited for
 * there. Restarts keep the host.
 */
int rl_harness_node_start_at(struct rl_harness_server *s, const struct rl_harness_host *host,
                             const char *config, const char *name, int port, unsigned flags);
int rl_harness_router_start_at(struct rl_harness_server *s, const struct rl_harness_host *host,
                               const char *config, int port, int workers);

/*
 * rl_harness_stop() of the server (SIGTERM: the clean shutdown; SIGKILL: a crash), which
 * sets s->status and s->pid = 0. Returns as rl_harness_stop(); 0 if it was not running
 * (s->pid 0, or already reaped through rl_harness_kill9(s->pid)).
 */
int rl_harness_server_stop(struct rl_harness_server *s, int sig, int timeout_ms);

/* Stops the server if it runs (SIGTERM) and starts it again with the same arguments. */
int rl_harness_server_restart(struct rl_harness_server *s);

/* ---- Internal -------------------------------------------------------------------------- */

/*
 * What the harness's files lend each other (harness.c to all, harness_proc.c to
 * harness_server.c and harness_zk.c), declared only for the files that define
 * RL_HARNESS_INTERNAL before including this header. Tests do not call these.
 */
#ifdef RL_HARNESS_INTERNAL

/* harness.c: the harness's one lock (process slots, the temp directory, ports), held across
 * fork() by its atfork hooks. */
void rl_harness_lock(void);
void rl_harness_unlock(void);

/* harness.c: the test binary's first process, which ran the harness's constructor. */
pid_t rl_harness_root_pid(void);

/* harness.c: what rl_harness_cleanup() runs first, before it removes the temp directory:
 * harness_proc.c's killing of the processes, given on its first spawn. */
void rl_harness_on_cleanup(void (*procs_cleanup)(void));

/* CLOCK_MONOTONIC in milliseconds. */
int64_t rl_harness_now_ms(void);

/* Sleeps ms milliseconds, resuming after signals. */
void rl_harness_sleep_ms(int ms);

/* Binds 127.0.0.1:port (0: any) without SO_REUSEADDR; returns the port bound or -errno. */
int rl_harness_probe_bind(int port);

/* Connects to 127.0.0.1:port within timeout_ms; returns the fd (non-blocking) or -errno. */
int rl_harness_connect_loopback(int port, int timeout_ms);

/* The same to host:port (an IPv4 or IPv6 literal; NULL or "": 127.0.0.1). */
int rl_harness_connect_host(const char *host, int port, int timeout_ms);

/* rl_harness_wait_ready() with a probe of host:port. */
int rl_harness_wait_ready_at(pid_t pid, int (*probe)(const char *host, int port), const char *host,
                             int port, int timeout_ms, int *status);

/*
 * argv with "ip netns exec NETNS" put in front when host names a namespace (the program
 * resolved to a path first, as ip looks it up in $PATH only), into out (room for n + 5
 * pointers) and path (PATH_MAX). Returns out, or NULL if the program is not found.
 */
const char **rl_harness_netns_argv(const struct rl_harness_host *host, const char *const argv[],
                                   const char **out, char *path);

/*
 * Waits until probe(port) returns 0 while watching pid, a process of ours. 0 when ready;
 * -ECHILD if the process exited first (reaped, *status set); -ETIMEDOUT (it still runs).
 */
int rl_harness_wait_ready(pid_t pid, int (*probe)(int port), int port, int timeout_ms, int *status);

#endif

#endif
