#!/usr/bin/env python3
"""A client that sends all it can on one connection, beside a flood of 50 connections from
one other address (docs/BENCHMARKS.md, "A router's turn split by address"): a node and a
router (static membership, `deadline = 50ms`, one router worker) from each BIN_DIR in turn on
free loopback ports; `rl-bench` (from LOADGEN_DIR: it needs --source) opens 50 connections
from 127.0.0.1, each keeping 4,096 CHECKs in flight, and a neighbour opens one connection from
127.0.0.2 keeping 4,096 in flight, both for 8 s. Prints, per round and build, the CHECKs the
node decided per second for each, and the neighbour's part. Builds alternate round by round.
A benchmark, not a test: what it shows depends on the machine.
Usage: heavy_neighbour.py LOADGEN_DIR BIN_DIR [BIN_DIR...] [--rounds N]"""
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attack_lib import cluster  # noqa: E402


def bench(loadgen, rport, conns, source, service):
    return subprocess.Popen([os.path.join(loadgen, "rl-bench"), "--target",
                             "127.0.0.1:%d" % rport, "--source", source, "--connections",
                             str(conns), "--pipeline", "4096", "--service", service,
                             "--duration", "8", "--json"], stdout=subprocess.PIPE, text=True)


def summary(p):
    out, _ = p.communicate(timeout=60)
    s = {}
    for line in out.splitlines():
        try:
            s = json.loads(line)
        except ValueError:
            pass
    return s.get("allowed", 0) / max(s.get("seconds", 8.0), 1e-9)


def one_round(loadgen, bindir):
    services = ("[service near]\nlimit = fixed_window 1000000000 per 1h\n\n"
                "[service flood]\nlimit = fixed_window 1000000000 per 1h\n")
    with cluster(bindir, services, "", "512mb") as (rport, _):
        flood = bench(loadgen, rport, 50, "127.0.0.1", "flood")
        time.sleep(0.5)
        near = bench(loadgen, rport, 1, "127.0.0.2", "near")
        n = summary(near)
        f = summary(flood)
    return n, f


def main():
    args = sys.argv[1:]
    rounds = 3
    if "--rounds" in args:
        i = args.index("--rounds")
        rounds = int(args[i + 1])
        del args[i:i + 2]
    loadgen, bindirs = args[0], args[1:]
    got = {b: [] for b in bindirs}
    for r in range(rounds):
        for b in bindirs:
            n, f = one_round(loadgen, b)
            got[b].append((n, f))
            print("round %d %s: neighbour %.0f decided/s, flood %.0f/s, neighbour's part %.1f%%" %
                  (r + 1, b, n, f, 100.0 * n / max(n + f, 1)), flush=True)
    for b in bindirs:
        ns = [n for n, _ in got[b]]
        fs = [f for _, f in got[b]]
        print("RESULT %s: neighbour median %.0f/s, flood median %.0f/s, part %.1f%%" %
              (b, statistics.median(ns), statistics.median(fs),
               100.0 * statistics.median(ns) / max(statistics.median(ns) + statistics.median(fs), 1)))


main()
