"""The gRPC front's defences that front.c and rls_h2.c decide (docs/OPERATIONS.md, "Limits on
clients"; docs/ENVOY.md, "Bounds"), with real processes and sockets, and no [client]
sections (no token needed to attack):

- opening: a connection counts against the front's pre-AUTH share (half of max_connections)
  until its first valid call; when the share is full the worker's oldest opening connection
  makes room; one that has not made a valid call by auth_timeout is closed. Sockets that
  send nothing (or only the HTTP/2 preface) cannot keep a valid client out;
- the write-progress deadline: a client that sends calls and never reads is closed once its
  output has made no progress for frame_timeout (write_timeouts), whatever idle_timeout is;
- the per-turn input budget (throttled counts the turns a connection was made to wait);
- GOAWAY ENHANCE_YOUR_CALM for a connection that keeps breaking the header limit (an HPACK
  bomb) or floods control frames (WINDOW_UPDATE);
- with TLS, a half-sent handshake record closed at auth_timeout.

Each asserts what the router decided (counters in STATS, frames and EOF seen on the wire,
a call answered), never how long anything took: the waits below are only upper bounds."""

import socket
import struct
import threading
import time

import pytest

import harness
from rls_harness import make_stub, request, rls_cluster, router_log, start_rls

pytestmark = pytest.mark.integration

grpc = pytest.importorskip("grpc")
hpack = pytest.importorskip("hpack")
ratelimiter = pytest.importorskip("ratelimiter")

from h2raw import (DATA, END_HEADERS, END_STREAM, HEADERS, MSG, PREFACE,  # noqa: E402
                   SETTINGS, WINDOW_UPDATE, Raw, frame, grpc_body, plain_block, varint7)

MAX_CONNS = 8  # the gRPC front's cap; the pre-AUTH share is half: 4

CALM = 11  # ENHANCE_YOUR_CALM


def call_frames(sid):
    return frame(HEADERS, END_HEADERS, sid, plain_block()) + \
        frame(DATA, END_STREAM, sid, grpc_body(MSG))


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    d = tmp_path_factory.mktemp("frontopening")
    (d / "edge.yaml").write_text("domain: edge\ndescriptors:\n  - key: k\n    rate_limit:\n"
                                 "      unit: hour\n      requests_per_unit: 100000000\n")
    c = rls_cluster(d, "edge.yaml", deadline="2s", start=False, router="workers = 1\n",
                    extra=f"[clients]\nmax_connections = {MAX_CONNS}\nauth_timeout = 1s\n"
                          "frame_timeout = 2s\nidle_timeout = 1h\n")
    start_rls(c)
    yield c
    log = router_log(c)
    c.stop()
    assert "Sanitizer" not in log and "runtime error" not in log, log


def stats(c):
    with ratelimiter.Client("127.0.0.1", c.port, 5.0) as k:
        return k.stats()


def wait_stat(c, key, above, limit_s=20.0):
    """The STATS value of key once it passes above (or the last seen after limit_s)."""
    deadline = time.monotonic() + limit_s
    while True:
        v = stats(c).get(key, 0)
        if v > above or time.monotonic() > deadline:
            return v
        time.sleep(0.1)


def closed_by_router(s, limit_s=20.0):
    """True once the router closed s (EOF or reset), within limit_s at most."""
    s.settimeout(0.5)
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            if s.recv(65536) == b"":
                return True
        except socket.timeout:
            continue
        except OSError:
            return True
    return False


def call_ok(c, pb, ch=None):
    own = ch is None
    if own:
        ch, stub = make_stub(c.rls_port, pb)
    else:
        ch, stub = ch
    try:
        r = stub(request(pb, "edge", [("k", "probe")]), timeout=10)
        return r.overall_code == pb.RateLimitResponse.OK
    finally:
        if own:
            ch.close()


