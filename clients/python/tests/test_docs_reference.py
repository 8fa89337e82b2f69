"""The docs are the reference: every STATS key and every Prometheus metric family that real
processes report is named in docs/ (a user, or a test that knows only the docs, must find
what each one means). A cluster with everything on that adds keys and families: ZooKeeper
membership, two nodes, a router with the RESP and gRPC fronts, metrics listeners, the events
log and the request log; a little traffic first, so that counters with labels have series.

Not for what the keys mean (the suites of each feature), nor for the cluster.conf keys
(tests/common/check_docs_keys.c).
"""

import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Dict, List, Set

import pytest

import harness
import moves_check
from ratelimiter import Client

DOCS = harness.REPO / "docs"

ENVOY_YAML = """domain: edge
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 5}
"""


def docs_text() -> str:
    return "\n".join(p.read_text() for p in sorted(DOCS.glob("*.md"))) + (
        harness.REPO / "README.md").read_text()


def spans(text: str) -> Set[str]:
    """Every code span's text, and each name.with.dots{labels} cut at its brace."""
    out: Set[str] = set()
    for s in re.findall(r"`([^`\n]+)`", text):
        out.add(s)
        out.add(s.split("{", 1)[0])
    return out


def stat_documented(key: str, sp: Set[str]) -> bool:
    """A key as a code span; a per-name key (node.a.up, service.fw.keys) as node.NAME.up or
    its .up shorthand."""
    if key in sp:
        return True
    m = re.fullmatch(r"(node|service)\.[^.]+\.(.+)", key)
    return m is not None and (f"{m.group(1)}.NAME.{m.group(2)}" in sp or f".{m.group(2)}" in sp)


def families(page: str) -> Set[str]:
    return set(re.findall(r"^# TYPE (\S+) ", page, re.M))


def get(port: int, path: str = "/metrics") -> str:
    deadline = time.monotonic() + 10
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
                return r.read().decode()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.fixture
def cluster(tmp_path):
    harness.need_binaries("rl-node", "rl-router")
    if shutil.which("java") is None or not Path("/usr/share/java/zookeeper.jar").exists():
        pytest.skip("no ZooKeeper (Debian's zookeeper package) on this machine")
    zk = moves_check.ZooKeeper(tmp_path).start()
    ports = {n: harness.free_port() for n in ("a", "b", "router", "resp", "rls", "ma", "mb",
                                              "mr")}
    (tmp_path / "envoy.yaml").write_text(ENVOY_YAML)
    conf = tmp_path / "cluster.conf"
    conf.write_text(
        f"[cluster]\nname = docs\nzookeeper = 127.0.0.1:{zk.port}\nsession_timeout = 2s\n"
        f"shards = 64\nenvoy_config = envoy.yaml\nevents_log = events-%n.log\n"
        f"[router]\nlisten = 127.0.0.1:{ports['router']}\nresp = {ports['resp']}\n"
        f"rls = {ports['rls']}\nmetrics = {ports['mr']}\nrequest_log = requests.log\n"
        f"deadline = 1s\n"
        f"[node a]\nlisten = 127.0.0.1:{ports['a']}\nmetrics = {ports['ma']}\nmemory = 64mb\n"
        f"[node b]\nlisten = 127.0.0.1:{ports['b']}\nmetrics = {ports['mb']}\nmemory = 64mb\n"
        f"[service fw]\nlimit = fixed_window 3 per 1m\n"
        f"[service swl]\nlimit = sliding_window_log 3 per 1m\n")
    procs: List[subprocess.Popen] = []
    try:
        for n in ("a", "b"):
            log = tmp_path / f"node-{n}.log"
            procs.append(harness.spawn([str(harness.BUILD / "rl-node"), "--config", str(conf),
                                        "--name", n], log))
            harness.wait_port(ports[n], procs[-1], log)
        log = tmp_path / "router.log"
        procs.append(harness.spawn([str(harness.BUILD / "rl-router"), "--config", str(conf)],
                                   log))
        harness.wait_port(ports["router"], procs[-1], log)
        harness.wait_port(ports["resp"], procs[-1], log)
        yield ports
    finally:
        for p in procs:
            harness.kill(p)
        zk.stop()


def test_every_stats_key_and_metric_family_is_documented(cluster):
    ports = cluster
    with Client("127.0.0.1", ports["router"], 2.0) as c:
        deadline = time.monotonic() + 20
        while c.stats().get("members", 0) != 2:
            assert time.monotonic() < deadline, "the router never saw both nodes"
            time.sleep(0.05)
        for i in range(40):  # allowed and limited answers, on both nodes, and a peek
            for svc in ("fw", "swl", "nope"):
                c.check(svc, f"u{i % 8}")
        c.check("fw", "u0", cost=0)
        router_stats = c.stats()
    node_stats: Dict[str, Dict[str, int]] = {}
    for n in ("a", "b"):
        with Client("127.0.0.1", ports[n], 2.0) as c:
            node_stats[n] = c.stats()
    text = docs_text()
    sp = spans(text)
    missing = sorted({f"router STATS {k}" for k in router_stats if not stat_documented(k, sp)} |
                     {f"node STATS {k}" for st in node_stats.values() for k in st
                      if not stat_documented(k, sp)})
    # families: named in full somewhere in the docs (a table row's shorthand does not count)
    pages = {"router": get(ports["mr"]), "node a": get(ports["ma"]), "node b": get(ports["mb"])}
    for who, page in pages.items():
        fams = families(page)
        assert len(fams) > 20, (who, page[:500])
        missing += sorted(f"{who} metric {f}" for f in fams
                          if not re.search(re.escape(f) + r"(?![A-Za-z0-9_])", text))
    assert "checks" in router_stats and "keys" in node_stats["a"]
    assert missing == [], "\n".join(missing)
