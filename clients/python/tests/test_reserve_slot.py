"""reserve()/settle() and slot() (ratelimiter/reserve.py): ADJUST by actual - estimate, and a
concurrency slot taken by CHECK and given back by RELEASE, exceptions included.

The rules of when something is sent are checked on a recording stand-in for the client;
the wire against real processes: ADJUST through a router and straight to a node (RELEASE
and slot() through a router: test_nginx_conn.py, on its concurrency rule)."""

import threading

import pytest

import harness
import ratelimiter
from ratelimiter import Client, ClientPool, Code, Limited, Reply, Unavailable
from ratelimiter.protocol import DELTA_MAX, decode, encode_adjust, encode_release
from ratelimiter.reserve import deltas

msgpack = pytest.importorskip("msgpack")


class Fake:
    """check/adjust/release recorded; check answers `code`."""

    def __init__(self, code=Code.ALLOWED, release_error=None):
        self.code, self.calls, self.release_error = code, [], release_error

    def check(self, service, user, endpoint=None, cost=1, timeout=None, limit=None):
        self.calls.append(("check", service, user, endpoint, cost, limit))
        return Reply(self.code, 10, 5, 1000, 250 if self.code == Code.LIMITED else 0)

    def adjust(self, service, user, delta, endpoint=None, timeout=None, limit=None):
        self.calls.append(("adjust", service, user, endpoint, delta, limit))
        return Reply(Code.ALLOWED, 10, 3, 1000, 0, op=9)

    def release(self, service, user, count=1, endpoint=None, timeout=None):
        self.calls.append(("release", service, user, endpoint, count))
        if self.release_error is not None:
            raise self.release_error
        return Reply(Code.ALLOWED, 5, 5, 0, 0, op=10)

    reserve = Client.reserve
    slot = Client.slot


# ---------------------------------------------------------------------------- the rules


def test_settle_adjusts_by_actual_minus_estimate_once():
    f = Fake()
    r = f.reserve("svc", "u", 100, endpoint="/e", limit="gcra 10 per 1s")
    assert f.calls == [("check", "svc", "u", "/e", 100, "gcra 10 per 1s")]
    assert r.settle(130).op == 9
    assert f.calls[-1] == ("adjust", "svc", "u", "/e", 30, "gcra 10 per 1s")
    with pytest.raises(RuntimeError):
        r.settle(100)
    r = f.reserve("svc", "u", 100)
    r.settle(40)
    assert f.calls[-1][4] == -60  # a refund
    n = len(f.calls)
    assert f.reserve("svc", "u", 5).settle(5) is None  # exact estimate: nothing to send
    assert len(f.calls) == n + 1
    with pytest.raises(ValueError):
        f.reserve("svc", "u", 5).settle(-1)


def test_reserve_refused_raises_limited():
    f = Fake(Code.LIMITED)
    with pytest.raises(Limited) as e:
        f.reserve("svc", "u", 7)
    assert e.value.reply.code == Code.LIMITED and e.value.reply.retry_after_ms == 250
    assert "retry after 250 ms" in str(e.value)
    assert [c[0] for c in f.calls] == ["check"]


def test_settle_after_fail_open_or_no_rule():
    f = Fake(Code.FAIL_OPEN)  # allowed without a decision: nothing was counted
    f.reserve("svc", "u", 10).settle(25)
    assert f.calls[-1][0] == "adjust" and f.calls[-1][4] == 25
    f = Fake(Code.NO_RULE)
    f.reserve("svc", "u", 10).settle(25)
    assert [c[0] for c in f.calls] == ["check"]


def test_large_settlements_are_split():
    assert deltas(0) == []
    assert deltas(DELTA_MAX) == [DELTA_MAX]
    assert deltas(2 * DELTA_MAX + 5) == [DELTA_MAX, DELTA_MAX, 5]
    assert deltas(-DELTA_MAX - 1) == [-DELTA_MAX, -1]
    f = Fake()
    f.reserve("svc", "u", 1).settle(DELTA_MAX + 2)
    assert [c[4] for c in f.calls[1:]] == [DELTA_MAX, 1]


def test_slot_gives_back_on_exit_and_on_exceptions():
    f = Fake()
    with f.slot("svc", "u", count=2) as rep:
        assert rep.code == Code.ALLOWED
        assert f.calls == [("check", "svc", "u", None, 2, None)]
    assert f.calls[-1] == ("release", "svc", "u", None, 2)
    f.calls.clear()
    with pytest.raises(KeyError):
        with f.slot("svc", "u", "/ep"):
            raise KeyError("boom")
    assert f.calls == [("check", "svc", "u", "/ep", 1, None), ("release", "svc", "u", "/ep", 1)]


