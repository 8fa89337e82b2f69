"""envoyproxy/ratelimit's own request/response test cases, carried over as expected results
(docs/ENVOY.md, "envoyproxy/ratelimit's test cases"): its integration test's runtime
configuration (domains basic, another, reload, share-threshold), its service tests'
scenarios and its example configuration's `replaces`, against a real router and nodes,
called with grpcio as Envoy would.

Then exactness across routers: two rl-routers, members from a real ZooKeeper, many
concurrent calls split across both on one descriptor: one counter, the limit exactly."""

import os
import signal
import threading
import time

import pytest

import harness
from rls_harness import (ZooKeeper, caller_fixture, clear_of_window_edge, codes, make_stub,
                         request, rls_cluster, sighup)

pytestmark = pytest.mark.integration

grpc = pytest.importorskip("grpc")

# upstream test/integration/runtime/current/ratelimit/config/*.yaml, verbatim
BASIC = """\
domain: basic
descriptors:
  - key: key1
    rate_limit:
      unit: second
      requests_per_unit: 50

  - key: key1_local
    rate_limit:
      unit: second
      requests_per_unit: 50

  - key: one_per_minute
    rate_limit:
      unit: minute
      requests_per_unit: 1
"""

ANOTHER = """\
domain: another
descriptors:
  - key: key2
    rate_limit:
      unit: minute
      requests_per_unit: 20

  - key: key3
    rate_limit:
      unit: hour
      requests_per_unit: 10

  - key: key2_local
    rate_limit:
      unit: minute
      requests_per_unit: 20

  - key: key3_local
    rate_limit:
      unit: hour
      requests_per_unit: 10

  - key: key4
    rate_limit:
      unit: day
      requests_per_unit: 20

  - key: key4_local
    rate_limit:
      unit: day
      requests_per_unit: 20
"""

SHARE = """\
domain: share-threshold-test
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: hour
      requests_per_unit: 10

  - key: files_no_share
    value: files_no_share/*
    rate_limit:
      unit: hour
      requests_per_unit: 10
"""

# upstream test/integration/runtime/current/ratelimit/reload.yaml, verbatim
RELOAD = """\
domain: reload
descriptors:
  - key: key1
    rate_limit:
      unit: second
      requests_per_unit: 50

  - key: block
    rate_limit:
      unit: second
      requests_per_unit: 0

  - key: one_per_minute
    rate_limit:
      unit: minute
      requests_per_unit: 1
"""

# upstream's service tests mock GetLimit; these limits give the same shapes (10 per minute,
# shadow or not, unlimited 55 per second)
SERVICE = """\
domain: different-domain
descriptors:
  - key: foo
    rate_limit:
      name: key_name
      unit: minute
      requests_per_unit: 10
  - key: shadow1
    shadow_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: shadow2
    shadow_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: baz
    rate_limit:
      unlimited: true
"""

# the part of upstream's examples/ratelimit/config/example.yaml that its
# integration-test/scripts/replaces.sh exercises, verbatim
EXAMPLE_RL = """\
domain: rl
descriptors:
  - key: category
    value: account
    rate_limit:
      replaces:
        - name: bkthomps
        - name: fake_name
      unit: minute
      requests_per_unit: 4
  - key: source_cluster
    value: proxy
    descriptors:
      - key: destination_cluster
        value: bkthomps
        rate_limit:
          replaces:
            - name: bkthomps
          unit: minute
          requests_per_unit: 2
      - key: destination_cluster
        value: mock
        rate_limit:
          unit: minute
          requests_per_unit: 1
      - key: destination_cluster
        value: override
        rate_limit:
          replaces:
            - name: banned_limit
          unit: minute
          requests_per_unit: 2
      - key: destination_cluster
        value: fake
        rate_limit:
          name: fake_name
          unit: minute
          requests_per_unit: 2
  - key: foo
    rate_limit:
      unit: minute
      requests_per_unit: 2
    descriptors:
      - key: bar
        rate_limit:
          unit: minute
          requests_per_unit: 3
      - key: bar
        value: bkthomps
        rate_limit:
          name: bkthomps
          unit: minute
          requests_per_unit: 1
      - key: bar
        value: banned
        rate_limit:
          name: banned_limit
          unit: minute
          requests_per_unit: 0
"""

