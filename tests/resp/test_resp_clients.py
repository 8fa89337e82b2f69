"""The RESP front (docs/RESP.md) with real clients against a real cluster (two nodes, two
routers): redis-cli (Debian's redis-tools), Python's redis (python3-redis) and Node's ioredis
(npm ci from tests/resp/node/package-lock.json), each pipelining; redis-cell's documented
examples and test expectations, reproduced exactly (its README, its e2e test, and its unit
test's 15 cases on the nodes' test clock); one count across two routers; the failure policy;
AUTH; and malformed RESP refused without disturbing another client."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import redis

from conftest import BUILD, HERE, RespCluster
import harness


def key(prefix: str = "k") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def cli(port: int, *args: str, extra=()) -> str:
    out = subprocess.run(["redis-cli", "-p", str(port), *extra, *args], capture_output=True,
                         text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    return out.stdout


def raw(port: int, data: bytes, want_close: bool = True, timeout: float = 3.0) -> bytes:
    """Sends data on a fresh connection; returns what comes back until the server closes
    (or timeout, when want_close is False)."""
    with socket.create_connection(("127.0.0.1", port), 2) as s:
        s.sendall(data)
        s.settimeout(timeout)
        got = b""
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    return got
                got += b
        except socket.timeout:
            assert not want_close, f"the server did not close; got {got[:200]!r}"
            return got


# ---- redis-cell's own examples -----------------------------------------------------------


def test_readme_example_redis_cli(cluster):
    """redis-cell's README: CL.THROTTLE user123 15 30 60 -> 0 16 15 -1 2."""
    k = key("user123")
    assert cli(cluster.resp_ports[0], "CL.THROTTLE", k, "15", "30", "60").split() == \
        ["0", "16", "15", "-1", "2"]


def test_e2e_example(cluster):
    """redis-cell's tests/e2e.rs: burst 0, 1 per 2 s: allowed, limited with retry 2, and
    allowed again after sleeping the retry."""
    r = redis.Redis(port=cluster.resp_ports[0])
    k = key("user123")
    assert r.execute_command("CL.THROTTLE", k, 0, 1, 2, 1) == [0, 1, 0, -1, 2]
    rep = r.execute_command("CL.THROTTLE", k, 0, 1, 2, 1)
    assert rep == [1, 1, 0, 2, 2]
    time.sleep(rep[3])
    assert r.execute_command("CL.THROTTLE", k, 0, 1, 2, 1) == [0, 1, 0, -1, 2]


def test_errors_are_redis_cells(cluster):
    r = redis.Redis(port=cluster.resp_ports[0])
    cases = [
        (("CL.THROTTLE", "k"), "Cell error: Store error: Usage: cl.throttle <key> <max_burst> "
                               "<count per period> <period> [<quantity>]"),
        (("CL.THROTTLE", "k", "1", "2", "3", "4", "5"),
         "Cell error: Store error: Usage: cl.throttle <key> <max_burst> <count per period> "
         "<period> [<quantity>]"),
        (("CL.THROTTLE", "k", "x", "2", "3"), "Cell error: Store error: Couldn't parse as integer: x"),
        (("CL.THROTTLE", "k", "1", "2", "3", "1.5"),
         "Cell error: Store error: Couldn't parse as integer: 1.5"),
        # past i64 (Rust's parse): 2^63, and 2^64, which would wrap an unchecked u64
        (("CL.THROTTLE", "k", "9223372036854775808", "2", "3"),
         "Cell error: Store error: Couldn't parse as integer: 9223372036854775808"),
        (("CL.THROTTLE", "k", "1", "18446744073709551617", "3"),
         "Cell error: Store error: Couldn't parse as integer: 18446744073709551617"),
        (("CL.THROTTLE", "k", "1", "0", "3"), "Cell error: Store error: Zero rates are not supported"),
        (("CL.THROTTLE", "k", "1", "2", "0"), "Cell error: Store error: Zero rates are not supported"),
    ]
    for args, msg in cases:
        with pytest.raises(redis.ResponseError) as e:
            r.execute_command(*args)
        assert str(e.value) == msg, args
    # an empty key and one past 256 bytes count like any other (as a hash of the key)
    # (two keys that differ only past byte 223 are two counts)
    long_key = "x" * 300 + key()
    for k in ("", long_key, long_key + "y"):
        assert r.execute_command("CL.THROTTLE", k, 1, 1, 60) == [0, 2, 1, -1, 60]
        assert r.execute_command("CL.THROTTLE", k, 1, 1, 60) == [0, 2, 0, -1, 120]
    # Rust's integers take a '+' and leading zeros
    k = key()
    assert r.execute_command("CL.THROTTLE", k, "+15", "030", "60", "+1") == [0, 16, 15, -1, 2]
    # what a CHECK's inline limit cannot say is refused, not guessed
    with pytest.raises(redis.ResponseError, match="period must be 1..4294967 seconds"):
        r.execute_command("CL.THROTTLE", k, 1, 1, 5000000)
    with pytest.raises(redis.ResponseError, match="max_burst must be 0.."):
        r.execute_command("CL.THROTTLE", k, -1, 1, 60)


