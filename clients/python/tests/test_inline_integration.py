"""Inline limits (docs/PROTOCOL.md, "Inline limits") through a real router and two nodes."""

import os
import signal
import time

import pytest

import harness
import ratelimiter
from ratelimiter import Check, Client, Code, ErrorCode, ServerError

pytestmark = pytest.mark.integration

ALGOS = [("fixed_window", None), ("sliding_window_log", None), ("sliding_window_counter", None),
         ("token_bucket", 5), ("gcra", 5), ("leaky_bucket", 5)]

# One configured service per algorithm with the inline limits' parameters, to compare with.
SERVICES = harness.DEFAULT_SERVICES + "".join(
    f"\n[service conf_{a}]\nlimit = {a} 5 per 1h{'' if b is None else f' burst {b}'}\n"
    for a, b in ALGOS) + "\n[service shop /pay]\nlimit = fixed_window 2 per 1h\n"

USERS = [f"user{i}" for i in range(12)]  # spread over both nodes


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    harness.need_binaries("rl-node", "rl-router")
    c = harness.Cluster(tmp_path_factory.mktemp("inline"), nodes=("a", "b"),
                        services=SERVICES).start()
    yield c
    c.stop()


def node_checks(cluster, name):
    with Client("127.0.0.1", cluster.node_ports[name]) as c:
        return c.stats()["checks"]


def test_each_algorithm_as_configured(two):
    """An inline limit decides exactly as the configured tier with the same parameters, on
    either node, and its count is its own (the configured service's is separate)."""
    before = {n: node_checks(two, n) for n in ("a", "b")}
    with Client("127.0.0.1", two.port) as c:
        for algo, burst in ALGOS:
            lim = (algo, 5, 3_600_000) if burst is None else (algo, 5, 3_600_000, burst)
            for u in USERS:
                got = [c.check("free", u, limit=lim).code for _ in range(8)]
                want = [c.check(f"conf_{algo}", u).code for _ in range(8)]
                assert got == want, (algo, u)
                if algo in ("fixed_window", "sliding_window_log", "token_bucket", "gcra"):
                    assert got == [Code.ALLOWED] * 5 + [Code.LIMITED] * 3, (algo, u)
                assert Code.ALLOWED in got and got[-1] != Code.ALLOWED, (algo, u)
    for n in ("a", "b"):  # both nodes judged some
        assert node_checks(two, n) > before[n]


def test_fixed_window_remaining_and_cost(two):
    with Client("127.0.0.1", two.port) as c:
        reps = [c.check("free", "fw-exact", limit="fixed_window 4 per 1h") for _ in range(6)]
        assert [r.code for r in reps] == [Code.ALLOWED] * 4 + [Code.LIMITED] * 2
        assert [r.remaining for r in reps] == [3, 2, 1, 0, 0, 0]
        assert all(r.limit == 4 for r in reps)
        assert reps[-1].retry_after_ms > 0
        # cost, peeks and endpoints as for configured rules
        assert c.check("free", "cost", limit=("gcra", 10, 3_600_000, 10), cost=4).remaining == 6
        assert c.check("free", "cost", limit=("gcra", 10, 3_600_000, 10), cost=0).remaining == 6
        assert c.check("free", "cost", "/x", limit=("gcra", 10, 3_600_000, 10),
                       cost=10).code == Code.ALLOWED  # another endpoint: another counter
        assert c.check("free", "cost", limit=("gcra", 10, 3_600_000, 10),
                       cost=7).code == Code.LIMITED


def test_two_limits_one_user_do_not_share(two):
    with Client("127.0.0.1", two.port) as c:
        for _ in range(3):
            assert c.check("free", "twice", limit=("fixed_window", 3, 3_600_000)).code == Code.ALLOWED
        assert c.check("free", "twice", limit=("fixed_window", 3, 3_600_000)).code == Code.LIMITED
        r = c.check("free", "twice", limit=("fixed_window", 3, 7_200_000))
        assert (r.code, r.remaining) == (Code.ALLOWED, 2)
        r = c.check("free", "twice", limit=("fixed_window", 4, 3_600_000))
        assert (r.code, r.remaining) == (Code.ALLOWED, 3)
        r = c.check("free", "twice", limit=("token_bucket", 3, 3_600_000))
        assert (r.code, r.remaining) == (Code.ALLOWED, 2)


def test_configured_service_refuses_inline(two):
    with Client("127.0.0.1", two.port) as c:
        for svc in ("conf_gcra", "shop"):  # a service-wide rule, an endpoint's only
            with pytest.raises(ServerError) as e:
                c.check(svc, "u", limit=("gcra", 1000, 1000))
            assert e.value.code == ErrorCode.BAD_FIELD
            assert "has configured rules: an inline limit is refused" in str(e.value)
        # its configured limit still applies, untouched
        assert c.check("shop", "u", "/pay").remaining == 1


