"""The blocking client against real rl-node and rl-router processes."""

import os
import signal
import subprocess
import threading
import time

import pytest

import harness
import socket

import ratelimiter
from ratelimiter import Client, ClientPool, Code, Timeout, Unavailable, headers

pytestmark = pytest.mark.integration


def test_ping_stats(cluster):
    with ratelimiter.connect("127.0.0.1", cluster.port) as c:
        # the router's default name, the one it announces in ZooKeeper
        assert c.ping() == f"{socket.gethostname() or 'router'}@127.0.0.1:{cluster.port}"
        assert "checks" in c.stats()


def test_fixed_window_exact_counts_and_remaining(cluster):
    with Client("127.0.0.1", cluster.port) as c:
        replies = [c.check("fw", "exact") for _ in range(25)]
    assert [r.code for r in replies] == [Code.ALLOWED] * 10 + [Code.LIMITED] * 15
    assert [r.remaining for r in replies] == list(range(9, -1, -1)) + [0] * 15
    assert all(r.limit == 10 for r in replies)
    assert all(r.retry_after_ms > 0 for r in replies[10:])
    assert all(r.retry_after_ms == 0 for r in replies[:10])
    assert all(0 < r.reset_ms <= 3600_000 for r in replies)


def test_endpoint_cost_peek_and_no_rule(cluster):
    with Client("127.0.0.1", cluster.port) as c:
        assert c.check("fw", "cost", cost=4).remaining == 6
        assert c.check("fw", "cost", cost=0).remaining == 6      # a peek counts nothing
        assert c.check("fw", "cost", cost=7).code == Code.LIMITED
        assert c.check("fw", "cost", cost=6).remaining == 0
        assert c.check("nosuch", "cost").code == Code.NO_RULE
        assert c.check("fw", "cost", "/anything").code == Code.LIMITED  # [service fw] applies


def test_reply_to_unknown_id_is_protocol_error(cluster):
    with Client("127.0.0.1", cluster.port) as c:
        c.ping()
        sock = c._sock
        sock.sendall(b"\x00\x00\x00\x04\x92\xcc\xc8\x05")  # op 200: UNKNOWN_OP, id 5
        with pytest.raises(ratelimiter.ProtocolError):   # an id this client never sent
            c.ping()
        assert not c.connected
        assert c.check("fw", "after-error").remaining == 9  # reconnected


def test_check_many_1000_via_router(cluster):
    with Client("127.0.0.1", cluster.port) as c:
        rs = c.check_many([("big", "pipe-r")] * 1000)
    assert len(rs) == 1000
    ids = [r.id for r in rs]
    assert ids == sorted(ids) and len(set(ids)) == 1000         # request (= id) order
    assert all(r.code == Code.ALLOWED for r in rs)
    # the router spreads one client's requests over its two connections to the node, so
    # the node may count them in another order: every value exactly once
    assert sorted(r.remaining for r in rs) == list(range(100000 - 1000, 100000))


def test_check_many_1000_exact_sequence_direct_to_node(cluster):
    with Client("127.0.0.1", cluster.node_ports["a"]) as c:
        rs = c.check_many([("big", "pipe-n")] * 1000 + [("fw", "pipe-n")] * 12)
    assert [r.remaining for r in rs[:1000]] == list(range(99999, 98999, -1))
    assert [r.id for r in rs] == sorted(r.id for r in rs)
    assert [r.code for r in rs[1000:]] == [Code.ALLOWED] * 10 + [Code.LIMITED] * 2


def test_check_many_distinct_users_and_errors(cluster):
    with Client("127.0.0.1", cluster.port) as c:
        rs = c.check_many([ratelimiter.Check("fw", f"many{i}") for i in range(300)])
        assert all(r.code == Code.ALLOWED and r.remaining == 9 for r in rs)
        assert c.check_many([]) == []


def test_pool_threads(cluster):
    pool = ClientPool("127.0.0.1", cluster.port, size=4)
    results = []
    lock = threading.Lock()

    def work(t):
        for i in range(50):
            r = pool.check("big", "pool")
            with lock:
                results.append(r.remaining)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pool.close()
    assert sorted(results) == list(range(100000 - 400, 100000))
    assert pool._created <= 4


def test_headers_of_real_replies(cluster):
    with Client("127.0.0.1", cluster.port) as c:
        first = c.check("http", "hdr")
        status, h = headers(first, window_s=10, legacy=True)
        t = ratelimiter.ceil_s(first.reset_ms)
        assert status == 0 and 1 <= t <= 10
        assert h == [("RateLimit-Policy", '"http";q=3;w=10'),
                     ("RateLimit", f'"http";r=2;t={t}'),
                     ("X-RateLimit-Limit", "3"), ("X-RateLimit-Remaining", "2"),
                     ("X-RateLimit-Reset", str(t))]
        c.check_many([("http", "hdr")] * 2)
        lim = c.check("http", "hdr")
        status, h = headers(lim, name="my api")
        s = ratelimiter.ceil_s(lim.retry_after_ms)
        assert status == 429 and 1 <= s <= 10
        assert h == [("RateLimit-Policy", '"my api";q=3'),
                     ("RateLimit", f'"my api";r=0;t={ratelimiter.ceil_s(lim.reset_ms)}'),
                     ("Retry-After", str(s))]
        assert headers(c.check("nosuch", "hdr")) == (0, [])
        q1, q2 = c.check("leaky", "hdr"), c.check("leaky", "hdr")
        assert q1.code == Code.ALLOWED and q2.code == Code.QUEUED and q2.delay_s > 0
        assert headers(q2) == (0, [("RateLimit-Policy", '"leaky";q=4'),
                                   ("RateLimit", f'"leaky";r={q2.remaining};t={ratelimiter.ceil_s(q2.reset_ms)}')])


