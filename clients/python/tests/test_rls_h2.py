"""The gRPC front's HTTP/2 bounds (docs/ENVOY.md, "Bounds"), with a raw HTTP/2 client (the
h2 package) against a real router: streams per connection, incomplete requests, idle
connections."""

import socket
import time

import pytest

from rls_harness import METHOD, rls_cluster, running

pytestmark = pytest.mark.integration

h2 = pytest.importorskip("h2")
pytest.importorskip("hpack")
import h2.config  # noqa: E402
import h2.connection  # noqa: E402
import h2.errors  # noqa: E402
import h2.events  # noqa: E402

from h2raw import DATA, END_HEADERS, HEADERS, MSG, Raw, frame, grpc_body  # noqa: E402

PATH = METHOD
# RateLimitRequest{domain: "edge", descriptors: [{entries: [{key: "k", value: "v"}]}]}
CALL_MSG = b"\x0a\x04edge" + b"\x12\x08\x0a\x06\x0a\x01k\x12\x01v"


def start(tmp_path_factory, clients):
    d = tmp_path_factory.mktemp("rlsh2")
    (d / "edge.yaml").write_text("domain: edge\ndescriptors:\n  - key: k\n    rate_limit:\n"
                                 "      unit: hour\n      requests_per_unit: 5\n")
    return rls_cluster(d, "edge.yaml", extra=clients)


@pytest.fixture(scope="module")
def rls(tmp_path_factory):
    yield from running(start(tmp_path_factory, "[clients]\nidle_timeout = 1s\n"
                             "frame_timeout = 1s\nmax_connections = 4\n"))


@pytest.fixture(scope="module")
def rls_slow(tmp_path_factory):
    """Default timeouts: requests may take their time."""
    yield from running(start(tmp_path_factory, ""))


class Conn:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), 5)
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.h2.initiate_connection()
        self.flush()
        self.closed = False

    def flush(self):
        data = self.h2.data_to_send()
        if data:
            try:
                self.sock.sendall(data)
            except ConnectionError:
                self.closed = True

    def events(self, timeout):
        """Events until timeout seconds pass without any, or the connection ends."""
        out = []
        self.sock.settimeout(timeout)
        while True:
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                return out
            except ConnectionError:
                data = b""
            if not data:
                self.closed = True
                return out
            out += self.h2.receive_data(data)
            self.flush()

    def open(self, sid, end=False):
        self.h2.send_headers(sid, [(":method", "POST"), (":scheme", "http"), (":path", PATH),
                                   (":authority", "x"), ("content-type", "application/grpc"),
                                   ("te", "trailers")], end_stream=end)
        self.flush()

    def close(self):
        self.sock.close()


def test_more_streams_than_allowed_are_refused(rls):
    c = Conn(rls.rls_port)
    c.events(0.3)  # the server's SETTINGS
    assert c.h2.remote_settings.max_concurrent_streams == 100
    # SETTINGS_NO_RFC7540_PRIORITIES (RFC 9218): no priority tree kept for unary calls
    assert c.h2.remote_settings.get(0x9) == 1
    # h2 itself enforces the server's limit: lift it to send the 101st
    c.h2.remote_settings.max_concurrent_streams = 1000
    c.h2.remote_settings.acknowledge()
    for i in range(101):
        c.open(1 + 2 * i)
    ev = c.events(0.5)
    # nghttp2 ends a connection that opens a 101st stream after acknowledging the limit
    # (PROTOCOL_ERROR); the first 100 were taken (last_stream_id 199)
    end = [e for e in ev if isinstance(e, h2.events.ConnectionTerminated)]
    assert end, ev
    assert end[0].error_code == h2.errors.ErrorCodes.PROTOCOL_ERROR
    assert end[0].last_stream_id == 199
    resets = [e for e in ev if isinstance(e, h2.events.StreamReset)]
    assert not resets, resets
    c.close()
    assert rls.router.poll() is None


def test_incomplete_request_is_reset_and_idle_connection_closed(rls):
    c = Conn(rls.rls_port)
    c.open(1)  # headers, then nothing
    t = time.monotonic()
    ev = []
    while time.monotonic() - t < 5 and not any(isinstance(e, h2.events.StreamReset) for e in ev):
        ev += c.events(0.5)
    reset = [e for e in ev if isinstance(e, h2.events.StreamReset)]
    assert reset and reset[0].error_code == h2.errors.ErrorCodes.CANCEL, ev
    assert 0.9 <= time.monotonic() - t < 4
    # now no call is open: the connection is closed after idle_timeout (1s)
    t = time.monotonic()
    while time.monotonic() - t < 6 and not c.closed:
        ev += c.events(0.5)
    assert c.closed
    assert any(isinstance(e, h2.events.ConnectionTerminated) for e in ev)
    c.close()
    assert rls.router.poll() is None