MINUTE = 2  # RateLimitResponse.RateLimit.Unit
SECOND, HOUR, DAY = 1, 3, 4


@pytest.fixture(scope="module")
def rls(tmp_path_factory):
    d = tmp_path_factory.mktemp("rlsup")
    cfg = d / "config"
    cfg.mkdir()
    for name, text in (("basic", BASIC), ("another", ANOTHER), ("share_threshold", SHARE),
                       ("service", SERVICE), ("example", EXAMPLE_RL)):
        (cfg / f"{name}.yaml").write_text(text)
    c = rls_cluster(d, "config", nodes=("a", "b"), deadline="2s")
    c.cfg = cfg
    yield c
    c.stop()


@pytest.fixture(scope="module")
def call(rls, pb):
    """upstream's common.NewRateLimitRequest(domain, descriptors, hits_addend), called"""
    yield from caller_fixture(rls, pb, hits=1, timeout=10)


def status(pb, code, rpu=None, unit=None, remaining=0):
    """(code, requests_per_unit, unit, limit_remaining): upstream's newDescriptorStatus
    without the duration, which is compared apart."""
    return (pb.RateLimitResponse.Code.Value(code), rpu, unit, remaining)


def shape(r):
    return [(s.code, s.current_limit.requests_per_unit if s.HasField("current_limit") else None,
             s.current_limit.unit if s.HasField("current_limit") else None, s.limit_remaining)
            for s in r.statuses]


def uniq():
    return f"{time.time_ns()}-{os.getpid()}"


# ---- upstream test/integration/integration_test.go, testBasicBaseConfig ----------------

def test_basic_no_limit_for_unknown_domain(call, pb):
    r = call("foo", [("hello", "world")])
    assert r.overall_code == pb.RateLimitResponse.OK
    assert shape(r) == [status(pb, "OK")]


def test_basic_first_hit(call, pb):
    r = call("basic", [("key1", "foo")])
    assert r.overall_code == pb.RateLimitResponse.OK
    assert shape(r) == [status(pb, "OK", 50, SECOND, 49)]
    assert r.statuses[0].duration_until_reset.seconds <= 1


def test_basic_over_limit_after_20_per_minute(call, pb):
    v = uniq()
    clear_of_window_edge(60)
    for i in range(25):
        r = call("another", [("key2", v)])
        over = i >= 20
        want = status(pb, "OVER_LIMIT" if over else "OK", 20, MINUTE, 0 if over else 20 - (i + 1))
        assert shape(r) == [want], i
        assert r.overall_code == want[0]
        assert 0 < r.statuses[0].duration_until_reset.ToNanoseconds() <= 60 * 10**9


def test_basic_two_keys_in_one_domain(call, pb):
    """key2 (20 per minute) and key3 (10 per hour) in one request: key3 goes over after 10
    and key2 goes on counting, as upstream without STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT."""
    v = uniq()
    clear_of_window_edge(60)
    for i in range(15):
        r = call("another", [("key2", v)], [("key3", v)])
        over = i >= 10
        assert shape(r) == [
            status(pb, "OK", 20, MINUTE, 20 - (i + 1)),
            status(pb, "OVER_LIMIT" if over else "OK", 10, HOUR, 0 if over else 10 - (i + 1)),
        ], i
        assert r.overall_code == (pb.RateLimitResponse.OVER_LIMIT if over
                                  else pb.RateLimitResponse.OK)


def test_basic_duration_until_reset_ticks_down(call, pb):
    v = uniq()
    clear_of_window_edge(86400, 4.0)
    r1 = call("another", [("key4", v)])
    time.sleep(2)
    r2 = call("another", [("key4", v)])
    d1 = r1.statuses[0].duration_until_reset.seconds
    d2 = r2.statuses[0].duration_until_reset.seconds
    assert d2 < d1 <= 86400
    assert r2.statuses[0].limit_remaining == 18


