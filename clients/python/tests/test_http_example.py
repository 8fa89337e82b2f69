"""examples/http_api.py as a subprocess, driven with real HTTP requests."""

import http.client
import os
import re
import sys
import time
from pathlib import Path

import pytest

import harness
import ratelimiter

pytestmark = pytest.mark.integration
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "http_api.py"


def start_api(tmp_path, cluster, *args):
    port = harness.free_port()
    log = tmp_path / f"api-{port}.log"
    # the same ratelimiter this test imported (installed, or the source tree)
    env = dict(os.environ, PYTHONPATH=str(Path(ratelimiter.__file__).parents[1]))
    p = harness.spawn([sys.executable, str(EXAMPLE), "--router", f"127.0.0.1:{cluster.port}",
                       "--port", str(port), *args], log, env=env)
    harness.wait_port(port, p, log)
    return p, port


def get(port, user=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("GET", "/hello", headers={"X-User": user} if user else {})
    r = c.getresponse()
    r.read()
    c.close()
    return r.status, r


def test_http_api_200_then_429(cluster, tmp_path):
    p, port = start_api(tmp_path, cluster, "--service", "http", "--window", "10")
    try:
        for left in (2, 1, 0):
            status, r = get(port, "carol")
            assert status == 200
            assert r.getheader("RateLimit-Policy") == '"http";q=3;w=10'
            assert re.fullmatch(rf'"http";r={left};t=([1-9]|10)', r.getheader("RateLimit"))
            assert r.getheader("Retry-After") is None
        status, r = get(port, "carol")
        assert status == 429
        ra = int(r.getheader("Retry-After"))
        t = int(re.fullmatch(r'"http";r=0;t=(\d+)', r.getheader("RateLimit")).group(1))
        assert 1 <= ra <= 10 and ra == t   # fixed window: allowed again when it resets
        assert r.getheader("RateLimit-Policy") == '"http";q=3;w=10'
        assert get(port, "dave")[0] == 200           # another user
        assert get(port)[0] == 200                   # the client address as user
    finally:
        harness.kill(p)


def test_http_api_queued_waits(cluster, tmp_path):
    p, port = start_api(tmp_path, cluster, "--service", "leaky")
    try:
        assert get(port, "q")[0] == 200
        t0 = time.monotonic()
        status, r = get(port, "q")                  # QUEUED: held ~500 ms, then 200
        assert status == 200 and time.monotonic() - t0 >= 0.45
        assert r.getheader("RateLimit-Policy") == '"leaky";q=4'
        assert r.getheader("Retry-After") is None
    finally:
        harness.kill(p)


def test_http_api_router_down(fresh_cluster, tmp_path):
    closed, cport = start_api(tmp_path, fresh_cluster, "--service", "http", "--failure", "closed")
    opened, oport = start_api(tmp_path, fresh_cluster, "--service", "http")
    try:
        fresh_cluster.kill_router()
        status, r = get(cport, "x")
        assert status == 503 and r.getheader("Retry-After") == "1"
        assert r.getheader("RateLimit") is None
        status, r = get(oport, "x")
        assert status == 200 and r.getheader("RateLimit") is None
    finally:
        harness.kill(closed)
        harness.kill(opened)
