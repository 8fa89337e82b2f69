"""What the client accepts from a server is bounded (docs/CLIENTS.md, "Bounds").

A tiny fake router in this process (a real TCP socket, a thread answering every CHECK with
a reply the test chose) plays a broken or hostile server: a QUEUED delay of 2^64-1 or 2^40
ms, a reset or retry that no header should carry, a frame longer than the protocol allows.
The client under test is real; only the server is fake.
"""

from __future__ import annotations

import asyncio
import http.client
import os
import struct
import sys
import time
from pathlib import Path
from typing import Callable, List

import msgpack
import pytest

import harness
from fake_router import FakeRouter
import ratelimiter
from ratelimiter import (RETRY_NEVER, AsyncClient, Client, ClientPool, Code, ErrorCode,
                         ProtocolError, Reply, ServerError, headers)

U64_MAX = (1 << 64) - 1
HOSTILE = [U64_MAX, 1 << 40]
NEVER_S = 4294968  # ceil(RETRY_NEVER / 1000): the largest Retry-After / t= a client sends
TIMEOUT = 2.0  # every call's timeout; each must return within it (generous for a loaded machine)


def check_reply(code: int, limit: int = 4, remaining: int = 0, reset_ms: int = 1000,
                retry_after_ms: int = 0) -> Callable[[int], bytes]:
    def answer(rid: int) -> bytes:
        p = msgpack.packb([1, rid, code, limit, remaining, reset_ms, retry_after_ms])
        return struct.pack(">I", len(p)) + p
    return answer


@pytest.fixture
def fake():
    routers: List[FakeRouter] = []

    def make(answer: Callable[[int], bytes]) -> FakeRouter:
        r = FakeRouter(answer)
        routers.append(r)
        return r
    yield make
    for r in routers:
        r.close()


def assert_refused_not_held(r: Reply) -> None:
    """The documented answer to a QUEUED delay over max_queue_delay: LIMITED, retry_after_ms
    clamped to RETRY_NEVER, nothing to sleep; headers() gives 429 and a bounded Retry-After."""
    assert r.code == Code.LIMITED and not r.allowed
    assert r.retry_after_ms == RETRY_NEVER
    assert r.delay_s == 0.0
    time.sleep(r.delay_s)  # what a caller does with it: no OverflowError, no wait
    status, h = headers(r, window_s=60)
    assert status == 429
    assert dict(h)["Retry-After"] == str(NEVER_S)
    assert dict(h)["RateLimit"] == '"svc";r=0;t=1'


@pytest.mark.parametrize("delay_ms", HOSTILE)
def test_sync_queued_delay_over_bound_is_refused(fake, delay_ms):
    srv = fake(check_reply(Code.QUEUED, retry_after_ms=delay_ms))
    with Client("127.0.0.1", srv.port, timeout=TIMEOUT) as c:
        t0 = time.monotonic()
        r = c.check("svc", "u")
        assert time.monotonic() - t0 < TIMEOUT
        assert_refused_not_held(r)
        rs = c.check_many([("svc", "a"), ("svc", "b")])
        for r in rs:
            assert_refused_not_held(r)


@pytest.mark.parametrize("delay_ms", HOSTILE)
def test_pool_queued_delay_over_bound_is_refused(fake, delay_ms):
    srv = fake(check_reply(Code.QUEUED, retry_after_ms=delay_ms))
    with ClientPool("127.0.0.1", srv.port, size=2, timeout=TIMEOUT) as pool:
        assert_refused_not_held(pool.check("svc", "u"))


@pytest.mark.parametrize("delay_ms", HOSTILE)
def test_async_queued_delay_over_bound_is_refused(fake, delay_ms):
    srv = fake(check_reply(Code.QUEUED, retry_after_ms=delay_ms))

    async def main():
        async with AsyncClient("127.0.0.1", srv.port, timeout=TIMEOUT) as c:
            t0 = time.monotonic()
            r = await c.check("svc", "u")
            assert time.monotonic() - t0 < TIMEOUT
            await asyncio.sleep(r.delay_s)
            return r, await c.check_many([("svc", "a"), ("svc", "b")])
    r, rs = asyncio.run(asyncio.wait_for(main(), 10))
    for x in [r] + rs:
        assert_refused_not_held(x)