# ---- upstream testShareThreshold --------------------------------------------------------

def test_share_threshold(call, pb):
    for _ in range(10):
        r = call("share-threshold-test", [("files", "files/a.pdf")])
        assert r.overall_code == pb.RateLimitResponse.OK
    # every value under files/* shares one counter: another file is over the limit
    r = call("share-threshold-test", [("files", "files/b.csv")])
    assert r.overall_code == pb.RateLimitResponse.OVER_LIMIT
    assert shape(r) == [status(pb, "OVER_LIMIT", 10, HOUR, 0)]
    # without share_threshold, each value has its own counter
    for _ in range(10):
        r = call("share-threshold-test", [("files_no_share", f"files_no_share/{uniq()}")])
        assert shape(r) == [status(pb, "OK", 10, HOUR, 9)]


# ---- upstream testConfigReload (its runtime watches the directory; here: SIGHUP) --------

def test_config_reload(rls, call, pb):
    def reload():
        sighup(rls)

    r = call("reload", [("block", "foo")])
    assert shape(r) == [status(pb, "OK")]  # no such domain yet
    (rls.cfg / "reload.yaml").write_text(RELOAD)
    try:
        reload()
        r = call("reload", [("key1", "foo")])
        assert r.overall_code == pb.RateLimitResponse.OK
        assert shape(r) == [status(pb, "OK", 50, SECOND, 49)]
        r = call("reload", [("block", "foo")])  # requests_per_unit 0
        assert r.overall_code == pb.RateLimitResponse.OVER_LIMIT
    finally:
        (rls.cfg / "reload.yaml").unlink()
    reload()
    assert shape(call("reload", [("block", "foo")])) == [status(pb, "OK")]


# ---- upstream test/service/ratelimit_test.go ---------------------------------------------

def test_service_statuses_follow_request_order(call, pb):
    """TestService: one descriptor over its limit and one without a limit, in both orders."""
    v = uniq()
    clear_of_window_edge(60)
    for _ in range(10):
        call("different-domain", [("foo", v)])
    r = call("different-domain", [("foo", v)], [("hello", "world")])
    assert r.overall_code == pb.RateLimitResponse.OVER_LIMIT
    assert shape(r) == [status(pb, "OVER_LIMIT", 10, MINUTE, 0), status(pb, "OK")]
    assert r.statuses[0].current_limit.name == "key_name"
    r = call("different-domain", [("hello", "world")], [("foo", v)])
    assert r.overall_code == pb.RateLimitResponse.OVER_LIMIT
    assert shape(r) == [status(pb, "OK"), status(pb, "OVER_LIMIT", 10, MINUTE, 0)]


def test_service_rule_shadow_mode(call, pb):
    """TestRuleShadowMode and TestMixedRuleShadowMode: a shadow rule over its limit is OK;
    a plain rule over its limit still makes the answer OVER_LIMIT."""
    v = uniq()
    clear_of_window_edge(60)
    for _ in range(10):
        call("different-domain", [("shadow1", v)], [("shadow2", v)], [("foo", v)])
    r = call("different-domain", [("shadow1", v)], [("shadow2", v)])
    assert r.overall_code == pb.RateLimitResponse.OK
    assert codes(pb, r) == ["OK", "OK"]
    assert [s.limit_remaining for s in r.statuses] == [0, 0]
    r = call("different-domain", [("shadow1", v)], [("foo", v)])
    assert r.overall_code == pb.RateLimitResponse.OVER_LIMIT
    assert codes(pb, r) == ["OK", "OVER_LIMIT"]


def test_service_empty_domain_and_descriptors(call, pb):
    """TestEmptyDomain, TestEmptyDescriptors: upstream's words (a Go error: UNKNOWN)."""
    with pytest.raises(grpc.RpcError) as e:
        call("", [("hello", "world")])
    assert (e.value.code(), e.value.details()) == (grpc.StatusCode.UNKNOWN,
                                                   "rate limit domain must not be empty")
    with pytest.raises(grpc.RpcError) as e:
        call("test-domain")
    assert (e.value.code(), e.value.details()) == (
        grpc.StatusCode.UNKNOWN, "rate limit descriptor list must not be empty")


