#!/usr/bin/env python3
"""The client side of bench/move_stalls.sh: how long a node keeps the requests of the shards
it keeps waiting while it exports others (a node joining takes a third of its shards), one
run, one JSON line.

For: docs/BENCHMARKS.md, "Planned moves: the export pass". Not for: asserting anything (a
latency figure on a busy machine is no test), nor for starting the cluster (the script does).

    move_stalls_driver.py PORT STOP_FILE
        one connection to the node at 127.0.0.1:PORT; a PING every 1 ms, waited for, until
        STOP_FILE exists. Prints the count, p50, p99, p99.9 and max latency in ms, and how many
        took 5 ms or more.
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients",
                                "python", "src"))
from ratelimiter import Client  # noqa: E402
from planned_moves_driver import pct  # noqa: E402  (this folder's, the same percentile)


def main():
    port, stop = int(sys.argv[1]), sys.argv[2]
    token = os.environ.get("RL_TOKEN_FILE")
    c = Client("127.0.0.1", port, timeout=10.0, token_file=token).connect()
    lat = []
    while not os.path.exists(stop):
        t = time.monotonic()
        c.ping()
        lat.append((time.monotonic() - t) * 1000.0)
        time.sleep(0.001)
    lat.sort()
    print(json.dumps({"count": len(lat), "p50_ms": round(pct(lat, 50), 3),
                      "p99_ms": round(pct(lat, 99), 3), "p999_ms": round(pct(lat, 99.9), 3),
                      "max_ms": round(lat[-1] if lat else 0.0, 3),
                      "over_5ms": sum(1 for x in lat if x >= 5.0)}))


if __name__ == "__main__":
    main()