def test_bad_inline_limit_refused(two):
    with Client("127.0.0.1", two.port) as c:
        # bypass the client's own checks: hand-made frames
        c._ensure()
        import msgpack
        from ratelimiter import protocol
        for lim, msg in ((["GCRA", 1, 1, None], "algorithm is unknown"),
                         (["gcra", 0, 1, None], "limit's limit must be"),
                         (["fixed_window", 1, 1, 2], "burst must be nil"),
                         (["gcra", 1, 1], "limit must be nil or")):
            rid = c._id()
            c._send(protocol.frame(msgpack.packb([1, rid, "free", "u", None, 1, lim])),
                    time.monotonic() + 2)
            got = []
            c._collect({rid: 0}, time.monotonic() + 2, lambda i, rep: got.append(rep))
            assert isinstance(got[0], protocol.ErrorReply) and got[0].code == ErrorCode.BAD_FIELD
            assert msg in got[0].message
        assert c.check("free", "still-fine", limit=("gcra", 1, 1000)).code == Code.ALLOWED


def test_client_validates_limit():
    with pytest.raises(ValueError):
        ratelimiter.protocol.validate_check(Check("s", "u", limit=("nope", 1, 1)))
    for bad in (("gcra", 0, 1), ("fixed_window", 1, 1, 5), ("gcra", 1, 2 ** 32), "gcra 1 per x",
                "gcra 1 every 1s"):
        with pytest.raises((ValueError, TypeError)):
            ratelimiter.protocol.validate_check(Check("s", "u", limit=bad))
    assert ratelimiter.protocol.parse_limit("gcra 10 per 1s burst 5") == ("gcra", 10, 1000, 5)
    assert ratelimiter.protocol.parse_limit("fixed_window 3 per 2m") == ("fixed_window", 3,
                                                                          120_000, None)


def test_bound_on_distinct_limits(tmp_path):
    """One client (a tenant: its address, without [client] sections) holds at most 4096
    distinct inline limits with counters on a node (the node's 65536 are shared by tenants,
    docs/PROTOCOL.md "Inline limits, by tenant")."""
    harness.need_binaries("rl-node", "rl-router")
    c = harness.Cluster(tmp_path / "bound", nodes=("a",), services=SERVICES).start()
    try:
        with Client("127.0.0.1", c.port, timeout=60) as cl:
            checks = [Check("free", "one", limit=("fixed_window", 10 + k, 3_600_000))
                      for k in range(4096)]
            reps = cl.check_many(checks, timeout=120)
            assert all(r.code == Code.ALLOWED for r in reps)
            with pytest.raises(ServerError) as e:
                cl.check("free", "one", limit=("fixed_window", 5, 3_600_000))
            assert e.value.code == ErrorCode.OVERLOADED
            assert "too many distinct inline limits on this node (4096)" in str(e.value)
            # known limits still answer, with their counts
            r = cl.check("free", "one", limit=("fixed_window", 10, 3_600_000))
            assert (r.code, r.remaining) == (Code.ALLOWED, 8)
            # configured rules are unaffected
            assert cl.check("fw", "one").code == Code.ALLOWED
    finally:
        c.stop()


def test_rules_reload_keeps_inline_counters(tmp_path):
    harness.need_binaries("rl-node", "rl-router")
    c = harness.Cluster(tmp_path / "reload", nodes=("a", "b"), services=SERVICES).start()
    try:
        with Client("127.0.0.1", c.port) as cl:
            for u in USERS:
                for _ in range(2):
                    assert cl.check("free", u, limit=("gcra", 3, 3_600_000)).code == Code.ALLOWED
            digests = {n: Client("127.0.0.1", p).stats()["rules_digest"]
                       for n, p in c.node_ports.items()}
            # New rules: configured tiers renumbered (a service in front), "free" still free.
            text = c.conf.read_text().replace("[service fw]", "[service first]\n"
                                              "limit = gcra 1 per 1s\nlimit = gcra 2 per 1s\n\n"
                                              "[service fw]", 1)
            c.conf.write_text(text)
            for p in list(c.nodes.values()) + [c.router]:
                os.kill(p.pid, signal.SIGHUP)
            deadline = time.monotonic() + 10
            for n, p in c.node_ports.items():
                while Client("127.0.0.1", p).stats()["rules_digest"] == digests[n]:
                    assert time.monotonic() < deadline, "rules never reloaded"
                    time.sleep(0.05)
            time.sleep(0.3)  # the router's reload too
            for u in USERS:
                r = cl.check("free", u, limit=("gcra", 3, 3_600_000))
                assert (r.code, r.remaining) == (Code.ALLOWED, 0), u
                assert cl.check("free", u, limit=("gcra", 3, 3_600_000)).code == Code.LIMITED
            assert cl.check("first", "x").code == Code.ALLOWED
            with pytest.raises(ServerError):
                cl.check("first", "x", limit=("gcra", 3, 3_600_000))
    finally:
        c.stop()


