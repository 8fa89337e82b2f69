"""HTTP/2 abuse of the gRPC front (docs/ENVOY.md, "Bounds"), with real sockets and frames
built by hand: each abuse runs while another client keeps calling, which must stay
answered promptly, and the router's RSS must stay bounded; the abusive connection is ended
or contained as each case says.

Cases: rapid reset (CVE-2023-44487), SETTINGS flood, PING flood, CONTINUATION flood, an
HPACK header that decompresses large (in the headers and in trailers), empty HEADERS on
one stream, a client that never reads, a zero flow-control
window (small answers, and large ones), malformed protobuf in a valid gRPC frame, a length prefix larger than the data,
many connections at once."""

import os
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
h2 = pytest.importorskip("h2")
from test_rls_h2 import Conn  # noqa: E402
import h2.events  # noqa: E402

from h2raw import (ACK, CONTINUATION, DATA, END_HEADERS, END_STREAM,  # noqa: E402
                   HEADERS, MSG, PING, REQ_HEADERS, RST_STREAM, SETTINGS, Raw, frame,
                   grpc_body, plain_block, varint7)
ASAN = "asan" in str(harness.BUILD)
RSS_GROWTH_MAX = (192 if ASAN else 48) << 20  # bytes the router may grow by in one case
PROMPT_S = 5.0  # the other client's longest call during an abuse: a generous bound (blocked, it waits its 10 s)


@pytest.fixture(scope="module")
def rls(tmp_path_factory):
    d = tmp_path_factory.mktemp("rlsabuse")
    (d / "edge.yaml").write_text("domain: edge\ndescriptors:\n  - key: k\n    rate_limit:\n"
                                 "      unit: hour\n      requests_per_unit: 1000000\n")
    c = rls_cluster(d, "edge.yaml", deadline="2s", start=False)
    # ASan keeps freed memory in quarantine (256 MiB by default): RSS would say little
    old = os.environ.get("ASAN_OPTIONS")
    os.environ["ASAN_OPTIONS"] = (old + ":" if old else "") + "quarantine_size_mb=16"
    try:
        start_rls(c)
    finally:
        if old is None:
            del os.environ["ASAN_OPTIONS"]
        else:
            os.environ["ASAN_OPTIONS"] = old
    yield c
    log = router_log(c)
    c.stop()
    assert "Sanitizer" not in log and "runtime error" not in log, log


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def under_abuse(rls, pb, abuse, limit_s=30.0):
    """Runs abuse() in a thread while another client calls the router every 50 ms; then a
    new client calls. Returns (abuse's result, the longest call, RSS growth)."""
    ch, stub = make_stub(rls.rls_port, pb)
    req = request(pb, "edge", [("k", "probe")])
    assert stub(req, timeout=5).overall_code == pb.RateLimitResponse.OK  # connected
    before = rss(rls.router.pid)
    peak = before
    out = {}

    def run():
        out["result"] = abuse()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    worst = 0.0
    deadline = time.monotonic() + limit_s
    calls = 0
    while t.is_alive() and time.monotonic() < deadline:
        t0 = time.monotonic()
        r = stub(req, timeout=10)
        worst = max(worst, time.monotonic() - t0)
        assert r.overall_code == pb.RateLimitResponse.OK
        calls += 1
        peak = max(peak, rss(rls.router.pid))
        time.sleep(0.05)
    t.join(limit_s)
    assert not t.is_alive(), "the abuse did not end"
    ch.close()
    # and a new client, on a new connection
    ch, stub = make_stub(rls.rls_port, pb)
    t0 = time.monotonic()
    assert stub(req, timeout=10).overall_code == pb.RateLimitResponse.OK
    worst = max(worst, time.monotonic() - t0)
    ch.close()
    peak = max(peak, rss(rls.router.pid))
    assert rls.router.poll() is None
    assert worst < PROMPT_S, f"a call took {worst:.2f}s during the abuse ({calls} calls)"
    assert peak - before < RSS_GROWTH_MAX, f"RSS grew by {(peak - before) >> 20} MiB"
    return out.get("result")