def test_service_unlimited(call, pb):
    """TestUnlimited: limited, no limit, unlimited."""
    v = uniq()
    clear_of_window_edge(60)
    r = call("different-domain", [("foo", v)], [("hello", "world")], [("baz", "qux")])
    assert r.overall_code == pb.RateLimitResponse.OK
    assert shape(r) == [status(pb, "OK", 10, MINUTE, 9), status(pb, "OK"),
                        status(pb, "OK", None, None, 4294967295)]


# ---- upstream integration-test/scripts/replaces.sh on examples/.../example.yaml ----------

def allowed(call, *descs):
    return call("rl", *descs).overall_code == 1  # OK


def test_replaces(call, pb):
    """replaces.sh, "replaces increases the limit": banned_limit (0 per minute) is replaced
    by the override descriptor's limit (2 per minute) when both are in one request."""
    clear_of_window_edge(60, 15)
    v = uniq()
    banned = [("foo", v), ("bar", "banned")]  # banned_limit: 0 per minute
    assert not allowed(call, banned)
    assert not allowed(call, banned, [("source_cluster", "proxy"), ("destination_cluster", "mock")])
    # destination_cluster override (2 per minute) replaces banned_limit
    override = [("source_cluster", "proxy"), ("destination_cluster", "override")]
    assert allowed(call, banned, override)
    r = call("rl", banned, override)
    assert r.overall_code == pb.RateLimitResponse.OK
    assert shape(r) == [status(pb, "OK"), status(pb, "OK", 2, MINUTE, 0)]  # replaced: no limit
    assert not allowed(call, banned, override)


def test_replaces_several_limits(call, pb):
    """replaces.sh, "replaces can replace multiple descriptors": category account (4 per
    minute) replaces bkthomps and fake_name; without it, each counts again."""
    clear_of_window_edge(60, 15)
    v = uniq()
    five = ([("foo", v), ("bar", "bkthomps")],
            [("source_cluster", "proxy"), ("destination_cluster", "fake")],
            [("category", "account")])
    for _ in range(4):
        assert allowed(call, *five)
    assert not allowed(call, *five)
    # alone, bkthomps (1 per minute) was never counted above
    two = [("foo", v), ("bar", "bkthomps")]
    assert allowed(call, two)
    assert not allowed(call, two)


def test_replaces_does_not_touch_the_original_limit(call, pb):
    """replaces.sh, "replaces doesn't affect the original limit": destination bkthomps
    (2 per minute) replaces bkthomps (1 per minute) in its requests only."""
    clear_of_window_edge(60, 15)
    v = uniq()
    mine = [("foo", v), ("bar", "bkthomps")]
    dest = [("source_cluster", "proxy"), ("destination_cluster", "bkthomps")]
    assert allowed(call, mine, dest)
    assert allowed(call, mine, dest)
    assert not allowed(call, mine, dest)
    # not replaced: bkthomps' own counter, still unused by the calls above
    other = [("source_cluster", "proxy"), ("destination_cluster", "not_bkthomps")]
    assert allowed(call, mine, other)
    assert not allowed(call, mine, other)
    assert not allowed(call, mine, dest)


# ---- where upstream's fixed window and this one differ -----------------------------------

def test_refused_hits_are_not_counted(call, pb):
    """Upstream's Redis fixed window adds every hit (INCRBY) before comparing, refused ones
    too; the node's fixed_window counts only what it allows. Upstream would answer the last
    call OVER_LIMIT (its counter at 15 of 10); here 9 of 10 are used and it is OK."""
    v = uniq()
    r = call("another", [("key3", v)], hits=9)
    assert shape(r) == [status(pb, "OK", 10, HOUR, 1)]
    r = call("another", [("key3", v)], hits=5)
    assert shape(r) == [status(pb, "OVER_LIMIT", 10, HOUR, 0)]
    r = call("another", [("key3", v)], hits=1)
    assert shape(r) == [status(pb, "OK", 10, HOUR, 0)]
    r = call("another", [("key3", v)], hits=1)
    assert shape(r) == [status(pb, "OVER_LIMIT", 10, HOUR, 0)]


