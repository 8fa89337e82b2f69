"""Starts real rl-node and rl-router processes for the integration tests.

Every process runs in its own process group, gets SIGKILL if this Python process dies
(PR_SET_PDEATHSIG), and is killed by the fixture's teardown and, failing that, at exit
(atexit): Ctrl-C, a failed assertion or a crash leave nothing running.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

REPO = Path(__file__).resolve().parents[3]
BUILD = Path(os.environ.get("RL_BUILD_DIR", REPO / "build"))

_live: Dict[int, subprocess.Popen] = {}


def clear_of_window_edge(unit_s, need_s=8.0):
    """Windows aligned to the epoch (fixed_window: a minute, an hour, a day) end at a time of
    day: a test that counts in one, or checks how long until it ends, would fail across its
    end. Waits until the current window has need_s left."""
    left = unit_s - time.time() % unit_s
    if left < need_s:
        time.sleep(left + 0.05)


# A test counting in a window of an hour (aligned to the epoch) across the hour's end sees its
# counts restart: every test starts at least this long before an hour's end (the conftests'
# autouse fixture); a test needing more calls clear_of_window_edge itself.
HOUR_CLEAR_S = 30.0


def need_binaries(*names: str) -> None:
    """Skips the calling test when a program is not built in BUILD, or fails it when
    RL_REQUIRE_BINARIES=1 (run_tests.sh sets it: a run that tested nothing must not pass)."""
    import pytest

    for b in names:
        if not (BUILD / b).exists():
            why = f"{BUILD / b} is missing: run scripts/build.sh release"
            if os.environ.get("RL_REQUIRE_BINARIES") == "1":
                pytest.fail(f"{why} (RL_REQUIRE_BINARIES=1: a missing program fails the run)",
                            pytrace=False)
            pytest.skip(why)


def _kill_all() -> None:
    for p in list(_live.values()):
        kill(p)


atexit.register(_kill_all)


def _child_setup() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def spawn(argv: Sequence[str], log: Path, env: Optional[Dict[str, str]] = None) -> subprocess.Popen:
    """Start argv in a new process group (session), stdout/stderr to log."""
    with open(log, "ab") as out:
        p = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True,
                             preexec_fn=_child_setup, env=env)
    _live[p.pid] = p
    return p


def kill(p: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """Signal p's process group (a stopped process is continued so it can die), reap it."""
    try:
        os.killpg(p.pid, sig)
        if sig != signal.SIGKILL:
            os.killpg(p.pid, signal.SIGCONT)
    except ProcessLookupError:
        pass
    try:
        p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
    _live.pop(p.pid, None)


_PORT_LO = 20000  # ports are drawn from [_PORT_LO, the ephemeral range's start)
_ports_used: set = set()


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback port nothing listens on, drawn at random below the kernel's ephemeral
    range (as harness/harness.c does): a port the kernel hands out (bind to 0) is also the
    local port of some other process's next outgoing connection, or another suite's next
    listener, before the server this test starts binds it (a RESP test once reached another
    cluster's node there, on a loaded machine). Never the same port twice in one run."""
    import random

    hi = _ephemeral_low()
    for _ in range(4000):
        if hi - _PORT_LO >= 1000:
            port = random.randrange(_PORT_LO, hi)
        else:
            with socket.socket() as s:  # no room below the range: the kernel's choice
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
        if port not in _ports_used and _bindable(port):
            _ports_used.add(port)
            return port
    raise RuntimeError("no free loopback port")


def wait_port(port: int, proc: Optional[subprocess.Popen] = None, log: Optional[Path] = None,
              timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            text = log.read_text(errors="replace") if log else ""
            raise RuntimeError(f"process exited with {proc.returncode}:\n{text}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


DEFAULT_SERVICES = """
[service fw]
failure = open
limit = fixed_window 10 per 1h

[service fwc]
failure = closed
limit = fixed_window 10 per 1h

[service big]
limit = fixed_window 100000 per 1h

[service leaky]
limit = leaky_bucket 2 per 1s burst 4

[service http]
limit = fixed_window 3 per 10s

[service bench]
limit = token_bucket 1000 per 1s
"""


class Cluster:
    """Nodes and a router on free loopback ports, static membership."""

    def __init__(self, workdir: Path, nodes: Sequence[str] = ("a",),
                 services: str = DEFAULT_SERVICES, extra: str = "",
                 deadline: str = "200ms", cluster: str = "") -> None:
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.node_ports = {n: free_port() for n in nodes}
        self.port = free_port()
        self.conf = self.dir / "cluster.conf"
        parts = [f"[cluster]\nname = pytest\nsession_timeout = 2s\n{cluster}",
                 f"[router]\nlisten = 127.0.0.1:{self.port}\ndeadline = {deadline}\n"]
        for n, p in self.node_ports.items():
            parts.append(f"[node {n}]\nlisten = 127.0.0.1:{p}\nmemory = 64mb\n")
        parts += [services, extra]
        self.conf.write_text("\n".join(parts))
        self.nodes: Dict[str, subprocess.Popen] = {}
        self.router: Optional[subprocess.Popen] = None

    def start(self) -> "Cluster":
        for n in self.node_ports:
            self.start_node(n)
        self.start_router()
        return self

    def start_node(self, name: str) -> None:
        log = self.dir / f"node-{name}.log"
        self.nodes[name] = spawn([str(BUILD / "rl-node"), "--config", str(self.conf),
                                  "--name", name], log)
        wait_port(self.node_ports[name], self.nodes[name], log)

    def start_router(self) -> None:
        log = self.dir / "router.log"
        self.router = spawn([str(BUILD / "rl-router"), "--config", str(self.conf)], log)
        wait_port(self.port, self.router, log)
        self._wait_ready()

    def _wait_ready(self, timeout: float = 5.0) -> None:
        """Until the router answers a CHECK from a node (not its failure policy)."""
        import ratelimiter

        deadline = time.monotonic() + timeout
        with ratelimiter.Client("127.0.0.1", self.port, 1.0, token=self.ready_token,
                                ssl=self.ready_ssl) as c:
            while time.monotonic() < deadline:
                try:
                    r = c.check(self.ready_service, "__ready__", cost=0)
                    if r.code != ratelimiter.Code.FAIL_OPEN:
                        return
                except ratelimiter.Unavailable:
                    pass
                time.sleep(0.02)
        raise RuntimeError("router never reached its nodes")

    ready_service = "fw"
    ready_token: Optional[bytes] = None
    ready_ssl = None  # an ssl.SSLContext when the cluster speaks TLS

    def kill_router(self) -> None:
        if self.router is not None:
            kill(self.router)
            self.router = None

    def kill_node(self, name: str) -> None:
        kill(self.nodes.pop(name))

    def stop(self) -> None:
        procs: List[subprocess.Popen] = list(self.nodes.values())
        if self.router is not None:
            procs.append(self.router)
        for p in procs:
            kill(p)
        self.nodes.clear()
        self.router = None
