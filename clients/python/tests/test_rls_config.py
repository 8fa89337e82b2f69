"""The envoyproxy/ratelimit configuration of the gRPC front while routers run (docs/ENVOY.md,
"Changing the configuration live"), on a real ZooKeeper, two rl-nodes and an rl-router:

- `unit: year` counted to its limit and refused past it (a 64-bit window on the wire);
- the local [cluster] envoy_config picked up when its files change, without SIGHUP, and a
  broken file leaving the previous configuration in force with FILE:LINE in the log;
- `rl-cli envoy push|show|delete`: validated before writing (FILE:LINE), compare-and-set on
  the znode's version, in force over the local file on the router, deleted back to it;
- `[cluster] envoy_merge_domains`.
"""

import os
import subprocess
import time

import pytest

import harness
from rls_harness import (ZooKeeper, caller_fixture, make_stub, metrics_text, request,
                         rls_cluster, start_rls)

pytestmark = pytest.mark.integration

grpc = pytest.importorskip("grpc")

YEAR_S = 365 * 86400

LOCAL = """\
domain: yr
descriptors:
  - key: plan
    value: annual
    rate_limit:
      unit: year
      requests_per_unit: 3
  - key: plan
    value: annual_swc
    rate_limit:
      unit: year
      requests_per_unit: 2
      algorithm: sliding_window_counter
  - key: probe
    rate_limit:
      unit: hour
      requests_per_unit: 1000001
"""


@pytest.fixture(scope="module")
def zk(tmp_path_factory):
    z = ZooKeeper(tmp_path_factory.mktemp("zk"), timeout=30)
    yield z
    z.stop()


@pytest.fixture(scope="module")
def rls(tmp_path_factory, zk):
    """Two nodes and a router with ZooKeeper membership; envoy_config a local directory."""
    d = tmp_path_factory.mktemp("rlscfg")
    (d / "envoy").mkdir()
    (d / "envoy" / "yr.yaml").write_text(LOCAL)
    c = rls_cluster(d, "envoy", nodes=("a", "b"), metrics=True, start=False,
                    cluster=f"zookeeper = {zk.connect}\n",
                    binaries=("rl-node", "rl-router", "rl-cli"))
    c.conf.write_text(c.conf.read_text().replace("name = pytest\n",
                                                 f"name = rlscfg{os.getpid()}\n", 1))
    start_rls(c)
    yield c
    c.stop()


@pytest.fixture(scope="module")
def call(rls, pb):
    yield from caller_fixture(rls, pb)


def limit_of(call, domain, key, value="x"):
    """requests_per_unit of the limit a descriptor gets (None: no limit there)."""
    s = call(domain, [(key, value)]).statuses[0]
    return s.current_limit.requests_per_unit if s.HasField("current_limit") else None


def wait_for(what, fn, timeout=15.0):
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def cli(rls, *args, conf=None):
    return subprocess.run([str(harness.BUILD / "rl-cli"), "--config", str(conf or rls.conf)]
                          + [str(a) for a in args], capture_output=True, text=True, timeout=60)


def metric(rls, name):
    """One sample of the router's /metrics, by its name with labels."""
    for line in metrics_text(rls).splitlines():
        if line.startswith(name + " "):
            return int(float(line.split()[1]))
    raise AssertionError(f"{name} not in /metrics")


def log_of(rls):
    return (rls.dir / "router.log").read_text(errors="replace")


def test_year_limit_counted_and_refused(call, pb):
    """unit: year (31536000000 ms, past 32 bits) is sent to the nodes and counted: 3 allowed,
    the 4th refused, with the year's window reset; sliding_window_counter alike."""
    for i in range(3):
        r = call("yr", [("plan", "annual")])
        assert r.overall_code == pb.RateLimitResponse.OK, r
        s = r.statuses[0]
        assert s.current_limit.unit == pb.RateLimitResponse.RateLimit.YEAR
        assert s.current_limit.requests_per_unit == 3
        assert s.limit_remaining == 2 - i
        # the fixed window of a year, aligned to the epoch: ends within 365 days
        assert 0 < s.duration_until_reset.ToNanoseconds() <= YEAR_S * 10**9
    r = call("yr", [("plan", "annual")])
    assert r.overall_code == pb.RateLimitResponse.OVER_LIMIT, r
    assert r.statuses[0].limit_remaining == 0
    # counted per value: another descriptor value has its own year
    r = call("yr", [("plan", "annual")], [("plan", "annual_swc")])
    assert [s.code for s in r.statuses] == [pb.RateLimitResponse.OVER_LIMIT,
                                            pb.RateLimitResponse.OK]
    assert call("yr", [("plan", "annual_swc")]).overall_code == pb.RateLimitResponse.OK
    r = call("yr", [("plan", "annual_swc")])
    assert r.overall_code == pb.RateLimitResponse.OVER_LIMIT, r