# ---- exactness across two routers --------------------------------------------------------

def test_two_routers_share_one_counter(tmp_path, pb):
    """Two rl-routers, the same nodes (members from ZooKeeper), 240 concurrent calls split
    across both on one descriptor with a limit of 100: exactly 100 are OK; and a descriptor
    counted through one router is the same counter through the other."""
    harness.need_binaries("rl-node", "rl-router")
    procs = []
    try:
        zk = ZooKeeper(tmp_path / "zk")
        procs.append(zk.proc)
        zk_port = zk.port
        (tmp_path / "edge.yaml").write_text(
            "domain: edge\ndescriptors:\n  - key: k\n    rate_limit:\n"
            "      unit: hour\n      requests_per_unit: 100\n")
        base = (f"[cluster]\nname = rlsqa\nzookeeper = 127.0.0.1:{zk_port}\n"
                "session_timeout = 2s\nenvoy_config = edge.yaml\n"
                "[router]\ndeadline = 5s\nrls = {rls}\n"
                "[service fw]\nlimit = fixed_window 10 per 1h\n")
        node_ports = [harness.free_port() for _ in range(2)]
        rls_ports = [harness.free_port() for _ in range(2)]
        router_ports = [harness.free_port() for _ in range(2)]
        confs = []
        for i in range(2):
            conf = tmp_path / f"router{i}.conf"
            conf.write_text(base.format(rls=rls_ports[i]))
            confs.append(conf)
        for i, port in enumerate(node_ports):
            log = tmp_path / f"node{i}.log"
            p = harness.spawn([str(harness.BUILD / "rl-node"), "--config", str(confs[0]),
                               "--name", f"n{i}", "--listen", f"127.0.0.1:{port}"], log)
            procs.append(p)
            harness.wait_port(port, p, log)
        for i in range(2):
            log = tmp_path / f"router{i}.log"
            p = harness.spawn([str(harness.BUILD / "rl-router"), "--config", str(confs[i]),
                               "--listen", f"127.0.0.1:{router_ports[i]}", "--metrics", "off"],
                              log)
            procs.append(p)
            harness.wait_port(rls_ports[i], p, log)
        stubs = [make_stub(port, pb) for port in rls_ports]
        req = request(pb, "edge", [("k", "ready")], hits=1)
        # until both routers know both nodes: a CHECK answered by a node, not the failure
        # policy (with inline_failure = open a missing owner would answer OK with no count)
        for ch, stub in stubs:
            deadline = time.monotonic() + 20
            while True:
                a = stub(req, timeout=10).statuses[0].limit_remaining
                b = stub(req, timeout=10).statuses[0].limit_remaining
                if b == a - 1:
                    break
                assert time.monotonic() < deadline, "router never counted on a node"
                time.sleep(0.1)
        key = request(pb, "edge", [("k", "one")], hits=1)
        start = threading.Barrier(len(stubs) * 4)
        results = []
        lock = threading.Lock()

        def worker(stub):
            start.wait()
            futs = [stub.future(key, timeout=30) for _ in range(30)]
            got = [f.result().overall_code for f in futs]
            with lock:
                results.extend(got)

        threads = [threading.Thread(target=worker, args=(stubs[i % 2][1],)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(results) == 240
        assert results.count(pb.RateLimitResponse.OK) == 100
        assert results.count(pb.RateLimitResponse.OVER_LIMIT) == 140
        # one counter: 3 calls through router 0, the 4th through router 1 sees them
        other = request(pb, "edge", [("k", "two")], hits=1)
        for n in range(3):
            assert stubs[0][1](other, timeout=10).statuses[0].limit_remaining == 99 - n
        assert stubs[1][1](other, timeout=10).statuses[0].limit_remaining == 96
        for ch, _ in stubs:
            ch.close()
        for p in procs[-2:]:
            p.send_signal(signal.SIGTERM)
            assert p.wait(timeout=10) == 0
        for i in range(2):
            log = (tmp_path / f"router{i}.log").read_text(errors="replace")
            assert "Sanitizer" not in log and "runtime error" not in log, log
    finally:
        for p in reversed(procs):
            harness.kill(p)


# ---- upstream test/config/config_test.go: its files, loaded by a real router ------------

UPSTREAM_FILES = harness.REPO / "clients" / "python" / "tests" / "envoy_upstream"

# file(s) -> (domains loaded) or (FILE:LINE, message): upstream's message after FILE:LINE,
# except where the words differ (docs/ENVOY.md)
CONFIG_CASES = {
    "basic_config": 1, "shadowmode_config": 1, "wildcard": 1, "share_threshold": 1,
    "metadata": 1, "merge_domain_key1": 1, "examples_config": 1, "examples_example": 1,
    "empty_domain": ("empty_domain.yaml", "config file cannot have empty domain"),
    "basic_config+duplicate_domain": (
        "duplicate_domain.yaml:1", "duplicate domain 'test-domain' in config file"),
    "merge_domain_key1+merge_domain_key2": (  # without MERGE_DOMAIN_CONFIG
        "merge_domain_key2.yaml:2", "duplicate domain 'test-domain' in config file"),
    "empty_key": ("empty_key.yaml:3", "descriptor has empty key"),
    "duplicate_key": ("duplicate_key.yaml:6",
                      "duplicate descriptor composite key 'test-domain.key1_value1'"),
    "bad_limit_unit": ("bad_limit_unit.yaml:6", "invalid rate limit unit 'foo'"),
    "replaces_self": ("replaces_self.yaml:10",
                      "replaces should not contain name of same descriptor"),
    "replaces_empty": ("replaces_empty.yaml:10", "should not have an empty replaces entry"),
    # upstream: "error loading config file: yaml: line 2: found unexpected end of stream"
    "bad_yaml": ("bad_yaml.yaml:2", "error loading config file: found unexpected end of stream"),
    "misspelled_key": ("misspelled_key.yaml:5", "config error, unknown key 'ratelimit'"),
    "misspelled_key2": ("misspelled_key2.yaml:7", "config error, unknown key 'requestsperunit'"),
    # upstream: "config error, key is not of type string: 0.25" (YAML typing: a float)
    "non_string_key": ("non_string_key.yaml:1", "config error, unknown key '0.25'"),
    "non_map_list": ("non_map_list.yaml:3",
                     "config error, yaml file contains list of type other than map: a"),
    "unlimited_with_unit": ("unlimited_with_unit.yaml:6",
                            "should not specify rate limit unit when unlimited"),
}


@pytest.mark.parametrize("case", sorted(CONFIG_CASES))
def test_upstream_config_files(tmp_path, case):
    harness.need_binaries("rl-router")
    cfg = tmp_path / "config"
    cfg.mkdir()
    for name in case.split("+"):
        (cfg / f"{name}.yaml").write_bytes((UPSTREAM_FILES / f"{name}.yaml").read_bytes())
    rls_port, port = harness.free_port(), harness.free_port()
    conf = tmp_path / "cluster.conf"
    conf.write_text(f"[cluster]\nenvoy_config = config\n[router]\nlisten = 127.0.0.1:{port}\n"
                    f"rls = {rls_port}\n[node a]\nlisten = 127.0.0.1:{harness.free_port()}\n")
    log = tmp_path / "router.log"
    p = harness.spawn([str(harness.BUILD / "rl-router"), "--config", str(conf),
                       "--metrics", "off"], log)
    try:
        want = CONFIG_CASES[case]
        if isinstance(want, int):
            harness.wait_port(rls_port, p, log)
            assert f"{want} domains" in log.read_text(), log.read_text()
        else:
            assert p.wait(timeout=10) == 2, log.read_text()
            where, message = want
            text = log.read_text()
            assert f"rl-router: [cluster] envoy_config: {cfg}/{where}: {message}" in text, text
    finally:
        harness.kill(p)