def test_silent_connections_cannot_keep_a_valid_call_out(cl, pb):
    """MAX_CONNS * 3 sockets that send nothing, or only the preface: at most half of
    max_connections stay open at once (the oldest opening one makes room for a newcomer),
    every one of them is closed by auth_timeout, and valid calls, on an old connection and
    on new ones, are answered meanwhile."""
    before = stats(cl)
    old = make_stub(cl.rls_port, pb)
    assert call_ok(cl, pb, old)  # authenticated: out of the pre-AUTH share for good
    silent = []
    try:
        for i in range(MAX_CONNS * 3):
            s = socket.create_connection(("127.0.0.1", cl.rls_port), 5)
            if i % 2:
                s.sendall(PREFACE + frame(SETTINGS, 0, 0))
            silent.append(s)
        time.sleep(0.2)
        assert call_ok(cl, pb)  # a new connection: it takes the place of an opening one
        assert call_ok(cl, pb, old)
        mid = stats(cl)
        # (a burst may also meet max_connections at the acceptor, before any worker saw it)
        assert mid["preauth_closes"] > before["preauth_closes"]
        # and every one of them is closed, at auth_timeout at the latest
        assert all(closed_by_router(s) for s in silent)
        after = wait_stat(cl, "auth_timeouts", before["auth_timeouts"])
        assert after > before["auth_timeouts"]
        assert call_ok(cl, pb, old)
    finally:
        for s in silent:
            s.close()
        old[0].close()


def test_client_that_never_reads_is_closed_at_the_write_deadline(cl, pb):
    """A client makes a valid call, then sends calls and reads nothing: with idle_timeout 1h,
    the router closes it once its output has made no progress for frame_timeout (2 s)."""
    before = stats(cl).get("write_timeouts", 0)  # (a build without it fails below)
    c = Raw(cl.rls_port, read=False, rcvbuf=4096)
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    # A send blocks until the router reads on (progress) or closes this connection for its
    # stalled output: a loaded machine may be slow to read, so the wait is long (a bound on
    # how long the test waits, not on how fast the router is).
    c.sock.settimeout(30)
    c.send(call_frames(1))
    sid, sent = 3, 0
    while sent < 64 << 20:
        batch = b"".join(call_frames(s) for s in range(sid, sid + 2000, 2))
        sid += 2000
        if not c.send(batch):
            break
        sent += len(batch)
    assert sent < 64 << 20, "the router read 64 MiB of calls from a client that reads nothing"
    # (waiting without reading: reading would be progress)
    assert wait_stat(cl, "write_timeouts", before) > before, "a client that never reads is held"
    assert closed_by_router(c.sock)
    c.close()
    assert call_ok(cl, pb)


def test_input_past_the_turn_budget_waits(cl, pb):
    """Calls sent in one burst of about 1 MiB on one connection: the router takes them a
    turn budget (64 KiB) at a time (throttled counts the waits) and answers them."""
    before = stats(cl)["throttled"]
    c = Raw(cl.rls_port)
    burst = b"".join(call_frames(s) for s in range(1, 2 * 8000, 2))
    assert len(burst) > 16 * 65536
    t = threading.Thread(target=c.send, args=(burst,), daemon=True)
    t.start()
    t.join(30)
    assert c.wait(lambda: len(c.heads) > 0)
    assert wait_stat(cl, "throttled", before) > before
    c.close()


def test_hpack_bomb_gets_goaway(cl, pb):
    """A 4000-byte header put in the HPACK table and referenced 4000 times per request: each
    request breaks the header limit, and after a few the connection gets GOAWAY
    ENHANCE_YOUR_CALM and is closed; a valid call is answered meanwhile."""
    c = Raw(cl.rls_port)
    c.send(call_frames(1))  # a valid call first: the connection is past its opening
    assert c.wait(lambda: 1 in c.heads)
    name, value = b"x-bomb", b"a" * 4000
    lit = b"\x40" + bytes([len(name)]) + name + b"\x7f" + varint7(len(value)) + value
    c.send(frame(HEADERS, END_HEADERS, 3, plain_block() + lit))
    for i in range(2, 200):
        if not c.send(frame(HEADERS, END_HEADERS | END_STREAM, 1 + 2 * i,
                            plain_block() + b"\xbe" * 4000)):
            break
        if c.goaway is not None or c.closed:
            break
    assert c.wait(lambda: c.goaway is not None), "no GOAWAY for 200 HPACK bombs"
    assert c.goaway == CALM, c.goaway
    assert c.wait(lambda: c.closed)
    c.close()
    assert call_ok(cl, pb)


