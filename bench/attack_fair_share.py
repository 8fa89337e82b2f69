#!/usr/bin/env python3
"""One client floods a node through a router, another asks now and then (docs/BENCHMARKS.md,
"A node's time shared between clients"): a node and a router (static membership,
`deadline = 50ms`, one router worker) from BIN_DIR on free loopback ports; `rl-bench` opens
FLOOD_CONNS connections (50 by default) to the router, each keeping 4,096 CHECKs of a
`failure = open` service in flight for 10 s, while an innocent client (from 127.0.0.2: another
client for the router) sends a few CHECKs every 2 ms of a `failure = closed` service on the
same node. Prints the innocent's answers by
code (FAIL_CLOSED = 3: its CHECKs missed the deadline behind the flood), its latency, the
flood's throughput, and the router's node_waits and stall resets. A benchmark, not a test:
what it shows depends on the machine.
Usage: [NODE_WINDOW=N] attack_fair_share.py BIN_DIR [FLOOD_CONNS=50] [ROUNDS=1]"""
import collections
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attack_lib import Conn, cluster, frame  # noqa: E402


def innocent(port, seconds, batch=4):
    """Sends batch CHECKs every 2 ms; returns (sent, codes, latencies in ms)."""
    c, sent, codes, lat = Conn(port, "127.0.0.2"), 0, collections.Counter(), []
    t_sent, end = {}, time.time() + seconds

    def take(msgs):
        now = time.monotonic()
        for m in msgs:
            codes[m[2]] += 1
            lat.append((now - t_sent.pop(m[1], now)) * 1000.0)

    while time.time() < end:
        now = time.monotonic()
        for j in range(batch):
            t_sent[sent + j + 1] = now
        c.s.sendall(b"".join(frame([1, sent + j + 1, "inno", "i%d" % ((sent + j) % 100), None,
                                    1]) for j in range(batch)))
        sent += batch
        take(c.replies(block=False))
        time.sleep(0.002)
    end = time.time() + 3
    while sum(codes.values()) < sent and time.time() < end:
        take(c.replies(block=False))
        time.sleep(0.01)
    return sent, codes, lat


def metric(metrics_port, prefix):
    page = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % metrics_port, timeout=5)
    return sum(float(line.split()[-1]) for line in page.read().decode().splitlines()
               if line.startswith(prefix))


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p))] if v else 0.0


def one_round(bindir, conns):
    # NODE_WINDOW=N sets [router] node_window (a router that has it: docs/CONFIG.md)
    extra = "node_window = %s\n" % os.environ["NODE_WINDOW"] if os.environ.get("NODE_WINDOW") else ""
    services = ("[service inno]\nfailure = closed\nlimit = fixed_window 1000000000 per 1h\n\n"
                "[service flood]\nlimit = fixed_window 1000000000 per 1h\n")
    with cluster(bindir, services, extra, "512mb") as (rport, mport):
        sent, codes, lat = innocent(rport, 2)
        print("innocent, no flood: %d sent, by code %s, latency p50 %.2f ms, p99 %.2f ms" %
              (sent, dict(codes), pct(lat, 0.5), pct(lat, 0.99)))
        bench = subprocess.Popen([os.path.join(bindir, "rl-bench"), "--target",
                                  "127.0.0.1:%d" % rport, "--connections", str(conns),
                                  "--pipeline", "4096", "--service", "flood", "--duration",
                                  "10", "--json"], stdout=subprocess.PIPE, text=True)
        time.sleep(1.0)
        sent, codes, lat = innocent(rport, 8)
        out, _ = bench.communicate(timeout=60)
        summary = {}
        for line in out.splitlines():
            try:
                summary = json.loads(line)
            except ValueError:
                pass
        fc = codes.get(3, 0)
        print("innocent, flood of %d connections: %d sent, by code %s, FAIL_CLOSED %d "
              "(%.1f%%), latency p50 %.2f ms, p99 %.2f ms" %
              (conns, sent, dict(codes), fc, 100.0 * fc / max(sent, 1), pct(lat, 0.5),
               pct(lat, 0.99)))
        print("flood: %.0f answers/s (allowed %d, fail_open %d, limited %d)" %
              (summary.get("decisions_per_s", 0), summary.get("allowed", 0),
               summary.get("fail_open", 0), summary.get("limited", 0)))
        print("router: node_waits %d (written over before their turn %d), stall resets %d" %
              (metric(mport, "rl_router_node_waits_total"),
               metric(mport, "rl_router_node_wait_lost_total"),
               metric(mport, "rl_router_upstream_stalls_total{")))
        return 100.0 * fc / max(sent, 1)


def main():
    bindir = sys.argv[1]
    conns = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    shares = [one_round(bindir, conns) for _ in range(rounds)]
    print("RESULT innocent FAIL_CLOSED %%: median %.1f of %s" %
          (statistics.median(shares), ["%.1f" % s for s in shares]))


main()