def test_a_complete_call_over_raw_h2(rls):
    c = Conn(rls.rls_port)
    c.open(1)
    # RateLimitRequest{domain: "edge", descriptors: [{entries: [{key: "k", value: "v"}]}]}
    msg = b"\x0a\x04edge" + b"\x12\x08\x0a\x06\x0a\x01k\x12\x01v"
    c.h2.send_data(1, b"\x00" + len(msg).to_bytes(4, "big") + msg, end_stream=True)
    c.flush()
    ev = c.events(1.0)
    heads = [e for e in ev if isinstance(e, h2.events.ResponseReceived)]
    trailers = [e for e in ev if isinstance(e, h2.events.TrailersReceived)]
    data = b"".join(e.data for e in ev if isinstance(e, h2.events.DataReceived))
    assert heads and dict(heads[0].headers)[b"content-type"] == b"application/grpc"
    assert trailers and dict(trailers[0].headers)[b"grpc-status"] == b"0"
    assert data[0] == 0 and int.from_bytes(data[1:5], "big") == len(data) - 5
    # overall_code OK (field 1 = 1), one status with current_limit 5 per hour
    assert data[5:7] == b"\x08\x01"
    c.close()


def call_with_headers(port, headers):
    """One call whose request carries these headers as they are (the h2 package told not to
    check or fix them): the events of its stream."""
    c = Conn(port)
    c.h2.config.validate_outbound_headers = False
    c.h2.config.normalize_outbound_headers = False
    c.h2.send_headers(1, headers)
    c.h2.send_data(1, b"\x00" + len(CALL_MSG).to_bytes(4, "big") + CALL_MSG, end_stream=True)
    c.flush()
    ev = [e for e in c.events(1.0) if getattr(e, "stream_id", None) == 1]
    c.close()
    return ev


def grpc_status(ev):
    trailers = [e for e in ev if isinstance(e, (h2.events.TrailersReceived,
                                                h2.events.ResponseReceived))]
    codes = [dict(t.headers).get(b"grpc-status") for t in trailers]
    return [c for c in codes if c is not None]


def test_malformed_pseudo_headers_reset_the_stream(rls):
    """RFC 9113, 8.3: a pseudo-header seen twice, unknown, empty, after a regular header, or
    one of :method, :scheme and :path missing makes the request malformed: the stream is
    reset with PROTOCOL_ERROR, never answered."""
    good = [(":method", "POST"), (":scheme", "http"), (":path", PATH), (":authority", "x"),
            ("content-type", "application/grpc"), ("te", "trailers")]
    bad = {
        "twice": good[:3] + [(":path", PATH)] + good[3:],
        "unknown": good[:4] + [(":protocol", "x")] + good[4:],
        "empty": [(":method", "")] + good[1:],
        "after a regular header": good[:3] + good[4:] + [(":authority", "x")],
        "no :method": good[1:],
        "no :path": good[:2] + good[3:],
        "no :scheme": good[:1] + good[2:],
    }
    for what, headers in bad.items():
        ev = call_with_headers(rls.rls_port, headers)
        resets = [e for e in ev if isinstance(e, h2.events.StreamReset)]
        assert resets and resets[0].error_code == h2.errors.ErrorCodes.PROTOCOL_ERROR, (what, ev)
        assert grpc_status(ev) == [], (what, ev)
    # the same connection's way, well-formed: answered (grpc-status 0)
    assert grpc_status(call_with_headers(rls.rls_port, good)) == [b"0"]


def call_with_trailers(port, trailers):
    """One call with its message, then trailers that end the stream: its events."""
    c = Conn(port)
    c.h2.config.validate_outbound_headers = False
    c.h2.config.normalize_outbound_headers = False
    c.open(1)
    c.h2.send_data(1, b"\x00" + len(CALL_MSG).to_bytes(4, "big") + CALL_MSG)
    c.h2.send_headers(1, trailers, end_stream=True)
    c.flush()
    ev = [e for e in c.events(1.0) if getattr(e, "stream_id", None) == 1]
    c.close()
    return ev