def test_rapid_reset(rls, pb):
    """CVE-2023-44487: complete calls, each cancelled at once (HEADERS, DATA, RST_STREAM),
    by the thousand. The router ends the connection (nghttp2's reset rate limit) and never
    holds more than a connection's worth."""
    def abuse():
        c = Raw(rls.rls_port)
        sid = 1
        sent = 0
        for _ in range(100):
            batch = b"".join(c.headers(s) + frame(DATA, END_STREAM, s, grpc_body(MSG))
                             + frame(RST_STREAM, 0, s, struct.pack(">I", 8))
                             for s in range(sid, sid + 400, 2))
            sid += 400
            if not c.send(batch):
                break
            sent += 200
        ended = c.ended(5)
        c.close()
        return sent, ended, c.goaway

    sent, ended, goaway = under_abuse(rls, pb, abuse)
    assert ended, f"{sent} streams opened and reset, the connection goes on"
    assert sent < 20000


def flood(port, unit, max_bytes=32 << 20, **kw):
    """Sends unit again and again on a connection that reads nothing back, until max_bytes
    went or the router stopped taking them (it stopped reading, or closed): returns the
    bytes sent and whether it stopped us."""
    c = Raw(port, read=False, rcvbuf=4096, **kw)
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    c.sock.settimeout(3)
    batch = unit * max(1, (256 << 10) // len(unit))
    sent = 0
    stopped = False
    while sent < max_bytes:
        if not c.send(batch):
            stopped = True
            break
        sent += len(batch)
    c.close()
    return sent, stopped


def test_settings_flood(rls, pb):
    """SETTINGS frames, their ACKs never read: the router stops reading (its output waits)
    or ends the connection, long before 32 MiB."""
    sent, stopped = under_abuse(
        rls, pb, lambda: flood(rls.rls_port, frame(SETTINGS, 0, 0, struct.pack(">HI", 3, 100))))
    assert stopped, f"{sent} bytes of SETTINGS taken"


def test_ping_flood(rls, pb):
    """PING frames, their ACKs never read: as SETTINGS."""
    sent, stopped = under_abuse(rls, pb, lambda: flood(rls.rls_port, frame(PING, 0, 0, b"12345678")))
    assert stopped, f"{sent} bytes of PING taken"


def test_continuation_flood(rls, pb):
    """A HEADERS frame without END_HEADERS, then CONTINUATION frames without end
    (CVE-2024-27316 / CVE-2024-28182): the connection is ended long before 16 MiB."""
    def abuse():
        c = Raw(rls.rls_port)
        block = c.enc.encode(REQ_HEADERS)
        c.send(frame(HEADERS, 0, 1, block))
        lit = hpack.Encoder()
        sent = 0
        for i in range(1024):
            # literal headers without indexing, ~16 KiB a frame
            chunk = lit.encode([(f"x-h{i}-{j}", "v" * 1000) for j in range(16)],
                               huffman=False)
            if not c.send(frame(CONTINUATION, 0, 1, chunk)):
                break
            sent += len(chunk)
            if c.closed or c.goaway is not None:
                break
        ended = c.ended(5)
        c.close()
        return sent, ended

    sent, ended = under_abuse(rls, pb, abuse)
    assert ended
    assert sent < 8 << 20, f"{sent} bytes of CONTINUATION taken"


def test_hpack_bomb(rls, pb):
    """One 4000-byte header put in the HPACK table, then referenced with one byte 10000
    times per request: 40 MB a request once decompressed. Each stream is reset (header
    bytes over 16384), none is answered, and the router's memory does not follow."""
    def abuse():
        c = Raw(rls.rls_port)
        # literal with incremental indexing, new name: dynamic table entry 62 (4038 bytes
        # of the table's 4096: nothing else is in it)
        name, value = b"x-bomb", b"a" * 4000
        lit = b"\x40" + bytes([len(name)]) + name + b"\x7f" + varint7(len(value)) + value
        c.send(frame(HEADERS, END_HEADERS, 1, plain_block() + lit))
        for i in range(1, 101):
            sid = 1 + 2 * i
            block = plain_block() + b"\xbe" * 10000  # indexed: entry 62
            if not c.send(frame(HEADERS, END_HEADERS | END_STREAM, sid, block)):
                break
        time.sleep(1.0)
        c.close()
        return c

    # the same headers without the bomb make a call that is answered
    ok = Raw(rls.rls_port)
    ok.send(frame(HEADERS, END_HEADERS, 1, plain_block()) + frame(DATA, END_STREAM, 1, grpc_body(MSG)))
    deadline = time.monotonic() + 5
    while 1 not in ok.heads and time.monotonic() < deadline:
        time.sleep(0.02)
    ok.close()
    assert 1 in ok.heads and not ok.resets and ok.goaway is None
    c = under_abuse(rls, pb, abuse)
    answered = {s for s in c.heads if s > 1}
    assert not answered, f"streams answered despite 40 MB of headers: {sorted(answered)[:5]}"
    assert c.goaway is None or c.goaway != 9, "the test's HPACK was wrong (COMPRESSION_ERROR)"
    assert len(c.resets) == 100 or c.goaway is not None, (c.resets, c.goaway)


def test_hpack_bomb_in_trailers(rls, pb):
    """The same bomb in each request's trailers (a second HEADERS block, after the message):
    its decoded bytes count against the request's 16384 as its headers' do, so no stream is
    answered and the connection ends with GOAWAY ENHANCE_YOUR_CALM (11) after 8 such
    requests; before, trailers were neither bounded nor charged: 100 such requests decoded
    4 GB for a 1.6 MB upload and the connection stayed."""
    def abuse():
        c = Raw(rls.rls_port)
        name, value = b"x-bomb", b"a" * 4000
        lit = b"\x40" + bytes([len(name)]) + name + b"\x7f" + varint7(len(value)) + value
        # the table entry comes in a first request's trailers, answered or not
        c.send(frame(HEADERS, END_HEADERS, 1, plain_block()) + frame(DATA, 0, 1, grpc_body(MSG))
                + frame(HEADERS, END_HEADERS | END_STREAM, 1, lit))
        for i in range(1, 101):
            sid = 1 + 2 * i
            bomb = frame(HEADERS, END_HEADERS, sid, plain_block()) \
                + frame(DATA, 0, sid, grpc_body(MSG)) \
                + frame(HEADERS, END_HEADERS | END_STREAM, sid, b"\xbe" * 10000)
            if not c.send(bomb) or c.goaway is not None:
                break
        c.ended(5)
        c.close()
        return c

    c = under_abuse(rls, pb, abuse)
    assert c.goaway == 11, (c.goaway, c.closed, len(c.resets))
    answered = {s for s in c.heads if s > 1}
    assert not answered, f"streams answered despite 40 MB of trailers: {sorted(answered)[:5]}"


def test_headers_on_an_open_stream_are_control_frames(rls, pb):
    """Empty HEADERS frames on one open stream (trailers that do not end it, over and over)
    cost the connection's control-frame allowance, as empty DATA frames do: it ends with
    GOAWAY ENHANCE_YOUR_CALM long before 2,000,000 of them, whatever the sockets' buffers
    take meanwhile (before: all taken, 0.1 µs of router CPU each, and the connection
    stayed)."""
    def abuse():
        c = Raw(rls.rls_port)
        c.send(frame(HEADERS, END_HEADERS, 1, plain_block()))
        sent = 0
        while sent < 2000000 and c.goaway is None and not c.closed:
            if not c.send(frame(HEADERS, END_HEADERS, 1) * 1000):
                break
            sent += 1000
        c.ended(5)
        c.close()
        return sent, c.goaway

    sent, goaway = under_abuse(rls, pb, abuse)
    assert goaway == 11, (sent, goaway)
    assert sent < 2000000


def test_client_that_never_reads(rls, pb):
    """Complete calls sent as fast as the router takes them, nothing read back: the router
    stops reading that connection when 1 MiB of output waits (the kernel's buffers aside),
    long before 32 MiB of calls, and its memory stays put."""
    def abuse():
        c = Raw(rls.rls_port, read=False, rcvbuf=4096)
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        c.sock.settimeout(3)
        first = c.enc.encode(REQ_HEADERS)
        block = c.enc.encode(REQ_HEADERS)  # all indexed now: the same bytes for every call
        body = grpc_body(MSG)
        if not c.send(frame(HEADERS, END_HEADERS, 1, first) + frame(DATA, END_STREAM, 1, body)):
            return 0, True
        sent, sid = 0, 3
        while sent < 32 << 20:
            batch = b"".join(frame(HEADERS, END_HEADERS, s, block) + frame(DATA, END_STREAM, s, body)
                             for s in range(sid, sid + 20000, 2))
            sid += 20000
            if not c.send(batch):
                c.close()
                return sent, True
            sent += len(batch)
        c.close()
        return sent, False

    sent, stopped = under_abuse(rls, pb, abuse, limit_s=60)
    assert stopped, f"{sent} bytes of calls taken from a client that reads nothing"


def test_zero_window(rls, pb):
    """A client whose flow-control window is 0: no answer can be sent; 100 calls are held,
    the 101st stream is refused, and the calls are answered once the window opens."""
    c = Raw(rls.rls_port, settings=struct.pack(">HI", 4, 0))  # INITIAL_WINDOW_SIZE 0
    time.sleep(0.2)
    c.send(frame(SETTINGS, ACK, 0))
    body = b"".join(c.headers(s) + frame(DATA, END_STREAM, s, grpc_body(MSG))
                    for s in range(1, 201, 2))
    c.send(body)
    time.sleep(0.5)
    assert len(c.heads) == 100  # response headers go; their DATA waits for the window
    c.send(c.headers(201) + frame(DATA, END_STREAM, 201, grpc_body(MSG)))
    assert c.ended(3) or 201 in c.resets
    c.close()

    def abuse():  # and many such connections, each with its 100 calls held
        conns = [Raw(rls.rls_port, settings=struct.pack(">HI", 4, 0)) for _ in range(20)]
        for k in conns:
            k.send(frame(SETTINGS, ACK, 0) + b"".join(
                k.headers(s) + frame(DATA, END_STREAM, s, grpc_body(MSG))
                for s in range(1, 201, 2)))
        time.sleep(2)
        held = sum(len(k.heads) for k in conns)
        for k in conns:
            k.close()
        return held

    assert under_abuse(rls, pb, abuse) == 2000


def varint(n):
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


def big_request(descs=64, value_len=900):
    """RateLimitRequest{domain: "edge", descriptors: descs x [{k: value_len bytes}]}: about
    58 KB, and its answer about as large (each descriptor's status)."""
    entry = b"\x0a\x01k\x12" + varint(value_len) + b"q" * value_len
    desc = b"\x0a" + varint(len(entry)) + entry
    return b"\x0a\x04edge" + (b"\x12" + varint(len(desc)) + desc) * descs


def zero_window_calls(port, calls=100):
    """A connection whose flow-control window is 0, with `calls` large calls sent on it."""
    c = Raw(port, settings=struct.pack(">HI", 4, 0))  # INITIAL_WINDOW_SIZE 0
    body = grpc_body(big_request())
    out = frame(SETTINGS, ACK, 0)
    for s in range(1, 2 * calls, 2):
        out += c.headers(s)
        chunks = [body[i:i + 16384] for i in range(0, len(body), 16384)]
        out += b"".join(frame(DATA, END_STREAM if i == len(chunks) - 1 else 0, s, x)
                        for i, x in enumerate(chunks))
    c.send(out)
    return c


def test_zero_window_large_answers_are_bounded(rls, pb):
    """Large answers a client never opens its window for (the attack round of 2026-11-30: 20 MB
    held per connection, for ever): what a call holds beyond its arena (its request decoded,
    its answer) counts against the connection's 1 MiB and the worker's buffer_memory, so a
    few of 100 such calls are taken and keep their answer, reset once they have waited
    frame_timeout (10 s), and the rest are refused before anything is decided: reset
    (ENHANCE_YOUR_CALM) when their request's bytes find no room, or RESOURCE_EXHAUSTED
    (trailers only) when their decoded request does not; 20 such connections of 30 calls
    leave the router's memory put."""
    c = zero_window_calls(rls.rls_port)
    assert c.wait(lambda: len(c.heads | set(c.resets)) == 100, 30), len(c.heads | set(c.resets))
    exhausted = {s for s, v in c.status.items() if v == RESOURCE_EXHAUSTED}
    waiting = c.heads - set(c.status)  # headers went, the answer's DATA waits for the window
    refused = set(c.resets) - c.heads  # its request could not be held: ENHANCE_YOUR_CALM
    assert len(exhausted) + len(waiting) + len(refused) == 100, (exhausted, waiting, refused)
    assert all(c.resets[s] == 11 for s in refused), c.resets
    assert len(exhausted) + len(refused) >= 50, (len(exhausted), len(refused))
    assert 1 <= len(waiting) <= 17, len(waiting)  # 1 MiB over answers of ~58 KB at most
    assert c.wait(lambda: waiting <= set(c.resets), 20), (waiting - set(c.resets))
    assert all(c.resets[s] == 8 for s in waiting)  # CANCEL
    c.close()

    def abuse():  # 30 calls each: 3.6 MB held per connection before the bound, 72 MB in all
        conns = [zero_window_calls(rls.rls_port, 30) for _ in range(20)]
        for k in conns:
            k.wait(lambda k=k: len(k.heads | set(k.resets)) == 30, 30)
        answered = sum(len(k.heads | set(k.resets)) for k in conns)
        for k in conns:
            k.close()
        return answered

    assert under_abuse(rls, pb, abuse, limit_s=90) == 600


def call_raw(port, body, end=True):
    """One call over the h2 package: (grpc-status, grpc-message) from the trailers (or the
    headers of a trailers-only answer), None when reset or without an answer."""
    c = Conn(port)
    c.open(1)
    ev = []
    while True:  # as the flow-control window allows
        room = min(c.h2.local_flow_control_window(1), len(body), 16384)
        if room == 0 and body:
            ev += c.events(0.2)
            continue
        c.h2.send_data(1, body[:room], end_stream=end and room == len(body))
        c.flush()
        body = body[room:]
        if not body:
            break
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        ev += c.events(0.3)
        if any(isinstance(e, (h2.events.StreamEnded, h2.events.StreamReset)) for e in ev):
            break
    c.close()
    for e in ev:
        if isinstance(e, (h2.events.TrailersReceived, h2.events.ResponseReceived)):
            h = dict(e.headers)
            if b"grpc-status" in h:
                return int(h[b"grpc-status"]), h.get(b"grpc-message", b"").decode()
    return None


INVALID_ARGUMENT, RESOURCE_EXHAUSTED, UNIMPLEMENTED = 3, 8, 12


@pytest.mark.parametrize("msg", [
    b"\xff\xff\xff",                                  # field 0x1fffff.. with no valid tag
    b"\x0a\x05ab",                                    # domain: length past the end
    b"\x0a",                                          # domain: no length
    b"\x0a\x04edge\x12\x80\x80\x80\x80\x10",          # descriptor: length 2^32
    b"\x08" + b"\xff" * 10 + b"\x01",                 # a varint of 11 bytes
    b"\x0d\x00\x00\x00\x00",                          # domain as fixed32
    b"\x0a\x04edge\x12\x03\x0a\x01\xff",             # entry: truncated inside
    b"\x0a\x04edge\x12\x04\x0a\x02\x0a\x05",          # key: length past the entry
    b"\x0b" * 5000,                                   # start-group tags, nested
], ids=["tag", "len-past-end", "no-len", "len-2^32", "varint-11", "wire-type", "inner",
        "inner-len", "groups"])
def test_malformed_protobuf_in_a_valid_frame(rls, msg):
    got = call_raw(rls.rls_port, grpc_body(msg))
    assert got is not None and got[0] == INVALID_ARGUMENT, got
    assert call_raw(rls.rls_port, grpc_body(MSG))[0] == 0


def test_length_prefix_and_framing(rls):
    port = rls.rls_port
    # the prefix says more than the stream carries
    got = call_raw(port, grpc_body(MSG, length=len(MSG) + 100))
    assert got is not None and got[0] == INVALID_ARGUMENT, got
    got = call_raw(port, grpc_body(MSG, length=0xFFFFFFFF))
    assert got is not None and got[0] == INVALID_ARGUMENT, got
    # a prefix over the message bound, and more data than the bound: what passes the bound
    # is dropped, not held, and the call is refused at its end
    got = call_raw(port, grpc_body(MSG + b"\0" * 100000, length=0xFFFFFFFF))
    assert got is not None and got[0] == RESOURCE_EXHAUSTED, got
    # less than the 5 bytes of a prefix
    got = call_raw(port, b"\x00\x00\x00")
    assert got is not None and got[0] == INVALID_ARGUMENT, got
    # two messages in one call
    got = call_raw(port, grpc_body(MSG) + grpc_body(MSG))
    assert got is not None and got[0] == INVALID_ARGUMENT, got
    # a compressed message
    got = call_raw(port, b"\x01" + grpc_body(MSG)[1:])
    assert got is not None and got[0] == UNIMPLEMENTED, got
    # an empty body (no message at all)
    got = call_raw(port, b"")
    assert got is not None and got[0] == INVALID_ARGUMENT, got
    assert call_raw(port, grpc_body(MSG))[0] == 0


def test_many_connections_at_once(rls, pb):
    """300 connections opened at once, each with a request left half-sent: the others are
    served meanwhile, and closing them all gives the memory back."""
    def abuse():
        conns = []
        for _ in range(300):
            c = Raw(rls.rls_port)
            c.send(c.headers(1) + frame(DATA, 0, 1, grpc_body(MSG)[:8]))
            conns.append(c)
        time.sleep(1.0)
        alive = sum(not c.closed for c in conns)
        for c in conns:
            c.close()
        return alive

    assert under_abuse(rls, pb, abuse) == 300