def test_cell_unit_cases_on_the_test_clock(tmp_path):
    """redis-cell's src/cell/mod.rs it_rate_limits: limit 5 (max_burst 4), 1 per second,
    fifteen requests at fixed times; every field as CL.THROTTLE rounds it."""
    c = RespCluster(tmp_path, nodes=("a",), routers=1, test_clock=True).start()
    try:
        r = redis.Redis(port=c.resp_ports[0])
        start = 1_700_000_000_000
        k = key("foo")
        # (case, ms after start, quantity, expected [limited, limit, remaining, retry, reset])
        cases = [
            (0, 0, 6, [1, 5, 5, -1, 0]),
            (1, 0, 1, [0, 5, 4, -1, 1]),
            (2, 0, 1, [0, 5, 3, -1, 2]),
            (3, 0, 1, [0, 5, 2, -1, 3]),
            (4, 0, 1, [0, 5, 1, -1, 4]),
            (5, 0, 1, [0, 5, 0, -1, 5]),
            (6, 0, 1, [1, 5, 0, 1, 5]),
            (7, 3000, 1, [0, 5, 2, -1, 3]),
            (8, 3100, 1, [0, 5, 1, -1, 4]),  # reset 3.9 s, rounded up
            (9, 4000, 1, [0, 5, 1, -1, 4]),
            (10, 8000, 1, [0, 5, 4, -1, 1]),
            (11, 9500, 1, [0, 5, 4, -1, 1]),
            (12, 9500, 0, [0, 5, 4, -1, 1]),  # quantity 0 peeks
            (13, 9500, 2, [0, 5, 2, -1, 3]),
            (14, 9500, 5, [1, 5, 2, 3, 3]),
        ]
        for n, at, qty, want in cases:
            c.set_clock(start + at)
            assert r.execute_command("CL.THROTTLE", k, 4, 1, 1, qty) == want, f"case {n}"
    finally:
        c.stop()


# ---- the clients, pipelining ----------------------------------------------------------------


def expected_run(n: int):
    """n CL.THROTTLE k 9 1 3600 in a row, within a second: 10 allowed, then limited."""
    out = []
    for i in range(n):
        if i < 10:
            out.append([0, 10, 9 - i, -1, 3600 * (i + 1)])
        else:
            out.append([1, 10, 0, 3600, 36000])
    return out


def test_redis_py_pipeline(cluster):
    r = redis.Redis(port=cluster.resp_ports[0])
    k = key()
    p = r.pipeline(transaction=False)
    for _ in range(15):
        p.execute_command("CL.THROTTLE", k, 9, 1, 3600)
    p.execute_command("RL.CHECK", "api", k)
    p.execute_command("PING")
    p.execute_command("ECHO", "a\r\nb")
    got = p.execute()
    assert got[:15] == expected_run(15)
    chk = dict(zip(got[15][::2], got[15][1::2]))
    assert chk[b"code"] == 0 and chk[b"status"] == b"allowed" and chk[b"limit"] == 3
    assert chk[b"remaining"] == 2 and chk[b"retry_after_ms"] == 0 and chk[b"reset_ms"] > 0
    assert got[16] is True and got[17] == b"a\r\nb"


def test_redis_cli_pipe(cluster):
    """redis-cli reading commands from stdin sends them all before reading (a pipeline)."""
    k = key()
    cmds = "".join(f"CL.THROTTLE {k} 9 1 3600\n" for _ in range(12))
    out = subprocess.run(["redis-cli", "-p", str(cluster.resp_ports[0])], input=cmds,
                         capture_output=True, text=True, timeout=10)
    nums = [int(x) for x in out.stdout.split()]
    assert [nums[i:i + 5] for i in range(0, len(nums), 5)] == expected_run(12)
    # RESP3 through redis-cli -3: RL.CHECK is a map
    out = cli(cluster.resp_ports[0], "RL.CHECK", "api", key(), "COST", "2", extra=("-3",))
    lines = out.splitlines()
    assert lines[:5] == ["code 0", "status allowed", "limit 3", "remaining 1", "reset_ms 720000"] \
        or lines[4].startswith("reset_ms 7199"), out
    assert lines[5] == "retry_after_ms 0", out