def test_max_queue_delay_is_the_bound(fake):
    """Up to max_queue_delay (default 10 s) QUEUED is kept; past it, LIMITED with the
    server's retry_after_ms (no clamp needed below RETRY_NEVER)."""
    assert Client().max_queue_delay == ratelimiter.DEFAULT_MAX_QUEUE_DELAY == 10.0
    srv = fake(check_reply(Code.QUEUED, retry_after_ms=250))
    with Client("127.0.0.1", srv.port, timeout=TIMEOUT) as c:
        r = c.check("svc", "u")
        assert r.code == Code.QUEUED and r.retry_after_ms == 250 and r.delay_s == 0.25
    with Client("127.0.0.1", srv.port, timeout=TIMEOUT, max_queue_delay=0.25) as c:
        assert c.check("svc", "u").code == Code.QUEUED  # the bound itself is accepted
    with Client("127.0.0.1", srv.port, timeout=TIMEOUT, max_queue_delay=0.2) as c:
        r = c.check("svc", "u")
        assert r.code == Code.LIMITED and r.retry_after_ms == 250 and r.delay_s == 0
        assert headers(r)[0] == 429 and dict(headers(r)[1])["Retry-After"] == "1"
    srv10 = fake(check_reply(Code.QUEUED, retry_after_ms=10001))
    with Client("127.0.0.1", srv10.port, timeout=TIMEOUT) as c:
        r = c.check("svc", "u")
        assert r.code == Code.LIMITED and r.retry_after_ms == 10001

    async def main():
        async with AsyncClient("127.0.0.1", srv.port, timeout=TIMEOUT,
                               max_queue_delay=0.2) as c:
            return await c.check("svc", "u")
    assert asyncio.run(main()).code == Code.LIMITED


@pytest.mark.parametrize("bad", [-1, -0.001, 4294967.296, float("nan"), float("inf"), "1",
                                 True])
def test_max_queue_delay_is_checked(bad):
    with pytest.raises(ValueError):
        Client(max_queue_delay=bad)
    with pytest.raises(ValueError):
        AsyncClient(max_queue_delay=bad)


@pytest.mark.parametrize("value", HOSTILE)
def test_header_values_are_clamped(fake, value):
    """Retry-After (LIMITED, FAIL_CLOSED) and RateLimit t= / X-RateLimit-Reset never pass
    ceil(RETRY_NEVER / 1000) = 4294968 s, whatever the server sent."""
    srv = fake(check_reply(Code.LIMITED, reset_ms=value, retry_after_ms=value))
    with Client("127.0.0.1", srv.port, timeout=TIMEOUT) as c:
        r = c.check("svc", "u")
    assert r.code == Code.LIMITED
    assert headers(r, legacy=True) == (429, [
        ("RateLimit-Policy", '"svc";q=4'),
        ("RateLimit", f'"svc";r=0;t={NEVER_S}'),
        ("Retry-After", str(NEVER_S)),
        ("X-RateLimit-Limit", "4"),
        ("X-RateLimit-Remaining", "0"),
        ("X-RateLimit-Reset", str(NEVER_S)),
    ])
    fc = Reply(Code.FAIL_CLOSED, retry_after_ms=value, service="svc")
    assert headers(fc) == (503, [("Retry-After", str(NEVER_S))])
    ok = Reply(Code.ALLOWED, 4, 3, value, 0, "svc")
    assert headers(ok)[1][1] == ("RateLimit", f'"svc";r=3;t={NEVER_S}')
    # the protocol's own "never" is still said as it was
    never = Reply(Code.LIMITED, 4, 0, 1000, RETRY_NEVER, "svc")
    assert dict(headers(never)[1])["Retry-After"] == str(NEVER_S)


def frame_of_length(n: int) -> Callable[[int], bytes]:
    return lambda rid: struct.pack(">I", n) + b"\x00" * 16


@pytest.mark.parametrize("n", [65537, 1 << 31, 0])
def test_reply_frame_size_is_bounded(fake, n):
    """A length prefix outside 1..65536 is a ProtocolError as soon as its 4 bytes arrive:
    the client neither waits for nor buffers the payload."""
    srv = fake(frame_of_length(n))
    with Client("127.0.0.1", srv.port, timeout=TIMEOUT) as c:
        t0 = time.monotonic()
        with pytest.raises(ProtocolError):
            c.check("svc", "u")
        assert time.monotonic() - t0 < TIMEOUT
        assert not c.connected

    async def main():
        async with AsyncClient("127.0.0.1", srv.port, timeout=TIMEOUT) as c:
            with pytest.raises(ProtocolError):
                await c.check("svc", "u")
    t0 = time.monotonic()
    asyncio.run(asyncio.wait_for(main(), 10))
    assert time.monotonic() - t0 < TIMEOUT