def test_year_inline_limit_from_the_binary_protocol(rls):
    """The same window as an inline limit of the binary protocol: "fixed_window 2 per 365d"
    (the window a uint 64), 2 allowed, then LIMITED; past 366 days refused by the client."""
    import ratelimiter

    with ratelimiter.Client("127.0.0.1", rls.port, 2.0) as c:
        codes = [c.check("inl", "u1", limit="fixed_window 2 per 365d").code for _ in range(3)]
        assert codes == [ratelimiter.Code.ALLOWED, ratelimiter.Code.ALLOWED,
                         ratelimiter.Code.LIMITED]
        r = c.check("inl", "u1", limit=("sliding_window_counter", 1, 366 * 86400000))
        assert r.code == ratelimiter.Code.ALLOWED
        with pytest.raises(ValueError):
            c.check("inl", "u1", limit=("fixed_window", 1, 366 * 86400000 + 1))
        with pytest.raises(ValueError):
            c.check("inl", "u1", limit="token_bucket 1 per 365d")


def test_local_files_picked_up_without_sighup(rls, call):
    """A change to the local envoy_config directory is in force within about a second,
    without SIGHUP; a file that does not load keeps the previous configuration and is
    logged as FILE:LINE."""
    d = rls.dir / "envoy"
    assert limit_of(call, "live", "k") is None

    def remaining():
        return call("yr", [("probe", "kept")]).statuses[0].limit_remaining

    before = remaining()
    (d / "live.yaml").write_text("domain: live\ndescriptors:\n  - key: k\n    rate_limit:\n"
                                 "      unit: hour\n      requests_per_unit: 1000007\n")
    wait_for("the new file", lambda: limit_of(call, "live", "k") == 1000007)
    # a limit left unchanged keeps its counts across the change
    assert remaining() == before - 1
    # a broken file: the previous configuration stays, FILE:LINE in the log
    (d / "live.yaml").write_text("domain: live\ndescriptors:\n  - key: k\n    rate_limit:\n"
                                 "      unit: fortnight\n")
    where = f"{d}/live.yaml:5: invalid rate limit unit 'fortnight'"
    wait_for("the error in the log", lambda: where in log_of(rls))
    assert "previous configuration stays" in log_of(rls)
    assert limit_of(call, "live", "k") == 1000007
    assert limit_of(call, "yr", "probe") == 1000001
    assert metric(rls, 'rl_router_envoy_config_reloads_total{result="refused"}') >= 1
    assert metric(rls, "rl_router_envoy_config_version") == 0  # the local files
    # fixed again: taken
    (d / "live.yaml").write_text("domain: live\ndescriptors:\n  - key: k\n    rate_limit:\n"
                                 "      unit: hour\n      requests_per_unit: 1000009\n")
    wait_for("the fixed file", lambda: limit_of(call, "live", "k") == 1000009)
    # a file removed from the directory goes too
    (d / "live.yaml").unlink()
    wait_for("the file's removal", lambda: limit_of(call, "live", "k") is None)
    assert rls.router.poll() is None


