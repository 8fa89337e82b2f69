"""Fixtures of the RESP front's tests (tests/resp/): real rl-node and rl-router processes on
free loopback ports, static membership, each router with [router] resp; and the Node.js
client (ioredis), installed with `npm ci` from tests/resp/node/package-lock.json into the
build directory. Processes are started and killed by clients/python/tests/harness.py (own
process group, PR_SET_PDEATHSIG, atexit), so nothing outlives a run."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import msgpack
import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "clients" / "python" / "tests"))
import harness  # noqa: E402


@pytest.fixture(autouse=True)
def _clear_of_the_hour():
    """Every test starts clear of a wall-clock hour's end (harness.HOUR_CLEAR_S)."""
    harness.clear_of_window_edge(3600, harness.HOUR_CLEAR_S)

BUILD = harness.BUILD

SERVICES = """
[service api]
limit = token_bucket 10 per 1h burst 3

[service shut]
failure = closed
limit = fixed_window 5 per 1h

[service fw]
limit = fixed_window 5 per 1h

[service cc]
limit = concurrency 2 lease 10m
"""


def router_env() -> Dict[str, str]:
    """The routers' environment: under ASan, a small quarantine, so that the memory a
    router holds (test_a_client_that_never_reads_is_bounded) is not hidden by freed blocks
    kept for use-after-free detection; nothing changes for a Release build."""
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") +
                           ":quarantine_size_mb=4:thread_local_quarantine_size_kb=64").lstrip(":")
    return env


class RespCluster:
    """Nodes and routers (one config file per router: its own listen and resp)."""

    def __init__(self, workdir: Path, nodes=("a", "b"), routers: int = 2, extra: str = "",
                 router_extra: str = "", test_clock: bool = False,
                 deadline: str = "200ms") -> None:
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.node_ports = {n: harness.free_port() for n in nodes}
        self.test_clock = test_clock
        self.confs: List[Path] = []
        self.ports: List[int] = []
        self.resp_ports: List[int] = []
        for i in range(routers):
            port, rport = harness.free_port(), harness.free_port()
            parts = ["[cluster]\nname = resp\nsession_timeout = 2s\nshards = 64\n" + extra,
                     f"[router]\nlisten = 127.0.0.1:{port}\ndeadline = {deadline}\n"
                     f"resp = 127.0.0.1:{rport}\nworkers = 2\n" + router_extra]
            for n, p in self.node_ports.items():
                parts.append(f"[node {n}]\nlisten = 127.0.0.1:{p}\nmemory = 64mb\n")
            parts.append(SERVICES)
            conf = self.dir / f"cluster{i}.conf"
            conf.write_text("\n".join(parts))
            self.confs.append(conf)
            self.ports.append(port)
            self.resp_ports.append(rport)
        self.nodes: Dict[str, subprocess.Popen] = {}
        self.routers: List[Optional[subprocess.Popen]] = []
        self.redis_tls: Dict[str, object] = {}  # redis.Redis's TLS arguments (wait_ready)

    def start(self) -> "RespCluster":
        harness.need_binaries("rl-node", "rl-router")
        for n in self.node_ports:
            self.start_node(n)
        for i in range(len(self.confs)):
            log = self.dir / f"router{i}.log"
            p = harness.spawn([str(BUILD / "rl-router"), "--config", str(self.confs[i])], log,
                              env=router_env())
            harness.wait_port(self.resp_ports[i], p, log)
            self.routers.append(p)
        for i in range(len(self.confs)):
            self.wait_ready(i)
        return self

    def start_node(self, name: str) -> None:
        log = self.dir / f"node-{name}.log"
        argv = [str(BUILD / "rl-node"), "--config", str(self.confs[0]), "--name", name,
                "--metrics", "off"]
        if self.test_clock:
            argv.append("--test-clock")
        self.nodes[name] = harness.spawn(argv, log)
        harness.wait_port(self.node_ports[name], self.nodes[name], log)

    def wait_ready(self, i: int, timeout: float = 10.0) -> None:
        """Until router i answers RL.CHECK from a node (not by its failure policy)."""
        import redis

        r = redis.Redis(port=self.resp_ports[i], socket_timeout=2, **self.redis_tls)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ok = True
            for k in range(16):  # users on every node
                rep = r.execute_command("RL.CHECK", "api", f"__ready{k}__", "COST", "0")
                if rep[1] != 0:
                    ok = False
            if ok:
                r.close()
                return
            time.sleep(0.05)
        raise RuntimeError(f"router {i} never reached its nodes")

    def kill_node(self, name: str) -> None:
        harness.kill(self.nodes.pop(name))

    def set_clock(self, now_ms: int) -> None:
        """Fixes every node's clock (--test-clock) with the binary protocol's CLOCK."""
        for port in self.node_ports.values():
            with socket.create_connection(("127.0.0.1", port), 2) as s:
                body = msgpack.packb([4, 1, now_ms])
                s.sendall(struct.pack(">I", len(body)) + body)
                head = s.recv(4, socket.MSG_WAITALL)
                (n,) = struct.unpack(">I", head)
                rep = msgpack.unpackb(s.recv(n, socket.MSG_WAITALL))
                assert rep == [4, 1, now_ms], rep

    def stop(self) -> None:
        """Routers first, by SIGTERM: each must exit 0 with no sanitizer report in its log
        (under ASan, LeakSanitizer runs at that exit). Then the nodes."""
        bad = []
        for i, p in enumerate(self.routers):
            if p is None:
                continue
            harness.kill(p, signal.SIGTERM)
            log = (self.dir / f"router{i}.log").read_text(errors="replace")
            if p.returncode != 0 or "Sanitizer" in log or "runtime error" in log:
                bad.append(f"router {i} exited {p.returncode}:\n{log[-3000:]}")
        for p in list(self.nodes.values()):
            harness.kill(p)
        self.nodes.clear()
        self.routers = []
        assert not bad, "\n".join(bad)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = RespCluster(tmp_path_factory.mktemp("resp")).start()
    yield c
    c.stop()


@pytest.fixture(scope="session")
def node_modules():
    """ioredis, installed reproducibly: `npm ci` from the committed lock file into BUILD."""
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        pytest.fail("node and npm are needed (scripts/deps.sh installs them)", pytrace=False)
    dest = BUILD / "resp-node"
    lock = (HERE / "node" / "package-lock.json").read_bytes()
    if not (dest / "node_modules" / "ioredis").exists() or \
            (dest / "package-lock.json").read_bytes() != lock:
        dest.mkdir(parents=True, exist_ok=True)
        for f in ("package.json", "package-lock.json"):
            shutil.copy(HERE / "node" / f, dest / f)
        subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=dest,
                       check=True, timeout=300)
    return dest / "node_modules"