def other_op_reply(op: int) -> Callable[[int], bytes]:
    """An ADJUST's or RELEASE's reply, which has a CHECK reply's shape, ALLOWED."""
    def answer(rid: int) -> bytes:
        p = msgpack.packb([op, rid, 0, 100, 99, 1000, 0])
        return struct.pack(">I", len(p)) + p
    return answer


@pytest.mark.parametrize("op", [9, 10, 2])
def test_check_answered_with_another_op_is_refused(fake, op):
    """A reply of another op to a CHECK's id (an ADJUST's or RELEASE's has a CHECK's shape)
    is a ProtocolError and closes the connection: never taken as the CHECK's ALLOWED."""
    srv = fake(other_op_reply(op))
    with Client("127.0.0.1", srv.port, timeout=TIMEOUT) as c:
        with pytest.raises(ProtocolError):
            c.check("svc", "u")
        assert not c.connected
        with pytest.raises(ProtocolError):
            c.check_many([("svc", "u"), ("svc", "v")])

    async def main():
        async with AsyncClient("127.0.0.1", srv.port, timeout=TIMEOUT) as c:
            with pytest.raises(ProtocolError):
                await c.check("svc", "u")
            with pytest.raises(ProtocolError):
                await c.check_many([("svc", "u"), ("svc", "v")])
    asyncio.run(asyncio.wait_for(main(), 10))


def test_moving_is_a_server_error_and_keeps_the_connection(fake):
    """A node asked directly during a planned move answers ERROR MOVING with the owner to
    ask: ServerError(MOVING) with .owner, the connection kept for the retry."""
    def answer(rid: int) -> bytes:
        b = msgpack.packb([255, rid, 7, "shard 5 is moving to n2", "n2"])
        return struct.pack(">I", len(b)) + b
    srv = fake(answer)
    with Client("127.0.0.1", srv.port, timeout=TIMEOUT) as c:
        with pytest.raises(ServerError) as ei:
            c.check("svc", "u")
        assert ei.value.code == ErrorCode.MOVING and ei.value.owner == "n2"
        assert c.connected
        with pytest.raises(ServerError):
            c.check("svc", "u")
    assert len(srv.conns) == 1

    async def main():
        async with AsyncClient("127.0.0.1", srv.port, timeout=TIMEOUT) as c:
            with pytest.raises(ServerError) as ei:
                await c.check("svc", "u")
            assert ei.value.owner == "n2"
            with pytest.raises(ServerError):
                await c.check("svc", "u")
    asyncio.run(asyncio.wait_for(main(), 10))
    assert len(srv.conns) == 2


# ---- examples/http_api.py in front of the fake router

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "http_api.py"


def start_api(tmp_path, router_port: int):
    port = harness.free_port()
    log = tmp_path / f"api-{port}.log"
    env = dict(os.environ, PYTHONPATH=str(Path(ratelimiter.__file__).parents[1]))
    p = harness.spawn([sys.executable, str(EXAMPLE), "--router", f"127.0.0.1:{router_port}",
                       "--port", str(port), "--service", "svc", "--timeout", str(TIMEOUT)],
                      log, env=env)
    harness.wait_port(port, p, log)
    return p, port, log


@pytest.mark.parametrize("delay_ms", HOSTILE)
def test_http_api_does_not_hold_a_hostile_queued_delay(fake, tmp_path, delay_ms):
    srv = fake(check_reply(Code.QUEUED, retry_after_ms=delay_ms))
    p, port, log = start_api(tmp_path, srv.port)
    try:
        for _ in range(2):  # the example keeps serving
            t0 = time.monotonic()
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/hello", headers={"X-User": "u"})
            r = c.getresponse()
            r.read()
            c.close()
            assert time.monotonic() - t0 < TIMEOUT
            assert r.status == 429
            assert r.getheader("Retry-After") == str(NEVER_S)
            assert r.getheader("RateLimit") == '"svc";r=0;t=1'
        assert p.poll() is None
        assert "Traceback" not in log.read_text()
    finally:
        harness.kill(p)