def test_push_show_delete(rls, call, tmp_path):
    """rl-cli envoy push validates (FILE:LINE), writes with a version compare-and-set; the
    router puts the pushed configuration in force over its local files, ignores local
    changes meanwhile, and goes back to them when the znode is deleted."""
    pushed = tmp_path / "pushed"
    pushed.mkdir()
    (pushed / "a.yaml").write_text("domain: pz\ndescriptors:\n  - key: k\n    rate_limit:\n"
                                   "      unit: hour\n      requests_per_unit: 1000011\n")
    (pushed / "b.yaml").write_text("domain: yr\ndescriptors:\n  - key: probe\n"
                                   "    rate_limit:\n      unit: hour\n"
                                   "      requests_per_unit: 1000013\n")
    (pushed / "notes.txt").write_text("not yaml: [")

    r = cli(rls, "envoy", "show")
    assert r.returncode == 0, r.stderr
    assert "no envoy config znode" in r.stdout

    # refused whole before anything is written: FILE:LINE
    bad = tmp_path / "bad.yaml"
    bad.write_text("domain: pz\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: eon\n")
    r = cli(rls, "envoy", "push", bad)
    assert r.returncode == 2
    assert f"{bad}:5: invalid rate limit unit 'eon'" in r.stderr
    assert "nothing written" in r.stderr
    assert "no envoy config znode" in cli(rls, "envoy", "show").stdout

    # push, expecting no znode yet
    r = cli(rls, "envoy", "push", pushed, "none")
    assert r.returncode == 0, r.stderr
    assert "znode version 0" in r.stdout
    wait_for("the pushed config", lambda: limit_of(call, "pz", "k") == 1000011)
    assert metric(rls, "rl_router_envoy_config_version") == 1  # znode version 0
    assert limit_of(call, "yr", "probe") == 1000013  # the pushed yr domain, not the local one
    assert limit_of(call, "yr", "plan", "annual") is None
    assert "in force over the local envoy_config" in log_of(rls)

    r = cli(rls, "envoy", "show")
    assert r.returncode == 0, r.stderr
    assert "znode version 0, 2 files, 2 domains" in r.stdout
    assert f"--- {pushed}/a.yaml" in r.stdout and "requests_per_unit: 1000011" in r.stdout
    assert "notes.txt" not in r.stdout

    # compare-and-set: a stale version writes nothing
    (pushed / "a.yaml").write_text("domain: pz\ndescriptors:\n  - key: k\n    rate_limit:\n"
                                   "      unit: hour\n      requests_per_unit: 1000017\n")
    r = cli(rls, "envoy", "push", pushed, "none")
    assert r.returncode == 1 and "nothing written" in r.stderr
    r = cli(rls, "envoy", "push", pushed, "7")
    assert r.returncode == 1 and "not at version 7" in r.stderr
    assert "znode version 0," in cli(rls, "envoy", "show").stdout
    r = cli(rls, "envoy", "push", pushed, "0")
    assert r.returncode == 0, r.stderr
    assert "znode version 1" in r.stdout
    wait_for("the second push", lambda: limit_of(call, "pz", "k") == 1000017)
    r = cli(rls, "envoy", "push", pushed)  # over whatever is there
    assert r.returncode == 0 and "znode version 2" in r.stdout, r.stderr
    wait_for("the third push", lambda: metric(rls, "rl_router_envoy_config_version") == 3)

    # a local change meanwhile is not applied: the pushed configuration rules
    (rls.dir / "envoy" / "more.yaml").write_text(
        "domain: pz\ndescriptors:\n  - key: j\n    rate_limit:\n      unit: hour\n"
        "      requests_per_unit: 1000019\n")
    wait_for("the local change noticed", lambda: "changed: not applied" in log_of(rls))
    assert limit_of(call, "pz", "j") is None

    # delete (compare-and-set too): back to the local files, with the change made meanwhile
    r = cli(rls, "envoy", "delete", "0")
    assert r.returncode == 1 and "not at version 0" in r.stderr
    r = cli(rls, "envoy", "delete", "2")
    assert r.returncode == 0, r.stderr
    wait_for("the local config back", lambda: limit_of(call, "pz", "k") is None)
    assert limit_of(call, "pz", "j") == 1000019
    assert limit_of(call, "yr", "probe") == 1000001
    assert metric(rls, "rl_router_envoy_config_version") == 0
    (rls.dir / "envoy" / "more.yaml").unlink()
    assert rls.router.poll() is None


def test_merge_domains(rls, tmp_path):
    """[cluster] envoy_merge_domains: no (the default) refuses a domain in two files, as
    upstream without MERGE_DOMAIN_CONFIG; yes merges their descriptors."""
    d = tmp_path / "split"
    d.mkdir()
    (d / "1.yaml").write_text("domain: m\ndescriptors:\n  - key: a\n    rate_limit:\n"
                              "      unit: hour\n      requests_per_unit: 1\n")
    (d / "2.yaml").write_text("domain: m\ndescriptors:\n  - key: b\n    rate_limit:\n"
                              "      unit: hour\n      requests_per_unit: 2\n")
    r = cli(rls, "envoy", "check", d)
    assert r.returncode == 2
    assert f"{d}/2.yaml:1: duplicate domain 'm' in config file (first in {d}/1.yaml:1)" \
        in r.stderr
    r = cli(rls, "envoy", "push", d)
    assert r.returncode == 2 and "nothing written" in r.stderr
    merged = tmp_path / "merged.conf"
    merged.write_text(rls.conf.read_text().replace(
        "[cluster]\n", "[cluster]\nenvoy_merge_domains = yes\n", 1))
    r = cli(rls, "envoy", "check", d, conf=merged)
    assert r.returncode == 0, r.stderr
    assert "1 domains, 2 descriptors" in r.stdout