def test_ioredis_pipeline(cluster, node_modules):
    k = key()
    u = key("u")
    out = subprocess.run(["node", str(HERE / "node" / "ioredis_client.js"),
                          str(cluster.resp_ports[1]), k, "13", "api", u, "nosuch", u],
                         capture_output=True, text=True, timeout=60,
                         env={"NODE_PATH": str(node_modules), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    reps = doc["replies"]
    assert reps[:13] == expected_run(13)
    assert reps[13][:4] == ["code", 0, "status", "allowed"]
    assert reps[14][:4] == ["code", 4, "status", "no_rule"]
    assert reps[15] == {"error": "Cell error: Store error: Couldn't parse as integer: x"}
    assert reps[16] == "PONG"
    assert doc["info_has_version"] is True


def test_one_count_across_two_routers(cluster):
    a = redis.Redis(port=cluster.resp_ports[0])
    b = redis.Redis(port=cluster.resp_ports[1])
    want = expected_run(14)
    for i in range(14):
        r = a if i % 2 == 0 else b
        assert r.execute_command("CL.THROTTLE", "shared-" + cluster.dir.name, 9, 1, 3600) == want[i]
    # RL.CHECK too: burst 3 of [service api], from either router
    u = key()
    got = [(a if i % 2 else b).execute_command("RL.CHECK", "api", u)[7] for i in range(5)]
    assert got == [2, 1, 0, 0, 0]


def test_rl_check_fields_and_mcheck(cluster):
    r = redis.Redis(port=cluster.resp_ports[0])
    u = key()
    first = r.execute_command("RL.CHECK", "api", u, "COST", "3")
    d = dict(zip(first[::2], first[1::2]))
    assert d[b"code"] == 0 and d[b"remaining"] == 0 and d[b"limit"] == 3
    assert 1_080_000 - 2000 <= d[b"reset_ms"] <= 1_080_000  # 3 tokens at 10 per hour
    refused = dict(zip(*[iter(r.execute_command("RL.CHECK", "api", u))] * 2))
    assert refused[b"code"] == 1 and refused[b"status"] == b"limited"
    assert 360_000 - 2000 <= refused[b"retry_after_ms"] <= 360_000
    multi = r.execute_command("RL.MCHECK", "api", key(), "", "1", "nosuch", "x", "", "1",
                              "shut", key(), "", "1")
    codes = [dict(zip(m[::2], m[1::2]))[b"code"] for m in multi]
    assert codes == [0, 4, 0]
    with pytest.raises(redis.ResponseError, match="wrong number of arguments for 'rl.check'"):
        r.execute_command("RL.CHECK", "api")


def fields(reply) -> dict:
    """RL.CHECK's flat RESP2 array as a dict of str to value."""
    return {k.decode(): v for k, v in zip(reply[::2], reply[1::2])}


def test_rl_adjust_and_release_across_two_routers(cluster):
    """RL.ADJUST settles a reservation and RL.RELEASE gives a concurrency slot back, each
    through the other router than the CHECKs (no [client] sections: everyone may refund),
    answered as RL.CHECK is."""
    a = redis.Redis(port=cluster.resp_ports[0])
    b = redis.Redis(port=cluster.resp_ports[1])
    u = key()
    assert fields(a.execute_command("RL.CHECK", "fw", u, "COST", "4"))["remaining"] == 1
    d = fields(b.execute_command("RL.ADJUST", "fw", u, "-3"))
    assert d["code"] == 0 and d["status"] == b"allowed" and d["limit"] == 5
    assert d["remaining"] == 4
    assert fields(b.execute_command("RL.ADJUST", "fw", u, "10", ""))["remaining"] == 0  # debt
    assert fields(a.execute_command("RL.CHECK", "fw", u))["code"] == 1
    assert fields(a.execute_command("RL.ADJUST", "nosuch", u, "1"))["code"] == 4
    for bad in ("x", "1000001", "-1000001"):
        with pytest.raises(redis.ResponseError, match="DELTA must be an integer"):
            a.execute_command("RL.ADJUST", "fw", u, bad)
    # two slots of two, taken through both routers; the third refused; one given back
    assert fields(a.execute_command("RL.CHECK", "cc", u))["remaining"] == 1
    assert fields(b.execute_command("RL.CHECK", "cc", u))["remaining"] == 0
    assert fields(a.execute_command("RL.CHECK", "cc", u))["code"] == 1
    d = fields(b.execute_command("RL.RELEASE", "cc", u))
    assert d["code"] == 0 and d["limit"] == 2 and d["remaining"] == 1
    assert fields(a.execute_command("RL.CHECK", "cc", u))["code"] == 0
    assert fields(a.execute_command("RL.RELEASE", "cc", u, "2", ""))["remaining"] == 2
    with pytest.raises(redis.ResponseError, match="COUNT must be an integer of 1..1000000"):
        a.execute_command("RL.RELEASE", "cc", u, "0")
    with pytest.raises(redis.ResponseError, match="wrong number of arguments for 'rl.adjust'"):
        a.execute_command("RL.ADJUST", "fw", u)


def router_stats(port: int) -> dict:
    """A router's STATS over the binary protocol ([3, id] -> [3, id, {key: value}])."""
    import struct

    import msgpack

    with socket.create_connection(("127.0.0.1", port), 5) as s:
        body = msgpack.packb([3, 1])
        s.sendall(struct.pack(">I", len(body)) + body)
        (n,) = struct.unpack(">I", s.recv(4, socket.MSG_WAITALL))
        rep = msgpack.unpackb(s.recv(n, socket.MSG_WAITALL), raw=False)
    return next(x for x in rep if isinstance(x, dict))


def test_rl_check_held_refusal_outlives_its_node(tmp_path):
    """RL.CHECK consults the router's deny cache as a binary CHECK does: a user a node refused
    is answered LIMITED from it, and still is once its node is gone, where the backstop
    (failure = open) judged it again before (20 allowances during a loss in the attack round
    of 2026-11-30's twentieth session)."""
    c = RespCluster(tmp_path, nodes=("a",), routers=1,
                    extra="\n[clients]\nadjust = no\n").start()
    try:
        r = redis.Redis(port=c.resp_ports[0], socket_timeout=5)
        u = key()
        assert fields(r.execute_command("RL.CHECK", "api", u, "COST", "3"))["code"] == 0
        hits = 0
        for _ in range(200):  # until a refusal decided under confirmed rules is held
            assert fields(r.execute_command("RL.CHECK", "api", u))["code"] == 1
            hits = router_stats(c.ports[0]).get("deny_hits", 0)
            if hits > 0:
                break
            time.sleep(0.05)
        assert hits > 0, "RL.CHECK never answered from the deny cache"
        c.kill_node("a")
        codes = [fields(r.execute_command("RL.CHECK", "api", u))["code"] for _ in range(20)]
        assert codes == [1] * 20, codes  # never FAIL_OPEN (2) by the backstop
    finally:
        c.stop()


def test_rl_adjust_refund_needs_adjust_and_policy(tmp_path):
    """[clients] adjust = no: a refund is refused NOPERM, a charge and a RELEASE are not;
    with the owner down, both answer the rule's failure policy (no backstop)."""
    c = RespCluster(tmp_path, nodes=("a",), routers=1,
                    extra="\n[clients]\nadjust = no\n").start()
    try:
        r = redis.Redis(port=c.resp_ports[0], socket_timeout=5)
        u = key()
        with pytest.raises(redis.exceptions.NoPermissionError, match="does not allow refunds"):
            r.execute_command("RL.ADJUST", "fw", u, "-1")
        assert fields(r.execute_command("RL.ADJUST", "fw", u, "2"))["remaining"] == 3
        assert fields(r.execute_command("RL.ADJUST", "fw", u, "0"))["remaining"] == 3
        assert fields(r.execute_command("RL.RELEASE", "cc", u))["code"] == 0
        c.kill_node("a")
        d = fields(r.execute_command("RL.ADJUST", "shut", u, "1"))
        assert d["code"] == 3 and d["status"] == b"fail_closed"
        d = fields(r.execute_command("RL.RELEASE", "cc", u))  # failure = open: no backstop
        assert d["code"] == 2 and d["status"] == b"fail_open"
    finally:
        c.stop()


def test_connection_commands(cluster):
    r = redis.Redis(port=cluster.resp_ports[0], client_name="tester", db=0)
    assert r.ping() is True
    assert r.client_getname() == "tester" or r.client_getname() == b"tester"
    assert r.execute_command("SELECT", 0) in (b"OK", True, "OK")
    with pytest.raises(redis.ResponseError, match="DB index is out of range"):
        r.execute_command("SELECT", 1)
    with pytest.raises(redis.ResponseError) as e:
        r.execute_command("GET", "x")
    assert str(e.value) == "unknown command 'GET', with args beginning with: 'x' "
    assert r.info()["redis_version"] == "7.0.0"
    assert r.command_count() >= 10
    # HELLO 3: the map, then RESP3 replies (a map for RL.CHECK, _ for a nil)
    got = raw(cluster.resp_ports[0], b"HELLO 3\r\nRL.CHECK api " + key().encode() +
              b"\r\nCLIENT GETNAME\r\nQUIT\r\n")
    assert got.startswith(b"%7\r\n$6\r\nserver\r\n$11\r\nratelimiter\r\n")
    assert b"%6\r\n$4\r\ncode\r\n:0\r\n$6\r\nstatus\r\n$7\r\nallowed\r\n" in got
    assert got.endswith(b"_\r\n+OK\r\n")
    # a command read before HELLO 3 in the same pipeline is answered in RESP2, as Redis
    # does (the attack round of 2026-11-30: its answer, rendered when the node answered,
    # came in RESP3)
    got = raw(cluster.resp_ports[0], b"RL.CHECK api " + key().encode() +
              b"\r\nHELLO 3\r\nRL.CHECK api " + key().encode() + b"\r\nQUIT\r\n")
    assert got.startswith(b"*12\r\n$4\r\ncode\r\n:0\r\n"), got[:80]
    assert b"%6\r\n$4\r\ncode\r\n:0\r\n" in got, got
    assert raw(cluster.resp_ports[0], b"HELLO 4\r\n", want_close=False, timeout=0.5) == \
        b"-NOPROTO unsupported protocol version\r\n"
    # a known subcommand with the wrong count of arguments: Redis's arity error
    got = raw(cluster.resp_ports[0], b"CLIENT GETNAME x\r\nCLIENT ID 1\r\nQUIT\r\n")
    assert got == (b"-ERR wrong number of arguments for 'client|getname' command\r\n"
                   b"-ERR wrong number of arguments for 'client|id' command\r\n+OK\r\n")


def test_client_ids_are_unique_across_workers(cluster):
    """CLIENT ID, as Redis's: never the same for two connections of one server (each of the
    router's two workers counted its own, so two connections at once got the same id)."""
    conns = [redis.Redis(port=cluster.resp_ports[0]) for _ in range(8)]
    ids = [c.client_id() for c in conns]
    assert len(set(ids)) == len(ids), ids
    for c in conns:
        c.close()


# ---- failure policy, AUTH, hostile input --------------------------------------------------


def test_unreachable_owner_answers_by_policy(tmp_path):
    c = RespCluster(tmp_path, nodes=("a",), routers=1).start()
    try:
        r = redis.Redis(port=c.resp_ports[0], socket_timeout=5)
        k = key()
        assert r.execute_command("CL.THROTTLE", k, 9, 1, 3600)[0] == 0
        c.kill_node("a")
        t0 = time.monotonic()
        # [cluster] inline_failure = open (the default): allowed, nothing known
        assert r.execute_command("CL.THROTTLE", k, 9, 1, 3600) == [0, 10, 0, -1, 0]
        # a configured service answers by its own policy: shut is failure = closed
        d = dict(zip(*[iter(r.execute_command("RL.CHECK", "shut", k))] * 2))
        assert d[b"code"] == 3 and d[b"status"] == b"fail_closed"
        assert time.monotonic() - t0 < 2.0
    finally:
        c.stop()


def test_inline_failure_closed(tmp_path):
    c = RespCluster(tmp_path, nodes=("a",), routers=1,
                    extra="inline_failure = closed\n").start()
    try:
        r = redis.Redis(port=c.resp_ports[0], socket_timeout=5)
        c.kill_node("a")
        assert r.execute_command("CL.THROTTLE", key(), 9, 1, 3600) == [1, 10, 0, 2, 0]
    finally:
        c.stop()


def test_auth(tmp_path):
    token = "s3cret-token-for-resp"
    import hashlib

    sha = hashlib.sha256(token.encode()).hexdigest()
    cl = RespCluster(tmp_path, nodes=("a",), routers=1,
                     extra="\n[clients]\nauth_timeout = 1s\n")
    for conf in cl.confs:
        conf.write_text(conf.read_text() + f"\n[client web]\ntoken_sha256 = {sha}\n"
                        "services = *\n")
    # the nodes and routers start, the readiness probe needs AUTH: wait by hand
    harness.need_binaries("rl-node", "rl-router")
    for n in cl.node_ports:
        cl.start_node(n)
    log = cl.dir / "router0.log"
    p = harness.spawn([str(harness.BUILD / "rl-router"), "--config", str(cl.confs[0])], log)
    cl.routers.append(p)
    try:
        harness.wait_port(cl.resp_ports[0], p, log)
        port = cl.resp_ports[0]
        anon = redis.Redis(port=port)
        with pytest.raises(redis.AuthenticationError):
            anon.execute_command("CL.THROTTLE", "k", 1, 1, 1)
        with pytest.raises((redis.AuthenticationError, redis.ResponseError), match="WRONGPASS"):
            redis.Redis(port=port, password="wrong").ping()
        good = redis.Redis(port=port, password=token)
        assert good.ping() is True
        deadline = time.monotonic() + 10
        while good.execute_command("CL.THROTTLE", "auth-k", 9, 1, 3600)[2] == 0:
            assert time.monotonic() < deadline  # until the router reaches the node
            time.sleep(0.05)
        assert redis.Redis(port=port, username="anyone", password=token).ping() is True
        # [clients] auth_timeout: a connection that never AUTHs is closed
        t0 = time.monotonic()
        assert raw(port, b"", timeout=5) == b""
        assert 0.9 < time.monotonic() - t0 < 3.5
        got = raw(port, b"PING\r\nAUTH nope\r\nAUTH nope\r\nAUTH nope\r\nPING\r\n")
        assert got == (b"-NOAUTH Authentication required.\r\n" +
                       b"-WRONGPASS invalid username-password pair or user is disabled.\r\n" * 3)
    finally:
        cl.stop()


def test_malformed_resp_is_refused_alone(cluster):
    """Bad lengths, a huge bulk string, an unterminated inline command: each gets Redis's
    protocol error and its connection closes; a client pipelining meanwhile is unaffected."""
    port = cluster.resp_ports[0]
    good = redis.Redis(port=port)
    k = key()
    p = good.pipeline(transaction=False)
    for _ in range(5):
        p.execute_command("CL.THROTTLE", k, 9, 1, 3600)
    assert p.execute() == expected_run(5)
    bad = [
        (b"*2\r\n$abc\r\nxx\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
        (b"*x\r\n", b"-ERR Protocol error: invalid multibulk length\r\n"),
        (b"*99999999\r\n", b"-ERR Protocol error: invalid multibulk length\r\n"),
        (b"*1\r\n$999999999\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
        (b"*1\r\n:5\r\n", b"-ERR Protocol error: expected '$', got ':'\r\n"),
        (b"ECHO \"abc\r\n", b"-ERR Protocol error: unbalanced quotes in request\r\n"),
        (b"PING\r\n*1\r\n$4\r\nPINGxx", b"+PONG\r\n-ERR Protocol error: bulk string not "
                                         b"terminated by CRLF\r\n"),
        (b"A" * 70000, b"-ERR Protocol error: too big inline request\r\n"),
    ]
    for data, want in bad:
        assert raw(port, data) == want, data[:40]
    # a bulk string announced at the bound and never sent: the frame timeout closes it,
    # and meanwhile the good client is answered
    with socket.create_connection(("127.0.0.1", port), 2) as s:
        s.sendall(b"*2\r\n$5\r\nPING\r\n$65536\r\n" + b"x" * 1000)
        p = good.pipeline(transaction=False)
        for _ in range(5):
            p.execute_command("CL.THROTTLE", k, 9, 1, 3600)
        assert p.execute() == expected_run(10)[5:]
    assert good.ping() is True


def test_deep_pipelines(tmp_path):
    """More commands in flight than a connection's ring holds (1,024): the router stops
    reading until answers free slots, and answers all in order; redis-cli --pipe (raw RESP
    on stdin) too. The nodes' test clock stays put, so every reply is exact however long the
    machine takes (how long is bench/resp_bench.sh's "pipe" figure)."""
    c = RespCluster(tmp_path, routers=1, test_clock=True).start()
    try:
        c.set_clock(1_700_000_000_000)
        r = redis.Redis(port=c.resp_ports[0])
        k = key()
        p = r.pipeline(transaction=False)
        for _ in range(3000):
            p.execute_command("CL.THROTTLE", k, 9, 1, 3600)
        assert p.execute() == expected_run(3000)
        k2 = key()
        cmd = (f"*5\r\n$11\r\nCL.THROTTLE\r\n${len(k2)}\r\n{k2}\r\n$1\r\n9\r\n$1\r\n1\r\n"
               f"$4\r\n3600\r\n")
        # 100,000 commands (6 MB) written as fast as redis-cli can: the router stops reading
        # while 1,024 wait for their answers, rather than holding the rest
        out = subprocess.run(["redis-cli", "-p", str(c.resp_ports[0]), "--pipe"],
                             input=cmd * 100000, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "errors: 0, replies: 100000" in out.stdout, out.stdout
        assert r.execute_command("CL.THROTTLE", k2, 9, 1, 3600) == [1, 10, 0, 3600, 36000]
    finally:
        c.stop()


def test_a_client_that_never_reads_is_bounded(cluster):
    """A client pipelining without reading its replies: the router stops reading it once its
    output backs up, so its memory stays bounded, and the others are served meanwhile."""
    port = cluster.resp_ports[0]
    pid = cluster.routers[0].pid

    def rss_kb() -> int:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    before = rss_kb()
    s = socket.create_connection(("127.0.0.1", port), 2)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.setblocking(False)
    chunk = b"ECHO " + b"x" * 1000 + b"\r\n"
    chunk *= 64
    sent, deadline = 0, time.monotonic() + 3
    while time.monotonic() < deadline:
        try:
            sent += s.send(chunk)
        except BlockingIOError:
            time.sleep(0.01)
    good = redis.Redis(port=port)
    assert good.ping() is True
    assert good.execute_command("CL.THROTTLE", key(), 9, 1, 3600)[0] == 0
    grown = rss_kb() - before
    s.close()
    # what it sent is far more than the router holds for it (input and output bounds)
    assert sent > 4 * 1024 * 1024, sent
    print(f"sent {sent} bytes, router grew {grown} KiB")
    assert grown < 16 * 1024, f"router grew {grown} KiB for one client"


def test_frame_timeout_closes_an_incomplete_command(tmp_path):
    c = RespCluster(tmp_path, nodes=("a",), routers=1,
                    extra="\n[clients]\nframe_timeout = 1s\n").start()
    try:
        # a command announced and not sent closes its connection after frame_timeout (1 s,
        # checked every second); a command completed in time does not
        with socket.create_connection(("127.0.0.1", c.resp_ports[0]), 2) as s:
            s.sendall(b"*2\r\n$4\r\nECHO\r\n$3\r\nab")
            time.sleep(0.3)
            s.sendall(b"c\r\n*2\r\n$4\r\nECHO\r\n$100\r\nabc")
            s.settimeout(10)
            t0 = time.monotonic()
            got = b""
            while True:
                b = s.recv(100)
                if not b:
                    break
                got += b
            assert got == b"$3\r\nabc\r\n"
            assert 0.5 < time.monotonic() - t0 < 3.5
        assert redis.Redis(port=c.resp_ports[0]).ping() is True
    finally:
        c.stop()


def test_metrics_count_the_front(tmp_path):
    c = RespCluster(tmp_path, nodes=("a",), routers=1,
                    router_extra=f"metrics = 127.0.0.1:{harness.free_port()}\n").start()
    try:
        mport = int(c.confs[0].read_text().split("metrics = 127.0.0.1:")[1].split()[0])
        r = redis.Redis(port=c.resp_ports[0])
        r.execute_command("CL.THROTTLE", key(), 9, 1, 3600)
        with pytest.raises(redis.ResponseError):
            r.execute_command("NOPE")
        raw(c.resp_ports[0], b"*x\r\n")

        def scrape() -> str:
            with socket.create_connection(("127.0.0.1", mport), 2) as s:
                s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
                page = b""
                while True:
                    b = s.recv(65536)
                    if not b:
                        return page.decode()
                    page += b

        deadline = time.monotonic() + 5
        text = scrape()
        while "rl_router_resp_connections 1\n" not in text and time.monotonic() < deadline:
            time.sleep(0.05)  # the refused connection's close is seen by the router
            text = scrape()
        counts = {ln.split('"')[1]: int(ln.split()[-1]) for ln in text.splitlines()
                  if ln.startswith("rl_router_resp_total{")}
        assert counts["cl_throttle"] == 1 and counts["error_replies"] >= 1
        assert counts["protocol_errors"] == 1 and counts["commands"] >= 2 + 16  # + readiness
        assert "rl_router_resp_connections 1\n" in text, [
            ln for ln in text.splitlines() if "resp_conn" in ln]
    finally:
        c.stop()


def test_non_loopback_without_tokens_is_refused(tmp_path):
    """Nothing would authenticate RESP clients: rl-router refuses a non-loopback resp
    address without [client] sections (exit 2) unless [cluster] insecure = yes."""
    harness.need_binaries("rl-router")
    port, rport = harness.free_port(), harness.free_port()
    conf = tmp_path / "c.conf"
    conf.write_text(f"[router]\nlisten = 127.0.0.1:{port}\nresp = 0.0.0.0:{rport}\n"
                    f"[node a]\nlisten = 127.0.0.1:{harness.free_port()}\n")
    out = subprocess.run([str(harness.BUILD / "rl-router"), "--config", str(conf)],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2, out.stderr
    assert "[router] resp 0.0.0.0 is not a loopback address" in out.stderr


def test_client_names_are_checked_alike(cluster):
    """HELLO's SETNAME takes the names CLIENT SETNAME takes, and refuses the same ones."""
    port = cluster.resp_ports[0]
    bad = b"a b\r\nc"
    refusal = b"-ERR Client names cannot contain spaces, newlines or special characters.\r\n"

    def bulk(*args: bytes) -> bytes:
        return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)

    got = raw(port, bulk(b"HELLO", b"3", b"SETNAME", bad) + bulk(b"CLIENT", b"GETNAME") +
              bulk(b"QUIT"))
    assert got == refusal + b"$-1\r\n+OK\r\n"  # refused: neither the name nor RESP3 taken
    got = raw(port, bulk(b"CLIENT", b"SETNAME", bad) + bulk(b"CLIENT", b"GETNAME") +
              bulk(b"QUIT"))
    assert got == refusal + b"$-1\r\n+OK\r\n"
    got = raw(port, bulk(b"HELLO", b"2", b"SETNAME", b"ok-name") + bulk(b"CLIENT", b"GETNAME") +
              bulk(b"QUIT"))
    assert got.endswith(b"$7\r\nok-name\r\n+OK\r\n")


def test_arity_is_the_command_tables(cluster):
    """COMMAND's arity of each command is what the dispatch enforces: one argument short of
    it (or one past an exact arity) is refused before the command runs."""
    r = redis.Redis(port=cluster.resp_ports[0])
    rows = r.execute_command("COMMAND")  # redis-py: {name: {"arity": n, ...}}
    assert len(rows) == r.command_count() >= 12
    seen = set()
    for name, row in rows.items():
        name = name.decode() if isinstance(name, bytes) else name
        arity = int(row["arity"])
        seen.add(name)
        need = abs(arity)
        if need >= 2:
            with pytest.raises(redis.ResponseError,
                               match="wrong number of arguments|Usage"):
                r.execute_command(name, *(["1"] * (need - 2)))
        if arity > 0:
            with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
                r.execute_command(name, *(["1"] * arity))
    assert {"cl.throttle", "rl.check", "rl.mcheck", "rl.adjust", "rl.release", "auth", "hello",
            "ping"} <= seen
    # and each is documented (docs/RESP.md names every command the table serves)
    doc = (HERE.parents[1] / "docs" / "RESP.md").read_text()
    assert [n for n in sorted(seen) if f"`{n.upper()}" not in doc and
            f"### {n.upper()}" not in doc] == []


def test_closed_connections_give_their_input_budget_back(tmp_path):
    """Connections that send big commands in pieces and leave give back every byte they
    held: with a worker's share of buffer_memory at 1 MB, forty of them (each holding up to
    256 KB while its command arrives) leave room for a 60 KB command afterwards. Before, a
    growth was counted twice and never given back, and the share ran out for good."""
    c = RespCluster(tmp_path, nodes=("a",), routers=1,
                    extra="\n[clients]\nbuffer_memory = 2mb\n").start()
    try:
        port = c.resp_ports[0]
        arg = b"x" * 60000
        big = b"*5\r\n$4\r\nECHO\r\n" + (b"$60000\r\n" + arg + b"\r\n") * 4  # ~240 KB
        for _ in range(40):
            with socket.create_connection(("127.0.0.1", port), 2) as s:
                for i in range(0, len(big), 65536):
                    s.sendall(big[i:i + 65536])
                    time.sleep(0.002)
                s.settimeout(5)
                got = s.recv(200)
                assert got.startswith(b"-ERR wrong number of arguments for 'echo'"), got
        for _ in range(4):  # on either worker
            r = redis.Redis(port=port, socket_timeout=5)
            assert r.echo(arg) == arg
            r.close()
    finally:
        c.stop()


def test_pipelined_mchecks_count_in_buffer_memory(tmp_path):
    """What a pipeline holds in the router counts in buffer_memory, not only its input: a
    client that pipelines 400 RL.MCHECKs of 64 keys (25,600 CHECKs held in flight by a paused
    node, 1.6 MB of parts) and never reads holds the most of its worker's 1 MB share, so a
    newcomer on that worker closes it to make room (as for input bytes). Before, the parts and
    the ring (140 KB a connection) counted nowhere: 1,000 such clients took 350 MB past the
    buffer_memory they were given."""
    import os
    import signal

    c = RespCluster(tmp_path, nodes=("a",), routers=1, deadline="20s",
                    extra="\n[clients]\nbuffer_memory = 2mb\nidle_timeout = 1h\n").start()
    try:
        port = c.resp_ports[0]
        node = c.nodes["a"]
        os.kill(node.pid, signal.SIGSTOP)
        keys = []
        for j in range(64):
            keys += ["api", f"k{j}", "", "1"]
        one = b"*%d\r\n" % (1 + len(keys)) + b"$9\r\nRL.MCHECK\r\n" + b"".join(
            b"$%d\r\n%s\r\n" % (len(k), k.encode()) for k in keys)
        hogs = []
        for _ in range(2):  # one on each worker
            h = socket.socket()
            h.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            h.connect(("127.0.0.1", port))
            h.settimeout(10)
            h.sendall(one * 400)
            hogs.append(h)
        time.sleep(1.0)  # read, and sent to the paused node as far as each may hold
        for _ in range(6):  # on either worker: each one's newcomer needs room
            r = redis.Redis(port=port, socket_timeout=5)
            assert r.ping() is True
            r.close()
        closed = 0
        for h in hogs:
            try:
                while h.recv(65536):
                    pass
                closed += 1
            except ConnectionResetError:
                closed += 1
            except socket.timeout:
                pass
            h.close()
        assert closed >= 1
    finally:
        try:
            os.kill(c.nodes["a"].pid, signal.SIGCONT)
        except (ProcessLookupError, KeyError):
            pass
        c.stop()


def test_sigterm_answers_what_the_router_holds(tmp_path):
    """A clean stop (SIGTERM) drains: 1,100 RL.CHECKs and an INFO pipelined on one connection
    while the node is paused (1,024 are held at the node, the rest wait in the router) are
    all answered, by the node or the failure policy at the deadline, before the connection
    closes; the router exits 0 with no sanitizer report. With two workers, the INFO read
    during the drain sums every worker's counters: a worker that had drained freed its router
    while another still read it (use after free, caught by ASan)."""
    import os
    import signal
    import threading

    c = RespCluster(tmp_path, nodes=("a",), routers=1, deadline="3s").start()
    try:
        node = c.nodes["a"]
        r = redis.Redis(port=c.resp_ports[0], socket_timeout=20)
        r.execute_command("RL.CHECK", "api", "warm")
        os.kill(node.pid, signal.SIGSTOP)
        out: dict = {}

        def run() -> None:
            p = r.pipeline(transaction=False)
            for i in range(1100):
                p.execute_command("RL.CHECK", "api", f"held{i}")
            p.info()
            try:
                out["replies"] = p.execute()
            except Exception as e:  # noqa: BLE001 - the assertion below shows it
                out["error"] = e

        router = c.routers[0]
        # The router is stopped while the pipeline (~45 KB) is written, so that one read takes
        # it whole: the commands past the 1,024 in flight then wait in the router, read (a
        # router that read them in pieces would stop reading at the full ring, and the rest
        # would be requests it never read, which a drain does not answer).
        os.kill(router.pid, signal.SIGSTOP)
        t = threading.Thread(target=run)
        t.start()
        time.sleep(0.3)
        os.kill(router.pid, signal.SIGCONT)
        time.sleep(0.5)  # read, and the first 1,024 at the paused node (deadline 3 s)
        os.kill(router.pid, signal.SIGTERM)
        time.sleep(0.2)  # the other worker, idle, has drained
        os.kill(node.pid, signal.SIGCONT)  # answers come: the rest and the INFO are read
        t.join(30)
        assert "error" not in out, out.get("error")
        replies = out["replies"]
        assert len(replies) == 1101
        assert all(isinstance(x, list) for x in replies[:1100])
        assert replies[1100]["redis_version"] == "7.0.0"
        assert router.wait(10) == 0
        log = (c.dir / "router0.log").read_text(errors="replace")
        assert "Sanitizer" not in log and "runtime error" not in log, log[-3000:]
        c.routers[0] = None
    finally:
        c.stop()


def test_big_unfinished_commands_make_room_for_new_clients(tmp_path):
    """Connections that each hold ~260 KB of an unfinished command (4 arguments of 65,000
    bytes of 10 announced) fill the worker's share of buffer_memory (4 MB: 2 MB a worker):
    a new client's PING still gets its PONG, the connections holding the most closed to make
    room (STATS buffer_evictions), as Redis's maxmemory-clients does. Before, the new client
    was the one closed, for as long as the others held."""
    c = RespCluster(tmp_path, nodes=("a",), routers=1,
                    extra="\n[clients]\nbuffer_memory = 4mb\nframe_timeout = 60s\n").start()
    arg = b"$65000\r\n" + b"x" * 65000 + b"\r\n"
    partial = b"*10\r\n$10\r\nCL.THROTTL\r\n" + arg * 4
    socks = []
    try:
        for _ in range(24):
            s = socket.create_connection(("127.0.0.1", c.resp_ports[0]), 5)
            s.sendall(partial)
            socks.append(s)
        time.sleep(1.0)
        for _ in range(5):
            assert redis.Redis(port=c.resp_ports[0], socket_timeout=5).ping() is True
        closed = 0
        for s in socks:
            s.settimeout(0.2)
            try:
                closed += s.recv(100) == b""
            except socket.timeout:
                pass
            except OSError:
                closed += 1
        # 24 x 260 KB is 6 MB: at least a third of them had to go, and only they
        assert 8 <= closed < 24, closed
        stats = subprocess.run([str(BUILD / "rl-cli"), "--target", f"127.0.0.1:{c.ports[0]}",
                                "stats"], capture_output=True, text=True, timeout=10).stdout
        evictions = int(stats.split("buffer_evictions")[1].split()[0])
        assert evictions >= 8, stats
    finally:
        for s in socks:
            s.close()
        c.stop()


def test_hot_keys_count_resp_checks(cluster):
    """RL.CHECK and CL.THROTTLE are CHECKs like the binary protocol's: the router's hot keys
    (HOT, rl-cli hot) count them, so a user hammering the RESP front is listed (before, only
    binary CHECKs were counted and it never showed)."""
    r = redis.Redis(port=cluster.resp_ports[0])
    user = key("hot")
    pipe = r.pipeline(transaction=False)
    for _ in range(3000):
        pipe.execute_command("RL.CHECK", "fw", user)
    pipe.execute_command("CL.THROTTLE", user + "-cl", 9, 1, 3600)
    pipe.execute()
    deadline = time.monotonic() + 10
    while True:
        out = subprocess.run([str(BUILD / "rl-cli"), "--target",
                              f"127.0.0.1:{cluster.ports[0]}", "hot", "--top", "20"],
                             capture_output=True, text=True, timeout=10).stdout
        if user in out or time.monotonic() > deadline:
            break
        time.sleep(0.3)  # each worker publishes its counts at most once a second
    assert user in out, out
