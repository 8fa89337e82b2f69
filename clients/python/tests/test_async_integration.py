"""The asyncio client against real processes: many requests in flight on one connection."""

import asyncio
import os
import signal
import time

import pytest

import ratelimiter
from ratelimiter import AsyncClient, Code, Timeout, Unavailable

pytestmark = pytest.mark.integration


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_500_concurrent_checks_one_connection(cluster):
    async def main():
        async with AsyncClient("127.0.0.1", cluster.port, max_in_flight=64) as c:
            peak = 0

            async def one(i):
                nonlocal peak
                r = await c.check("fw", f"async{i}")
                peak = max(peak, c.in_flight)
                return r

            rs = await asyncio.gather(*[one(i) for i in range(500)])
            same = await asyncio.gather(*[c.check("big", "async-same") for _ in range(500)])
            stats = await c.stats()
            conn = c._conn
            return rs, same, peak, stats, conn, c._conn
    rs, same, peak, stats, conn_before, conn_after = run(main())
    assert all(r.code == Code.ALLOWED and r.remaining == 9 and r.limit == 10 for r in rs)
    assert sorted(r.remaining for r in same) == list(range(100000 - 500, 100000))
    assert len({r.id for r in rs + same}) == 1000
    assert peak <= 64
    assert conn_before is conn_after   # one connection throughout
    assert stats["checks"] >= 1000


def test_async_exact_counts_and_check_many(cluster):
    async def main():
        async with AsyncClient("127.0.0.1", cluster.port, max_in_flight=100) as c:
            seq = [await c.check("fw", "async-exact") for _ in range(12)]
            many = await c.check_many([("big", "async-many")] * 1000)   # 10 batches of 100
            return seq, many
    seq, many = run(main())
    assert [r.remaining for r in seq] == list(range(9, -1, -1)) + [0, 0]
    assert [r.code for r in seq] == [Code.ALLOWED] * 10 + [Code.LIMITED] * 2
    assert sorted(r.remaining for r in many) == list(range(100000 - 1000, 100000))
    assert [r.id for r in many] == sorted(r.id for r in many)


def test_async_exact_sequence_direct_to_node(cluster):
    async def main():
        async with AsyncClient("127.0.0.1", cluster.node_ports["a"], max_in_flight=256) as c:
            return await c.check_many([("big", "async-node")] * 1000)
    rs = run(main())
    assert [r.remaining for r in rs] == list(range(99999, 98999, -1))


# A call's timeout in the timeout tests: long enough that a loaded machine's scheduling
# delays stay far under it, so "not before it, and under twice it" (or "under it" for an
# answer that needs no timeout) holds on any machine.
CALL_S = 1.0


def test_async_timeout_fails_only_that_call(fresh_cluster):
    async def main():
        c = AsyncClient("127.0.0.1", fresh_cluster.port, timeout=2.0)
        assert (await c.check("fw", "astop")).remaining == 9
        conn = c._conn
        os.kill(fresh_cluster.router.pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            short = asyncio.ensure_future(c.check("fw", "astop", timeout=CALL_S))
            longer = asyncio.ensure_future(c.check("fw", "astop", timeout=5 * CALL_S))
            with pytest.raises(Timeout) as e:
                await short
            assert CALL_S - 0.05 <= time.monotonic() - t0 < 2 * CALL_S - 0.1 and e.value.in_doubt
            assert not longer.done()      # the other call is still waiting
        finally:
            os.kill(fresh_cluster.router.pid, signal.SIGCONT)
        r = await longer
        assert r.code == Code.ALLOWED
        after = await c.check("fw", "astop")
        assert c._conn is conn and conn.late == 1   # same connection; late reply dropped
        await c.close()
        return r, after
    r, after = run(main())
    assert {r.remaining, after.remaining} <= {6, 7, 8}
    assert after.remaining == 6         # three counted before it: nothing re-sent


def test_async_failure_policy_and_reconnect(fresh_cluster):
    async def main():
        c = AsyncClient("127.0.0.1", fresh_cluster.port, timeout=CALL_S,
                        failure={"fw": "open", "fwc": "closed"})
        assert (await c.check("fw", "apol")).remaining == 9
        fresh_cluster.kill_router()
        t0 = time.monotonic()
        o, cl = await asyncio.gather(c.check("fw", "apol"), c.check("fwc", "apol"))
        assert time.monotonic() - t0 < CALL_S - 0.05      # refused: no timeout waited
        assert o.local and o.code == Code.FAIL_OPEN
        assert cl.local and cl.code == Code.FAIL_CLOSED and cl.retry_after_ms == 1000
        with pytest.raises(Unavailable):
            await c.check("big", "apol")
        fresh_cluster.start_router()
        r = await c.check("fw", "apol")
        assert r.code == Code.ALLOWED and r.remaining == 8 and not r.local
        # stopped router: the policy answers after the call's timeout
        os.kill(fresh_cluster.router.pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            s = await c.check("fwc", "apol", timeout=CALL_S)
            assert s.code == Code.FAIL_CLOSED and s.local
            assert CALL_S - 0.05 <= time.monotonic() - t0 < 2 * CALL_S - 0.1
        finally:
            os.kill(fresh_cluster.router.pid, signal.SIGCONT)
        await c.close()
    run(main())
