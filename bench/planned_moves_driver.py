#!/usr/bin/env python3
"""The client side of bench/planned_moves.sh: the latency of requests for shards that do not
move while other shards do (a rolling restart of the other nodes), one run, one JSON line.

For: docs/BENCHMARKS.md, "Planned moves". Not for: asserting anything (a latency figure on a
busy machine is no test), nor for starting the cluster or restarting nodes (the script does).

    planned_moves_driver.py PORT SECONDS RATE USERS_FILE
        one connection to the router at 127.0.0.1:PORT; every 1/RATE s one CHECK of
        [service other] for the next user of USERS_FILE (one a line: users whose shard node a
        owns, and keeps through the others' restarts), waited for; for SECONDS. Prints the
        count, p50, p99, p99.9 and max latency in ms, and the answers that were not ALLOWED.
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients",
                                "python", "src"))
from ratelimiter import Client  # noqa: E402
from ratelimiter.protocol import Code  # noqa: E402


def pct(xs, p):
    if not xs:
        return 0.0
    k = min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))
    return xs[k]


def main():
    port, seconds, rate, users_file = (int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]),
                                       sys.argv[4])
    users = [u.strip() for u in open(users_file) if u.strip()]
    c = Client("127.0.0.1", port, timeout=5.0).connect()
    lat, other, i = [], 0, 0
    start = time.monotonic()
    due = start
    while time.monotonic() - start < seconds:
        now = time.monotonic()
        if now < due:
            time.sleep(due - now)
        t = time.monotonic()
        r = c.check("other", users[i % len(users)])
        lat.append((time.monotonic() - t) * 1000.0)
        other += r.code != Code.ALLOWED
        i += 1
        due += 1.0 / rate
    lat.sort()
    print(json.dumps({"count": len(lat), "p50_ms": round(pct(lat, 50), 3),
                      "p99_ms": round(pct(lat, 99), 3), "p999_ms": round(pct(lat, 99.9), 3),
                      "max_ms": round(lat[-1] if lat else 0.0, 3), "not_allowed": other}))


if __name__ == "__main__":
    main()
