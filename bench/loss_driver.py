#!/usr/bin/env python3
"""The client side of bench/loss.sh: what a node's loss costs, measured through two routers.

For: the two figures of docs/BENCHMARKS.md ("What a loss costs, measured"), one run each,
printed as one JSON line. Not for: asserting anything (tests/integration/check_loss.c counts
the kill case as a test; the fast-batch share is a latency figure no test may assert), nor for
starting the cluster (bench/loss.sh does that).

    loss_driver.py kill R0 R1 PID   300 users of [service day] (token_bucket 20 per 1d) to their
                                    limit through R0, refused through both, then SIGKILL of PID
                                    and 6 s more of rounds of all 300 through R0 and R1 in turn:
                                    answers that were not LIMITED, in all and per user
    loss_driver.py stop R0 R1 PID   batches of 50 users of [service wide] (every node's) through
                                    R0 and R1 in turn; 1 s as is, then PID stopped (SIGSTOP) for
                                    3 s: the share of batches answered in under 10 ms, each way

One client (one thread, one connection per router, pipelined check_many), as fast as it can.
"""

import json
import os
import random
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients",
                                "python", "src"))
from ratelimiter import Client  # noqa: E402
from ratelimiter.protocol import Code  # noqa: E402

USERS = 300
LIMIT = 20


def wait_ready(cs, nodes=3):
    """Both routers see every node; with a build that counts them, every CHECK connection's
    rules confirmed (refusals are only remembered then); else a second more."""
    for _ in range(400):
        st = [c.stats() for c in cs]
        if all(s.get("members", nodes) == nodes for s in st):
            break
        time.sleep(0.05)
    if all("deny_rules_confirms" in s for s in st):
        for c in cs:
            want = nodes * 2 * c.stats().get("workers", 1)
            for _ in range(400):
                if c.stats().get("deny_rules_confirms", 0) >= want:
                    break
                time.sleep(0.05)
    else:
        time.sleep(1.0)


def kill_case(cs, pid):
    users = [f"user{i}" for i in range(USERS)]
    reqs = [("day", u) for u in users]
    before = sum(r.code == Code.ALLOWED for _ in range(LIMIT) for r in cs[0].check_many(reqs))
    refused = sum(r.code == Code.LIMITED for c in cs for r in c.check_many(reqs))
    extra = [0] * USERS
    codes, rounds, errors = {}, 0, 0
    os.kill(pid, signal.SIGKILL)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 6.0:
        c = cs[rounds % 2]
        rounds += 1
        try:
            reps = c.check_many(reqs, timeout=2.0, return_exceptions=True)
        except Exception:  # a lost router connection: nothing counted, next round
            errors += 1
            continue
        for i, r in enumerate(reps):
            code = getattr(r, "code", None)
            name = Code(code).name if code is not None else "ERROR"
            codes[name] = codes.get(name, 0) + 1
            if code != Code.LIMITED:
                extra[i] += 1
    return {"case": "kill", "allowed_before": before, "refused_before": refused,
            "rounds": rounds, "answers": rounds * USERS, "codes": codes, "lost_rounds": errors,
            "not_limited": sum(extra), "worst_user": max(extra)}


def stop_case(cs, pid):
    rnd = random.Random(7)
    fast, slow, batches, codes = [0, 0], [0, 0], 0, {}

    def batch(phase):
        nonlocal batches
        reqs = [("wide", f"u{rnd.randrange(100000)}") for _ in range(50)]
        c = cs[batches % 2]
        batches += 1
        t = time.monotonic()
        try:
            reps = c.check_many(reqs, timeout=2.0, return_exceptions=True)
        except Exception:
            slow[phase] += 1
            return
        dt = time.monotonic() - t
        (fast if dt < 0.010 else slow)[phase] += 1
        if phase == 1:
            for r in reps:
                code = getattr(r, "code", None)
                name = Code(code).name if code is not None else "ERROR"
                codes[name] = codes.get(name, 0) + 1

    t0 = time.monotonic()
    while time.monotonic() - t0 < 1.0:
        batch(0)
    os.kill(pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 3.0:
            batch(1)
    finally:
        os.kill(pid, signal.SIGCONT)
    share = [fast[p] / max(1, fast[p] + slow[p]) for p in (0, 1)]
    return {"case": "stop", "batches_before": fast[0] + slow[0], "fast_before": share[0],
            "batches_stopped": fast[1] + slow[1], "fast_stopped": share[1], "codes": codes}


def main():
    case, r0, r1, pid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    cs = [Client("127.0.0.1", p, timeout=5.0).connect() for p in (r0, r1)]
    wait_ready(cs)
    out = kill_case(cs, pid) if case == "kill" else stop_case(cs, pid)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