def test_window_update_flood_gets_goaway(cl, pb):
    """WINDOW_UPDATE frames by the thousand on an authenticated connection: GOAWAY
    ENHANCE_YOUR_CALM, then the connection closes."""
    c = Raw(cl.rls_port)
    c.send(call_frames(1))
    assert c.wait(lambda: 1 in c.heads)
    unit = frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 1))
    for _ in range(40):
        if not c.send(unit * 1000) or c.goaway is not None:
            break
    assert c.wait(lambda: c.goaway is not None), "no GOAWAY for 40,000 WINDOW_UPDATEs"
    assert c.goaway == CALM, c.goaway
    assert c.wait(lambda: c.closed)
    c.close()
    assert call_ok(cl, pb)


def test_half_sent_tls_record_is_closed_at_auth_timeout(tmp_path):
    """With TLS: a client that sends half a TLS handshake record and waits is closed at
    auth_timeout (1 s here; idle_timeout is 1h), and counted in auth_timeouts."""
    from test_tls_integration import make_ca, make_cert

    make_ca(tmp_path, "ca")
    make_cert(tmp_path, "member", "ca")
    (tmp_path / "edge.yaml").write_text("domain: edge\ndescriptors:\n  - key: k\n"
                                        "    rate_limit:\n      unit: hour\n"
                                        "      requests_per_unit: 10\n")
    c = harness.Cluster(tmp_path / "c", cluster=(f"tls_cert_file = {tmp_path}/member.pem\n"
                                                 f"tls_key_file = {tmp_path}/member.key\n"
                                                 f"tls_ca_file = {tmp_path}/ca.pem\n"
                                                 f"envoy_config = {tmp_path}/edge.yaml\n"),
                        extra="[clients]\nauth_timeout = 1s\nidle_timeout = 1h\n")
    c.rls_port = harness.free_port()
    c.conf.write_text(c.conf.read_text().replace("[router]\n", f"[router]\nrls = {c.rls_port}\n",
                                                 1))
    ctx = ratelimiter.tls_context(str(tmp_path / "ca.pem"))
    c.ready_ssl = ctx
    c.start()
    try:
        harness.wait_port(c.rls_port, c.router, c.dir / "router.log")
        with ratelimiter.Client("127.0.0.1", c.port, 5.0, ssl=ctx) as k:
            before = k.stats()["auth_timeouts"]
        s = socket.create_connection(("127.0.0.1", c.rls_port), 5)
        # a handshake record announcing 16,384 bytes, 100 of them sent
        s.sendall(b"\x16\x03\x01\x40\x00" + b"\x01" + b"\x00" * 99)
        assert closed_by_router(s), "a half-sent TLS record is still held"
        s.close()
        with ratelimiter.Client("127.0.0.1", c.port, 5.0, ssl=ctx) as k:
            assert k.stats()["auth_timeouts"] > before
    finally:
        c.stop()


