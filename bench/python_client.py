"""Driver of bench/python_client.sh: one mode for DURATION seconds, one JSON line out.

    python_client.py PORT MODE DURATION   (MODE: sync | many | async)
"""

import asyncio
import json
import random
import sys
import time

import ratelimiter

port, mode, duration = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
BATCH, IN_FLIGHT = 100, 256
rng = random.Random(1)


def user() -> str:
    return f"u{rng.randrange(1_000_000)}"


def pct(lat, q):
    lat.sort()
    return lat[min(len(lat) - 1, int(q * len(lat)))] * 1e6


def sync(batch: int):
    c = ratelimiter.connect("127.0.0.1", port, timeout=5)
    lat, n, t0 = [], 0, time.perf_counter()
    end = t0 + duration
    while True:
        reqs = [("bench", user())] * batch
        s = time.perf_counter()
        if batch == 1:
            c.check("bench", reqs[0][1])
        else:
            c.check_many(reqs)
        e = time.perf_counter()
        lat.append(e - s)
        n += batch
        if e >= end:
            break
    return n, e - t0, lat


async def aio():
    c = ratelimiter.AsyncClient("127.0.0.1", port, timeout=5, max_in_flight=IN_FLIGHT)
    await c.connect()
    lat, n = [], 0
    t0 = time.perf_counter()
    end = t0 + duration

    async def worker():
        nonlocal n
        while time.perf_counter() < end:
            s = time.perf_counter()
            await c.check("bench", user())
            lat.append(time.perf_counter() - s)
            n += 1

    await asyncio.gather(*[worker() for _ in range(IN_FLIGHT)])
    took = time.perf_counter() - t0
    await c.close()
    return n, took, lat


if mode == "sync":
    n, took, lat = sync(1)
elif mode == "many":
    n, took, lat = sync(BATCH)
else:
    n, took, lat = asyncio.run(aio())
print(json.dumps({"mode": mode, "checks": n, "checks_per_s": round(n / took),
                  "p50_us": round(pct(lat, 0.5)), "p99_us": round(pct(lat, 0.99))}, separators=(",", ":")))
