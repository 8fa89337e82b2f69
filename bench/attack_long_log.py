#!/usr/bin/env python3
"""The long-sliding-log attack, end to end (docs/BENCHMARKS.md, "A long sliding log"): a
node and a router (static membership, `deadline = 50ms`, one router worker) from BIN_DIR on
free loopback ports; one attacker connection builds 8 inline `sliding_window_log 4000000000
per 49d` keys for BUILD seconds (a CHECK per key per ms), then keeps 4,000 ADJUST +1 of them
in flight for 10 s while an innocent client pipelines CHECKs of a `failure = closed` service.
Prints the innocent's answers by code (FAIL_CLOSED = 3: its CHECKs missed the deadline behind
the attacker's work) and the router's stall resets. A benchmark, not a test: what it shows
depends on the machine. Usage: attack_long_log.py BIN_DIR [BUILD_SECONDS=60]"""
import collections
import os
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attack_lib import Conn, cluster, frame  # noqa: E402

INLINE = ["sliding_window_log", 4000000000, 4000000000, None]


def build(port, seconds, keys=8):
    c, sent, end = Conn(port), 0, time.time() + seconds
    while time.time() < end:
        c.s.sendall(b"".join(frame([1, sent + j, "att", "k%d" % j, None, 1, INLINE])
                             for j in range(keys)))
        sent += keys
        c.replies(block=False)
        time.sleep(0.0009)
    return sent


def flood(port, seconds, out, inflight=4000):
    c, sent, answered = Conn(port), inflight, 0
    c.s.settimeout(5)
    c.s.sendall(b"".join(frame([9, j, "att", "k%d" % (j % 8), None, 1, INLINE])
                         for j in range(inflight)))
    end = time.time() + seconds
    while time.time() < end:
        got = c.replies()
        answered += len(got)
        if got:
            c.s.sendall(b"".join(frame([9, sent + j, "att", "k%d" % ((sent + j) % 8), None, 1,
                                        INLINE]) for j in range(len(got))))
            sent += len(got)
    out["adjusts_answered"] = answered


def innocent(port, seconds, batch=10):
    c, sent, codes, end = Conn(port), 0, collections.Counter(), time.time() + seconds
    while time.time() < end:
        c.s.sendall(b"".join(frame([1, sent + j + 1, "inno", "i%d" % ((sent + j) % 100), None, 1])
                             for j in range(batch)))
        sent += batch
        for m in c.replies(block=False):
            codes[m[2]] += 1
        time.sleep(0.002)
    end = time.time() + 3
    while sum(codes.values()) < sent and time.time() < end:
        for m in c.replies(block=False):
            codes[m[2]] += 1
        time.sleep(0.01)
    return sent, codes


def stalls(metrics_port):
    page = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % metrics_port, timeout=5)
    return sum(float(line.split()[-1]) for line in page.read().decode().splitlines()
               if line.startswith("rl_router_upstream_stalls_total{"))


def main():
    bindir, secs = sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 60.0
    services = ("[service inno]\nfailure = closed\nlimit = fixed_window 1000000000 per 1h\n\n"
                "[service slog]\nlimit = sliding_window_log 10 per 1s\n")
    with cluster(bindir, services) as (rport, mport):
        print("built: %d CHECKs in %.0f s" % (build(rport, secs), secs))
        sent, codes = innocent(rport, 3)
        print("innocent, no attack: %d sent, by code %s" % (sent, dict(codes)))
        out = {}
        t = threading.Thread(target=flood, args=(rport, 10, out))
        t.start()
        time.sleep(0.5)
        sent, codes = innocent(rport, 9)
        t.join()
        print("innocent, under attack: %d sent, by code %s, FAIL_CLOSED %d" %
              (sent, dict(codes), codes.get(3, 0)))
        print("attacker: %d ADJUSTs answered in 10 s; router stall resets: %d" %
              (out.get("adjusts_answered", 0), stalls(mport)))


main()