def test_unsent_output_counts_in_buffer_memory(tmp_path, pb):
    """[clients] buffer_memory = 1mb, one worker: a client that sends calls and never reads
    leaves about 1 MiB of answers unsent, and the calls whose answers wait behind them hold
    their memory (docs/ENVOY.md, "Bounds"). That output counts in the worker's share, so
    another client's 60 KB request finds it spent: the one that never reads, holding the
    most, is closed to make room (buffer_evictions), and the request is taken. Without the
    unsent output in the share, the calls' memory alone leaves room: nobody is closed."""
    (tmp_path / "edge.yaml").write_text("domain: edge\ndescriptors:\n  - key: k\n"
                                        "    rate_limit:\n      unit: hour\n"
                                        "      requests_per_unit: 100000000\n")
    # frame_timeout 30 s: the write deadline must not close the client that never reads
    # before its unsent output was seen to fill the share, however slow a loaded machine is
    c = rls_cluster(tmp_path, "edge.yaml", deadline="2s", start=False, router="workers = 1\n",
                    extra="[clients]\nbuffer_memory = 1mb\nidle_timeout = 1h\n"
                          "frame_timeout = 30s\n")
    start_rls(c)
    try:
        big = request(pb, "edge", [("k", "v" * 60000)])
        ch, stub = make_stub(c.rls_port, pb)
        try:
            stub(big, timeout=10)
        except grpc.RpcError as e:  # what the request decodes to does not matter here
            assert e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED, e
        r = Raw(c.rls_port, read=False, rcvbuf=4096)
        r.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        # the router stops reading once the share is spent: a send blocked 10 s says so (a
        # loaded machine's slow reads unblock well before)
        r.sock.settimeout(10)
        r.send(call_frames(1))
        sid, sent = 3, 0
        while sent < 64 << 20:
            batch = b"".join(call_frames(s) for s in range(sid, sid + 2000, 2))
            sid += 2000
            if not r.send(batch):
                break
            sent += len(batch)
        assert sent < 64 << 20, "the router kept reading a client that reads nothing"
        with ratelimiter.Client("127.0.0.1", c.port, 5.0) as k:
            assert k.stats().get("buffer_evictions", 0) == 0
        try:
            stub(big, timeout=10)
        except grpc.RpcError as e:
            assert e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED, e
        with ratelimiter.Client("127.0.0.1", c.port, 5.0) as k:
            st = k.stats()
            assert st.get("buffer_evictions", 0) == 1, st
            assert st.get("write_timeouts", 0) == 0, st
        assert closed_by_router(r.sock, 5)
        r.close()
        ch.close()
    finally:
        log = router_log(c)
        c.stop()
    assert "Sanitizer" not in log and "runtime error" not in log, log


def test_wildcard_matching_is_charged_to_the_connection(tmp_path, pb):
    """A config of many wildcard values makes each descriptor of a call compare its value with
    every pattern (upstream's linear scan): a call of 64 descriptors of 500-byte values against
    200 wildcards compares millions of bytes. That work is charged to the connection's turn
    budget like bytes read (the attack round of 2026-11-30: it was charged nothing, and 20 such
    calls held a worker's other clients 200 ms), so the connection that sent it waits turns
    before it reads again: STATS `throttled` counts it, where its 32 KB of request alone stay
    within a turn's 64 KiB."""
    lines = ["domain: edge", "descriptors:"]
    for i in range(200):
        lines.append(f"  - key: path\n    value: '/a*b*c*d{i}'\n"
                     "    rate_limit:\n      unit: hour\n      requests_per_unit: 1000000")
    (tmp_path / "wild.yaml").write_text("\n".join(lines) + "\n")
    c = rls_cluster(tmp_path, "wild.yaml", deadline="2s", router="workers = 1\n")
    try:
        ch, stub = make_stub(c.rls_port, pb)
        small = request(pb, "edge", [("path", "/x")])
        stub(small, timeout=10)
        with ratelimiter.Client("127.0.0.1", c.port, 5.0) as k:
            before = k.stats().get("throttled", 0)
        stub(small, timeout=10)  # a cheap call: not throttled
        with ratelimiter.Client("127.0.0.1", c.port, 5.0) as k:
            assert k.stats().get("throttled", 0) == before
        costly = request(pb, "edge", *[[("path", "/a" + "x" * 500)] for _ in range(64)])
        assert len(costly.SerializeToString()) < 40000
        stub(costly, timeout=10)
        stub(small, timeout=10)  # read once the debt is paid
        with ratelimiter.Client("127.0.0.1", c.port, 5.0) as k:
            assert k.stats().get("throttled", 0) > before
        ch.close()
    finally:
        log = router_log(c)
        c.stop()
    assert "Sanitizer" not in log and "runtime error" not in log, log