# A call's timeout in the timeout tests: long enough that a loaded machine's scheduling
# delays stay far under it, so "not before it, and under twice it" (or "under it" for an
# answer that needs no timeout) holds on any machine.
CALL_S = 1.0


def test_timeout_against_stopped_router_then_recovers(fresh_cluster):
    c = Client("127.0.0.1", fresh_cluster.port, timeout=CALL_S)
    assert c.check("fw", "stop").remaining == 9
    os.kill(fresh_cluster.router.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        with pytest.raises(Timeout) as e:
            c.check("fw", "stop")
        took = time.monotonic() - t0
        assert CALL_S - 0.05 <= took < 2 * CALL_S - 0.1, took
        assert e.value.in_doubt and not c.connected      # closed, never reused
        t0 = time.monotonic()
        with pytest.raises(Timeout):
            c.ping(timeout=CALL_S / 4)                   # its own timeout, not the client's
        assert time.monotonic() - t0 < CALL_S - 0.05
    finally:
        os.kill(fresh_cluster.router.pid, signal.SIGCONT)
    r = c.check("fw", "stop")                              # a new connection
    assert r.code == Code.ALLOWED and r.remaining in (7, 8)
    time.sleep(0.2)
    # the CHECK that timed out was counted once the router ran again, and only once:
    # nothing was re-sent
    assert c.check("fw", "stop", cost=0).remaining == 7
    c.close()


def test_failure_policy_router_killed(fresh_cluster):
    c = Client("127.0.0.1", fresh_cluster.port, timeout=CALL_S,
               failure={"fw": "open", "fwc": "closed"})
    assert c.check("fw", "pol").code == Code.ALLOWED
    fresh_cluster.kill_router()
    t0 = time.monotonic()
    o = c.check("fw", "pol")
    cl = c.check("fwc", "pol", "/x")
    assert time.monotonic() - t0 < CALL_S - 0.05          # refused: no timeout waited
    assert o == ratelimiter.Reply(Code.FAIL_OPEN, service="fw", local=True)
    assert cl == ratelimiter.Reply(Code.FAIL_CLOSED, retry_after_ms=1000, service="fwc",
                                   endpoint="/x", local=True)
    assert headers(o) == (0, [])
    assert headers(cl) == (503, [("Retry-After", "1")])
    with pytest.raises(Unavailable) as e:                  # no policy for this service
        c.check("big", "pol")
    assert not e.value.in_doubt                            # nothing was sent
    mixed = c.check_many([("fw", "p"), ("fwc", "p")])
    assert [r.code for r in mixed] == [Code.FAIL_OPEN, Code.FAIL_CLOSED]
    with pytest.raises(Unavailable):
        c.ping()
    c.close()


def test_failure_policy_router_stopped_returns_within_timeout(fresh_cluster):
    c = Client("127.0.0.1", fresh_cluster.port, timeout=CALL_S, failure_default="closed",
               failure={"fw": "open"})
    c.ping()
    os.kill(fresh_cluster.router.pid, signal.SIGSTOP)
    try:
        for svc, code in (("fw", Code.FAIL_OPEN), ("fwc", Code.FAIL_CLOSED),
                          ("big", Code.FAIL_CLOSED)):
            t0 = time.monotonic()
            r = c.check(svc, "stopped")
            assert r.code == code and r.local
            assert CALL_S - 0.05 <= time.monotonic() - t0 < 2 * CALL_S - 0.1
    finally:
        os.kill(fresh_cluster.router.pid, signal.SIGCONT)


def test_reconnect_after_router_restart(fresh_cluster):
    c = Client("127.0.0.1", fresh_cluster.port, timeout=1.0)
    assert c.check("fw", "restart").remaining == 9
    fresh_cluster.kill_router()
    with pytest.raises(Unavailable):
        c.check("fw", "restart")
    fresh_cluster.start_router()
    # the node kept its counters; the client reconnects on its own
    assert c.check("fw", "restart").remaining == 8
    # restart again while the client holds an idle connection: replaced before sending
    fresh_cluster.kill_router()
    fresh_cluster.start_router()
    assert c.check("fw", "restart").remaining == 7
    c.close()


def test_node_down_cluster_failure_policy(fresh_cluster):
    c = Client("127.0.0.1", fresh_cluster.port, timeout=2.0)
    fresh_cluster.kill_node("a")
    o, cl = c.check("fw", "nd"), c.check("fwc", "nd")
    assert o.code == Code.FAIL_OPEN and not o.local and headers(o) == (0, [])
    assert cl.code == Code.FAIL_CLOSED and not cl.local
    assert headers(cl) == (503, [("Retry-After", str(ratelimiter.ceil_s(cl.retry_after_ms)))])
    c.close()