def test_slot_refused_raises_and_gives_nothing_back():
    f = Fake(Code.LIMITED)
    with pytest.raises(Limited):
        with f.slot("svc", "u"):
            pytest.fail("the block must not run")
    assert [c[0] for c in f.calls] == ["check"]
    f = Fake(Code.FAIL_CLOSED)
    with pytest.raises(Limited):
        with f.slot("svc", "u"):
            pass
    f = Fake(Code.FAIL_OPEN)  # allowed, nothing taken: nothing to give back
    with f.slot("svc", "u"):
        pass
    assert [c[0] for c in f.calls] == ["check"]


def test_a_failed_release_does_not_hide_the_blocks_exception():
    f = Fake(release_error=Unavailable("gone", in_doubt=True))
    with pytest.raises(ZeroDivisionError):
        with f.slot("svc", "u"):
            1 / 0
    with pytest.raises(Unavailable):  # no exception of its own: the release's is raised
        with f.slot("svc", "u"):
            pass


def test_wire_shapes():
    adj = msgpack.unpackb(encode_adjust(7, "s", "u", None, -5)[4:])
    assert adj == [9, 7, "s", "u", None, -5]
    adj = msgpack.unpackb(encode_adjust(7, "s", "u", "/e", 5, ("gcra", 10, 1000, 5))[4:])
    assert adj == [9, 7, "s", "u", "/e", 5, ["gcra", 10, 1000, 5]]
    assert msgpack.unpackb(encode_release(8, "s", "u", "/e", 3)[4:]) == [10, 8, "s", "u", "/e",
                                                                         3]
    for bad in (DELTA_MAX + 1, -DELTA_MAX - 1, 1.5, True):
        with pytest.raises(ValueError):
            encode_adjust(1, "s", "u", None, bad)
    for bad in (0, DELTA_MAX + 1):
        with pytest.raises(ValueError):
            encode_release(1, "s", "u", None, bad)
    rep = decode(msgpack.packb([10, 4, 0, 5, 4, 0, 0]))
    assert rep.op == 10 and rep.code == Code.ALLOWED and rep.remaining == 4
    assert decode(msgpack.packb([9, 4, 4, 0, 0, 0, 0])).code == Code.NO_RULE
    with pytest.raises(ratelimiter.ProtocolError):
        decode(msgpack.packb([9, 4, 0, 5, 4, 0]))


# ---------------------------------------------------------------------------- real processes

@pytest.mark.integration
@pytest.mark.parametrize("via", ["router", "node"])
def test_reserve_and_settle(cluster, via):
    """ADJUST through the router, and straight to the node owning the key (the one node)."""
    port = cluster.port if via == "router" else cluster.node_ports["a"]
    user = f"settle-{via}"
    with Client("127.0.0.1", port) as c:
        r = c.reserve("fw", user, 4)
        assert r.reply.code == Code.ALLOWED and r.reply.remaining == 6
        rep = r.settle(9)  # 5 more: 9 of 10 used
        assert rep.code == Code.ALLOWED and rep.remaining == 1 and rep.op == 9
        assert c.check("fw", user, cost=2).code == Code.LIMITED
        r = c.reserve("fw", user, 1)
        assert r.settle(14).remaining == 0  # charged past the limit: in debt
        with pytest.raises(Limited):
            c.reserve("fw", user, 1)
        assert c.adjust("fw", user, -20).remaining == 7  # 23 used, 20 given back
        assert c.adjust("fw", user, -30).remaining == 10  # at most what was used
        assert c.adjust("nosuch", "x", 5).code == Code.NO_RULE



@pytest.mark.integration
def test_async_reserve_and_settle_on_a_node(cluster):
    import asyncio

    async def run():
        async with ratelimiter.AsyncClient("127.0.0.1", cluster.node_ports["a"]) as c:
            r = await c.reserve("fw", "settle-async", 3)
            assert r.reply.remaining == 7
            rep = await r.settle(1)  # a refund of 2
            assert rep.code == Code.ALLOWED and rep.remaining == 9 and rep.op == 9
            with pytest.raises(RuntimeError):
                await r.settle(1)
            assert (await c.adjust("fw", "settle-async", 20)).remaining == 0
            with pytest.raises(Limited):
                await c.reserve("fw", "settle-async", 1)

    asyncio.run(run())
