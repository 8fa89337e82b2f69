#!/usr/bin/env python3
"""Planned moves keep every counter: issue 32's check, as its operator ran it, real processes.

For: test_planned_moves.py (which asserts its figures) and bench/planned_moves_check.sh (which
prints them for docs/BENCHMARKS.md, "Planned moves"). Not for: latency figures (the slowest
answer is only checked against the product's promise, deadline + handoff_wait + slack), nor
for the failure cases (rl-chaos handoff-interrupted covers a move cut by a real failure).

One ZooKeeper (scripts/zk.sh), three nodes a, b, c and two routers on free loopback ports
(64 shards, session 2 s, router deadline 200 ms, the routers' deny cache off so that every
CHECK reaches its owner); three services of 20 per 1d (token_bucket, fixed_window, gcra);
600 users each brought to their limit in each: 1,800 exhausted (service, user) pairs. A
client thread asks for all of them, round after round, through both routers in turn (CHECKs
of cost 1, pipelined in batches), all along, while three steps run one after another:

  rolling   each node in turn: SIGTERM, waited for (its exit status kept), started again
  join      a fourth node d starts and takes its shards
  rebalance rl-rebalance levels a skewed request log (rl-genlog, Zipf) and writes the
            assignment to ZooKeeper (its exit status and summary kept)

During each step: the answers that were not LIMITED (extra), the policy answers (FAIL_OPEN,
FAIL_CLOSED, a client-side local decision or an error), the slowest batch (an upper bound of
its slowest answer). After each step, with the client paused: the pairs with a fresh
allowance (one CHECK of cost 1 per pair through each router that is not LIMITED; a refused
CHECK costs nothing). Everything is torn down on any exit (the processes die with this one).

    moves_check.py [--json]     one summary line per step (and one JSON line each)
    STOP_SIGNAL=KILL moves_check.py   the rolling step with kill -9: losses, not moves (the
                                      counters restart from zero: fresh pairs expected)
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
try:
    import ratelimiter  # noqa: F401
except ImportError:
    sys.path.insert(0, str(HERE.parent / "src"))
import harness  # noqa: E402
from ratelimiter import Client  # noqa: E402
from ratelimiter.protocol import Code  # noqa: E402

USERS = 600
LIMIT = 20
SERVICES = {"tb": "token_bucket", "fw": "fixed_window", "gc": "gcra"}
DEADLINE_MS = 200
HANDOFF_WAIT_MS = 2000  # [cluster] handoff_wait's default
BATCH = 100
MARGIN_S = 2.5  # the chaos tool's margin over the deadline: handoff_wait 2 s + slack
MOVE_STATS = ("moved", "held_for_move", "move_redirected", "move_expired", "move_lost_conn",
              "owner_down", "not_owner")


class ZooKeeper:
    """scripts/zk.sh's throwaway server in DIR on a free port."""

    def __init__(self, workdir: Path) -> None:
        self.dir = workdir / "zk"
        self.port = harness.free_port()
        self.started = False

    def start(self) -> "ZooKeeper":
        subprocess.run(["bash", str(harness.REPO / "scripts" / "zk.sh"), "start", str(self.dir),
                        str(self.port)], check=True, stdout=subprocess.DEVNULL)
        self.started = True
        return self

    def stop(self) -> None:
        if self.started:
            subprocess.run(["bash", str(harness.REPO / "scripts" / "zk.sh"), "stop",
                            str(self.dir)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.started = False


class MovesCluster:
    """Nodes and two routers in ZooKeeper membership; nodes stopped cleanly on demand."""

    def __init__(self, workdir: Path, zk: ZooKeeper) -> None:
        self.dir = workdir
        self.conf = workdir / "cluster.conf"
        svc = "".join(f"[service {s}]\nlimit = {a} {LIMIT} per 1d\n\n" for s, a in SERVICES.items())
        self.conf.write_text(
            f"[cluster]\nname = moves\nzookeeper = 127.0.0.1:{zk.port}\n"
            f"session_timeout = 2000ms\nshards = 64\n\n"
            f"[router]\ndeadline = {DEADLINE_MS}ms\ndeny_cache = off\n\n{svc}")
        self.node_ports: Dict[str, int] = {}
        self.nodes: Dict[str, subprocess.Popen] = {}
        self.routers: List[subprocess.Popen] = []
        self.router_ports: List[int] = []

    def start_node(self, name: str) -> None:
        port = self.node_ports.setdefault(name, harness.free_port())
        log = self.dir / f"node-{name}.log"
        self.nodes[name] = harness.spawn([str(harness.BUILD / "rl-node"), "--config",
                                          str(self.conf), "--name", name, "--listen",
                                          f"127.0.0.1:{port}"], log)
        harness.wait_port(port, self.nodes[name], log)

    def stop_node(self, name: str, timeout: float = 30.0,
                  sig: int = signal.SIGTERM) -> Optional[int]:
        """SIGTERM (or sig), waited for: the node's exit status (None if it had to be
        killed)."""
        p = self.nodes.pop(name)
        p.send_signal(sig)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            harness.kill(p)
            return None
        harness._live.pop(p.pid, None)
        return rc

    def start_router(self) -> None:
        port = harness.free_port()
        log = self.dir / f"router-{len(self.routers)}.log"
        p = harness.spawn([str(harness.BUILD / "rl-router"), "--config", str(self.conf),
                           "--listen", f"127.0.0.1:{port}"], log)
        harness.wait_port(port, p, log)
        self.routers.append(p)
        self.router_ports.append(port)

    def wait_members(self, n: int, timeout: float = 20.0) -> None:
        """Until every router sees n members."""
        end = time.monotonic() + timeout
        for port in self.router_ports:
            with Client("127.0.0.1", port, 2.0) as c:
                while c.stats().get("members", -1) != n:
                    if time.monotonic() > end:
                        raise RuntimeError(f"router {port} never saw {n} members")
                    time.sleep(0.05)

    def stop(self) -> None:
        for p in list(self.nodes.values()) + self.routers:
            harness.kill(p)
        self.nodes.clear()
        self.routers.clear()


class Asker:
    """The client: rounds over every pair through both routers in turn, in a thread; counts
    what it got into the current step's figures (none between steps: it waits then)."""

    def __init__(self, ports: List[int], pairs: List[tuple]) -> None:
        self.cs = [Client("127.0.0.1", p, 5.0).connect() for p in ports]
        self.pairs = pairs
        self.step: Optional[Dict] = None
        self.lock = threading.Lock()
        self.idle = threading.Event()
        self.quit = False
        self.t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        while not self.quit:
            with self.lock:
                fig = self.step
            if fig is None:
                self.idle.set()
                time.sleep(0.01)
                continue
            self.idle.clear()
            for i in range(0, len(self.pairs), BATCH):
                if self.quit or self.step is not fig:
                    break
                c = self.cs[n % 2]
                n += 1
                t = time.monotonic()
                try:
                    reps = c.check_many(self.pairs[i:i + BATCH], timeout=10.0,
                                        return_exceptions=True)
                except Exception as e:  # a lost router connection: counted, reconnected
                    fig["errors"] += 1
                    fig["last_error"] = repr(e)
                    try:
                        c.close()
                        c.connect()
                    except Exception:
                        time.sleep(0.05)
                    continue
                dt = time.monotonic() - t
                fig["slowest_s"] = max(fig["slowest_s"], dt)
                for r in reps:
                    fig["answers"] += 1
                    code = getattr(r, "code", None)
                    if code is None or getattr(r, "local", False):
                        fig["policy"] += 1
                        fig["codes"]["ERROR/local"] = fig["codes"].get("ERROR/local", 0) + 1
                        fig["extra"] += 1
                        continue
                    name = Code(code).name
                    fig["codes"][name] = fig["codes"].get(name, 0) + 1
                    if code != Code.LIMITED:
                        fig["extra"] += 1
                    if code in (Code.FAIL_OPEN, Code.FAIL_CLOSED):
                        fig["policy"] += 1

    def begin(self, name: str) -> Dict:
        fig = {"step": name, "answers": 0, "extra": 0, "policy": 0, "errors": 0,
               "slowest_s": 0.0, "codes": {}}
        with self.lock:
            self.step = fig
        return fig

    def end(self) -> None:
        with self.lock:
            self.step = None
        self.idle.wait(timeout=30)

    def fresh(self) -> Dict:
        """Pairs not LIMITED through either router (the asker paused)."""
        fresh, policy = 0, 0
        per: Dict[str, int] = {}
        for i in range(0, len(self.pairs), BATCH):
            chunk = self.pairs[i:i + BATCH]
            got = [c.check_many(chunk, timeout=10.0, return_exceptions=True) for c in self.cs]
            for j, (s, _u) in enumerate(chunk):
                codes = [getattr(g[j], "code", None) for g in got]
                if any(k != Code.LIMITED for k in codes):
                    fresh += 1
                    per[s] = per.get(s, 0) + 1
                policy += sum(k in (Code.FAIL_OPEN, Code.FAIL_CLOSED, None) for k in codes)
        return {"fresh_pairs": fresh, "fresh_by_service": per, "probe_policy": policy}

    def close(self) -> None:
        self.quit = True
        self.t.join(timeout=30)
        for c in self.cs:
            c.close()


def exhaust(cs: List[Client], pairs: List[tuple]) -> Dict:
    """Every pair to its limit through router 0; then how many are refused through both.
    The answers' codes are kept: anything but ALLOWED then LIMITED is a finding too."""
    allowed, codes = 0, {}
    for _ in range(LIMIT):
        for i in range(0, len(pairs), 600):
            for r in cs[0].check_many(pairs[i:i + 600], timeout=10.0):
                allowed += r.code == Code.ALLOWED
                k = "local" if r.local else Code(r.code).name
                codes[k] = codes.get(k, 0) + 1
    refused = 0
    for c in cs:
        for i in range(0, len(pairs), 600):
            refused += sum(r.code == Code.LIMITED
                           for r in c.check_many(pairs[i:i + 600], timeout=10.0))
    return {"allowed_before": allowed, "refused_before": refused, "setup_codes": codes}


def genlog(path: Path) -> None:
    """A skewed request log of this cluster's shape (64 shards, nodes a..d)."""
    with open(path, "wb") as out:
        subprocess.run([str(harness.BUILD / "rl-genlog"), "--keys", "5000", "--zipf", "1.1",
                        "--lines", "200000", "--seed", "3", "--shards", "64", "--nodes",
                        "a,b,c,d"], stdout=out, check=True)


def run(workdir: Path, say=print, stop_signal: int = signal.SIGTERM) -> Dict:
    """The whole check; returns its figures (and says one line per step). stop_signal other
    than SIGTERM (SIGKILL) makes the rolling step a series of losses: the check must then see
    fresh pairs (what it measures is not vacuous)."""
    workdir.mkdir(parents=True, exist_ok=True)
    zk = ZooKeeper(workdir)
    cl: Optional[MovesCluster] = None
    asker: Optional[Asker] = None
    out: Dict = {"steps": []}
    try:
        zk.start()
        cl = MovesCluster(workdir, zk)
        # the routers first, then the nodes one after another, each once every router sees
        # it (nodes started at the same instant can wait handoff_wait for shards from a
        # node that never held them: FAIL_OPEN for a while; docs/BENCHMARKS.md, "Counters
        # across planned moves")
        cl.start_router()
        cl.start_router()
        for k, n in enumerate("abc"):
            cl.start_node(n)
            cl.wait_members(k + 1)
        time.sleep(0.5)
        pairs = [(s, f"user{i}") for i in range(USERS) for s in SERVICES]
        cs = [Client("127.0.0.1", p, 5.0).connect() for p in cl.router_ports]
        out.update(exhaust(cs, pairs))
        for c in cs:
            c.close()
        out["pairs"] = len(pairs)
        asker = Asker(cl.router_ports, pairs)
        asker.t.start()
        say(f"setup: {out['pairs']} pairs, allowed {out['allowed_before']} "
            f"(expected {len(pairs) * LIMIT}), refused after {out['refused_before']} "
            f"(expected {2 * len(pairs)}), codes {out['setup_codes']}")

        def moves() -> Dict[str, int]:
            """The routers' move counters, summed (a restarted router would reset them)."""
            tot: Dict[str, int] = {}
            for port in cl.router_ports:
                with Client("127.0.0.1", port, 2.0) as c:
                    st = c.stats()
                for k in MOVE_STATS:
                    tot[k] = tot.get(k, 0) + st.get(k, 0)
            return tot

        def step(name: str, body) -> Dict:
            before = moves()
            fig = asker.begin(name)
            t0 = time.monotonic()
            extra = body() or {}
            time.sleep(1.0)  # the client keeps asking past the step's end
            asker.end()
            after = moves()
            fig["router"] = {k: after[k] - before[k] for k in MOVE_STATS}
            fig["seconds"] = round(time.monotonic() - t0, 1)
            fig["slowest_s"] = round(fig["slowest_s"], 3)
            fig.update(extra)
            fig.update(asker.fresh())
            out["steps"].append(fig)
            say(f"{name}: fresh pairs {fig['fresh_pairs']}/{len(pairs)}, extra answers "
                f"{fig['extra']}/{fig['answers']}, policy answers {fig['policy']} "
                f"(probe {fig['probe_policy']}), slowest batch {fig['slowest_s']} s, "
                f"{fig['seconds']} s, codes {fig['codes']}, errors {fig['errors']}, "
                f"routers {fig['router']}"
                + "".join(f", {k} {fig[k]}" for k in extra))
            return fig

        def rolling() -> Dict:
            rcs = {}
            for n in "abc":
                rcs[n] = cl.stop_node(n, sig=stop_signal)
                cl.start_node(n)
                cl.wait_members(3)
                time.sleep(1.0)  # traffic against the restarted node before the next stop
            return {"exit_status": rcs}

        def join() -> Dict:
            cl.start_node("d")
            cl.wait_members(4)
            time.sleep(1.0)
            with Client("127.0.0.1", cl.node_ports["d"], 2.0) as c:
                st = c.stats()
            return {"d_keys": st.get("keys", -1), "d_handoffs_in": st.get("handoffs_in_done", -1),
                    "d_handoffs_in_failed": st.get("handoffs_in_failed", -1),
                    "d_keys_in": st.get("handoff_keys_in", -1)}

        def rebalance() -> Dict:
            log = workdir / "requests.log"
            genlog(log)
            p = subprocess.run([str(harness.BUILD / "rl-rebalance"), "--config", str(cl.conf),
                                "--quiet", str(log)], capture_output=True, text=True,
                               timeout=60)
            summary = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
            kv = dict(re.findall(r"(\w+)=(\S+)", summary))
            time.sleep(HANDOFF_WAIT_MS / 1000.0)  # the moves happen after the write
            return {"rebalance_status": p.returncode, "moved_shards": int(kv.get("moved_shards", -1)),
                    "overrides": int(kv.get("overrides", -1)), "written": kv.get("written", "?"),
                    "rebalance_stderr": p.stderr.strip()[-500:]}

        step("rolling", rolling)
        step("join", join)
        step("rebalance", rebalance)
        for n in list(cl.nodes):
            out.setdefault("final_exit_status", {})[n] = cl.stop_node(n)
        return out
    finally:
        if asker is not None:
            asker.close()
        if cl is not None:
            cl.stop()
        zk.stop()


def main() -> int:
    import tempfile

    for b in ("rl-node", "rl-router", "rl-rebalance", "rl-genlog"):
        if not (harness.BUILD / b).exists():
            print(f"{harness.BUILD / b} is missing: run scripts/build.sh release", file=sys.stderr)
            return 1
    sig = getattr(signal, "SIG" + os.environ.get("STOP_SIGNAL", "TERM"))
    if os.environ.get("MOVES_CHECK_DIR"):  # kept: the processes' logs, for a finding
        out = run(Path(os.environ["MOVES_CHECK_DIR"]), stop_signal=sig)
    else:
        with tempfile.TemporaryDirectory(prefix="moves-check-") as d:
            out = run(Path(d), stop_signal=sig)
    if "--json" in sys.argv[1:]:
        for s in out["steps"]:
            print(json.dumps(s))
        print(json.dumps({k: v for k, v in out.items() if k != "steps"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