def test_malformed_trailers_and_connection_headers_reset_the_stream(rls):
    """RFC 9113, 8.1 and 8.2.2: a pseudo-header in trailers, trailers that do not end the
    stream, and a connection-specific header (connection, keep-alive, proxy-connection,
    transfer-encoding, upgrade, a te other than "trailers") make the request malformed: the
    stream is reset with PROTOCOL_ERROR, never answered."""
    good = [(":method", "POST"), (":scheme", "http"), (":path", PATH), (":authority", "x"),
            ("content-type", "application/grpc"), ("te", "trailers")]
    for what, ev in {
        "connection": call_with_headers(rls.rls_port, good + [("connection", "keep-alive")]),
        "keep-alive": call_with_headers(rls.rls_port, good + [("keep-alive", "5")]),
        "transfer-encoding": call_with_headers(rls.rls_port,
                                               good + [("transfer-encoding", "chunked")]),
        "upgrade": call_with_headers(rls.rls_port, good + [("upgrade", "h2c")]),
        "te gzip": call_with_headers(rls.rls_port, good[:5] + [("te", "gzip")]),
        ":method in trailers": call_with_trailers(rls.rls_port, [(":method", "GET")]),
        "connection in trailers": call_with_trailers(rls.rls_port, [("connection", "x")]),
    }.items():
        resets = [e for e in ev if isinstance(e, h2.events.StreamReset)]
        assert resets and resets[0].error_code == h2.errors.ErrorCodes.PROTOCOL_ERROR, (what, ev)
        assert grpc_status(ev) == [], (what, ev)
    # trailers that do not end the stream (h2 will not send them: raw frames)
    c = Raw(rls.rls_port)
    c.send(c.headers(1) + frame(DATA, 0, 1, grpc_body(MSG))
           + frame(HEADERS, END_HEADERS, 1, c.enc.encode([("x-b", "2")])))
    c.wait(lambda: 1 in c.resets, 5.0)
    c.close()
    assert c.resets.get(1) == h2.errors.ErrorCodes.PROTOCOL_ERROR and 1 not in c.heads, c.resets
    # te's value is a token of any case (RFC 9110): "Trailers" is answered
    assert grpc_status(call_with_headers(rls.rls_port, good[:5] + [("te", "Trailers")])) == [b"0"]
    # trailers of regular headers, ending the stream: answered
    assert grpc_status(call_with_trailers(rls.rls_port, [("x-trace", "1")])) == [b"0"]


def test_another_method_or_path_unimplemented(rls):
    """A GET, or another path: UNIMPLEMENTED (grpc-status 12)."""
    good = [(":method", "POST"), (":scheme", "http"), (":path", PATH), (":authority", "x"),
            ("content-type", "application/grpc")]
    for what, headers in {
        "GET": [(":method", "GET")] + good[1:],
        "another path": good[:2] + [(":path", PATH + "x")] + good[3:],
    }.items():
        assert grpc_status(call_with_headers(rls.rls_port, headers)) == [b"12"], what


def test_connections_past_the_cap_are_closed(rls):
    """[clients] max_connections bounds the gRPC connections of the process: the 5th is
    closed at once, and a place frees up when one closes. (Each makes a call first: a
    connection without one is in the pre-AUTH share, half of max_connections.)"""
    time.sleep(0.3)  # the other tests' connections are closed by now
    conns = []
    for _ in range(4):  # one after the other: each leaves the pre-AUTH share with its call
        c = Conn(rls.rls_port)
        conns.append(c)
        c.open(1)
        c.h2.send_data(1, b"\x00" + len(CALL_MSG).to_bytes(4, "big") + CALL_MSG, end_stream=True)
        c.flush()
        c.events(0.2)
        assert not c.closed
    extra = Conn(rls.rls_port)
    extra.events(1.0)
    assert extra.closed
    extra.close()
    conns.pop().close()
    time.sleep(0.3)
    again = Conn(rls.rls_port)
    again.events(0.5)
    assert not again.closed
    assert again.h2.remote_settings.max_concurrent_streams == 100
    again.close()
    for c in conns:
        c.close()


def test_request_bytes_held_per_connection_are_bounded(rls_slow):
    """Streams that send most of a message and wait: past 1 MiB held on one connection, the
    next one is reset (ENHANCE_YOUR_CALM); the connection and the router go on."""
    rls = rls_slow
    c = Conn(rls.rls_port)
    c.events(0.2)
    resets = {}
    for i in range(20):
        sid = 1 + 2 * i
        c.open(sid)
        sent = 0
        while sent < 60000:
            room = min(c.h2.local_flow_control_window(sid), 60000 - sent, 16384)
            if room <= 0:
                for e in c.events(0.05):
                    if isinstance(e, h2.events.StreamReset):
                        resets[e.stream_id] = e.error_code
                if sid in resets or c.closed:
                    break
                continue
            c.h2.send_data(sid, b"\0" * room)
            c.flush()
            sent += room
        for e in c.events(0.1):
            if isinstance(e, h2.events.StreamReset):
                resets[e.stream_id] = e.error_code
        if resets:
            break
    # 16 bodies of 64 KiB (the buffers grow by doubling) fill 1 MiB: the 17th is refused
    assert resets == {33: h2.errors.ErrorCodes.ENHANCE_YOUR_CALM}, resets
    assert not c.closed
    c.close()
    assert rls.router.poll() is None