def test_router_merges_domains_when_told(tmp_path, pb):
    """A router with envoy_merge_domains = yes serves a domain split over two local files;
    with no, it refuses to start on them (FILE:LINE)."""
    c = rls_cluster(tmp_path / "c", "envoy", start=False)
    (c.dir / "envoy").mkdir()
    (c.dir / "envoy" / "1.yaml").write_text("domain: m\ndescriptors:\n  - key: a\n"
                                            "    rate_limit:\n      unit: hour\n"
                                            "      requests_per_unit: 1000021\n")
    (c.dir / "envoy" / "2.yaml").write_text("domain: m\ndescriptors:\n  - key: b\n"
                                            "    rate_limit:\n      unit: hour\n"
                                            "      requests_per_unit: 1000023\n")
    try:
        c.start_node("a")
        p = harness.spawn([str(harness.BUILD / "rl-router"), "--config", str(c.conf)],
                          c.dir / "refused.log")
        assert p.wait(timeout=10) == 2
        assert f"{c.dir}/envoy/2.yaml:1: duplicate domain 'm'" in \
            (c.dir / "refused.log").read_text()
        c.conf.write_text(c.conf.read_text().replace(
            "envoy_config = envoy\n", "envoy_config = envoy\nenvoy_merge_domains = yes\n", 1))
        c.start_router()
        harness.wait_port(c.rls_port, c.router, c.dir / "router.log")
        ch, stub = make_stub(c.rls_port, pb)

        def lim(key):
            req = request(pb, "m", [(key, "x")])
            return stub(req, timeout=5).statuses[0].current_limit.requests_per_unit

        assert lim("a") == 1000021 and lim("b") == 1000023
        ch.close()
    finally:
        c.stop()


def test_router_with_zookeeper_and_no_local_file(rls, zk, pb, tmp_path):
    """[router] rls with ZooKeeper and no envoy_config: every domain unknown (no limit) until
    a configuration is pushed, then that one; deleted, unknown again."""
    conf = tmp_path / "second.conf"
    rls_port, port = harness.free_port(), harness.free_port()
    text = rls.conf.read_text().replace("envoy_config = envoy\n", "", 1)
    text = text.replace(f"rls = {rls.rls_port}\n", f"rls = {rls_port}\n", 1)
    text = text.replace(f"listen = 127.0.0.1:{rls.port}\n", f"listen = 127.0.0.1:{port}\n", 1)
    text = text.replace(f"metrics = {rls.metrics_port}\n", "", 1)
    conf.write_text(text)
    log = tmp_path / "second.log"
    p = harness.spawn([str(harness.BUILD / "rl-router"), "--config", str(conf),
                       "--name", "second"], log)
    try:
        harness.wait_port(rls_port, p, log)
        ch, stub = make_stub(rls_port, pb)

        def second(domain, key):
            req = request(pb, domain, [(key, "x")])
            s = stub(req, timeout=5).statuses[0]
            return s.current_limit.requests_per_unit if s.HasField("current_limit") else None

        assert second("yr", "probe") is None
        y = tmp_path / "z.yaml"
        y.write_text("domain: zz\ndescriptors:\n  - key: k\n    rate_limit:\n"
                     "      unit: year\n      requests_per_unit: 1000029\n")
        r = cli(rls, "envoy", "push", y, "none")
        assert r.returncode == 0, r.stderr
        wait_for("the push", lambda: second("zz", "k") == 1000029)
        version = r.stdout.split("znode version ")[1].split()[0]
        r = cli(rls, "envoy", "delete", version)
        assert r.returncode == 0, r.stderr
        wait_for("the delete", lambda: second("zz", "k") is None)
        ch.close()
        p.send_signal(15)
        assert p.wait(timeout=10) == 0
        out = log.read_text(errors="replace")
        assert "Sanitizer" not in out and "runtime error" not in out, out
    finally:
        harness.kill(p)


def test_push_size_limit(rls, tmp_path):
    """A configuration that loads but is larger than a znode may hold (1000 KiB as a bundle)
    is refused before anything is written."""
    d = tmp_path / "big"
    d.mkdir()
    for f in range(2):
        lines = [f"domain: big{f}", "descriptors:"]
        for i in range(8000):
            lines += [f"  - key: k{i:06d}", "    rate_limit: {unit: hour, requests_per_unit: 9}"]
        (d / f"{f}.yaml").write_text("\n".join(lines) + "\n")
    r = cli(rls, "envoy", "check", d)
    assert r.returncode == 0, r.stderr
    assert "2 domains, 16000 descriptors" in r.stdout
    assert "too large to push" in r.stdout
    r = cli(rls, "envoy", "push", d)
    assert r.returncode == 2
    assert "more than a znode may hold (1024000 bytes): nothing written" in r.stderr
    assert "no envoy config znode" in cli(rls, "envoy", "show").stdout