@pytest.mark.parametrize("policy", ["open", "closed"])
def test_owner_down_policy_and_restart_resets(tmp_path, policy):
    import re
    import urllib.request
    harness.need_binaries("rl-node", "rl-router")
    c = harness.Cluster(tmp_path / policy, nodes=("a", "b"), services=SERVICES)
    mport = harness.free_port()
    text = c.conf.read_text().replace("[router]\n", f"[router]\nmetrics = {mport}\n", 1)
    if policy == "closed":
        text = text.replace("[cluster]\n", "[cluster]\ninline_failure = closed\n", 1)
    c.conf.write_text(text)
    c.start()
    lim = ("fixed_window", 2, 3_600_000)
    try:
        with Client("127.0.0.1", c.port) as cl:
            for u in USERS:
                for _ in range(2):
                    assert cl.check("free", u, limit=lim).code == Code.ALLOWED
                assert cl.check("free", u, limit=lim).code == Code.LIMITED
            c.kill_node("a")
            down = Code.FAIL_OPEN if policy == "open" else Code.FAIL_CLOSED
            codes = {u: cl.check("free", u, limit=lim).code for u in USERS}
            on_a = [u for u in USERS if codes[u] == down]
            on_b = [u for u in USERS if codes[u] == Code.LIMITED]
            assert on_a and on_b and len(on_a) + len(on_b) == len(USERS), codes
            page = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics",
                                          timeout=5).read().decode()
            vals = dict(re.findall(r'^(rl_router_inline_decisions_total\S+) (\d+)$', page, re.M))
            assert vals[f'rl_router_inline_decisions_total{{code="{down.name.lower()}"}}'] == \
                str(len(on_a))
            assert vals['rl_router_inline_decisions_total{code="limited"}'] == \
                str(len(USERS) + len(on_b))
            # a configured service keeps its own policy (fw: open, fwc: closed)
            c.start_node("a")
            deadline = time.monotonic() + 10
            while cl.check("free", on_a[0], limit=("gcra", 1, 1000), cost=0).code == down:
                assert time.monotonic() < deadline, "router never reached node a again"
                time.sleep(0.05)
            # the restarted owner starts its users afresh, as for any counter
            for u in on_a:
                r = cl.check("free", u, limit=lim)
                assert (r.code, r.remaining) == (Code.ALLOWED, 1), u
            for u in on_b:
                assert cl.check("free", u, limit=lim).code == Code.LIMITED, u
    finally:
        c.stop()


def test_cli_check_limit(two):
    """rl-cli check --limit, in cluster.conf's limit syntax."""
    import subprocess
    harness.need_binaries("rl-cli")
    cli = [str(harness.BUILD / "rl-cli"), "--target", f"127.0.0.1:{two.port}", "check", "free",
           "cli-user", "--limit", "gcra 2 per 1h burst 2"]
    runs = [subprocess.run(cli, capture_output=True, text=True, timeout=10) for _ in range(3)]
    assert [r.returncode for r in runs] == [0, 0, 3], [r.stderr for r in runs]
    assert "ALLOWED" in runs[0].stdout and "LIMITED" in runs[2].stdout
    # the same limit from the Python client is the same counter
    with Client("127.0.0.1", two.port) as c:
        assert c.check("free", "cli-user", limit=("gcra", 2, 3_600_000, 2)).code == Code.LIMITED
    bad = subprocess.run(cli[:-1] + ["fixed_window 1 per 1s burst 3"], capture_output=True,
                         text=True, timeout=10)
    assert bad.returncode == 2 and "has a burst" in bad.stderr
    conf = subprocess.run(cli[:4] + ["fw", "u", "--limit", "gcra 1 per 1s"], capture_output=True,
                          text=True, timeout=10)
    assert conf.returncode == 1 and "configured rules" in conf.stdout


def test_node_metrics_count_inline(tmp_path):
    """Inline decisions have families of their own, with no label per service."""
    import re
    import urllib.request
    harness.need_binaries("rl-node", "rl-router")
    c = harness.Cluster(tmp_path / "metrics", nodes=("a",), services=SERVICES)
    mport = harness.free_port()
    p = c.node_ports["a"]
    text = c.conf.read_text().replace(f"[node a]\nlisten = 127.0.0.1:{p}\n",
                                      f"[node a]\nlisten = 127.0.0.1:{p}\nmetrics = {mport}\n", 1)
    c.conf.write_text(text)
    c.start()
    try:
        with Client("127.0.0.1", c.port) as cl:
            for k in range(5):
                cl.check(f"svc{k}", "m", limit=("fixed_window", 2, 3_600_000))
                cl.check(f"svc{k}", "m", limit=("fixed_window", 2, 3_600_000))
                cl.check(f"svc{k}", "m", limit=("fixed_window", 2, 3_600_000))
            cl.check("svc0", "m", limit=("gcra", 2, 3_600_000))
        page = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=5).read().decode()
        vals = dict(re.findall(r'^(rl_node_inline_\S+) (\d+)$', page, re.M))
        assert vals['rl_node_inline_decisions_total{code="allowed"}'] == "11"
        assert vals['rl_node_inline_decisions_total{code="limited"}'] == "5"
        assert vals["rl_node_inline_keys"] == "6"
        assert vals["rl_node_inline_limits"] == "2"
        assert 'service="svc' not in page
    finally:
        c.stop()
