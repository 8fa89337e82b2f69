"""The binary listener's client caps on the router's gRPC and RESP fronts (docs/RESP.md and
docs/ENVOY.md, "Bounds"; docs/OPERATIONS.md, "Connection limits"), with real sockets from
several loopback source addresses (127.0.0.x): [clients] max_connections_per_peer counted
across the binary, gRPC and RESP listeners together; the pre-AUTH share of a front's
connections while [client] sections exist (RESP: AUTH); failed AUTHs per address on RESP,
charged to the same counts as the binary protocol's and gRPC's."""

import hashlib
import socket
import time

import pytest

import harness

pytestmark = pytest.mark.integration

TOKEN = b"front-limits-token-0123456789abcdef"
PER_PEER = 3
MAX_CONNS = 8  # per front; the pre-AUTH share is half: 4
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS_EMPTY = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    harness.need_binaries("rl-node", "rl-router")
    d = tmp_path_factory.mktemp("frontlimits")
    (d / "edge.yaml").write_text("domain: edge\ndescriptors:\n  - key: k\n    rate_limit:\n"
                                 "      unit: hour\n      requests_per_unit: 1000000\n")
    sha = hashlib.sha256(TOKEN).hexdigest()
    c = harness.Cluster(
        d, cluster="envoy_config = edge.yaml\n",
        extra=f"[clients]\nmax_connections = {MAX_CONNS}\n"
              f"max_connections_per_peer = {PER_PEER}\n\n"
              f"[client app]\ntoken_sha256 = {sha}\nservices = *\n")
    c.rls_port, c.resp_port = harness.free_port(), harness.free_port()
    text = c.conf.read_text().replace(
        "[router]\n", f"[router]\nrls = {c.rls_port}\nresp = {c.resp_port}\nworkers = 2\n", 1)
    c.conf.write_text(text)
    c.ready_token = TOKEN
    c.start()
    harness.wait_port(c.rls_port, c.router, c.dir / "router.log")
    harness.wait_port(c.resp_port, c.router, c.dir / "router.log")
    yield c
    log = (c.dir / "router.log").read_text(errors="replace")
    c.stop()
    assert "Sanitizer" not in log and "runtime error" not in log, log


def connect(port, src):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5.0)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    return s


def read_some(s):
    """What the router sends first: bytes, or b"" when it closed the connection."""
    try:
        return s.recv(4096)
    except ConnectionResetError:
        return b""


def read_to_eof(s):
    out = b""
    while True:
        b = read_some(s)
        if not b:
            return out
        out += b


def resp(s, *args):
    s.sendall(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args))
    return read_some(s)


def resp_authed(port, src):
    s = connect(port, src)
    assert resp(s, b"AUTH", TOKEN) == b"+OK\r\n"
    return s


def grpc_open(port, src):
    """A gRPC connection: the preface and SETTINGS sent; the router's first bytes back."""
    s = connect(port, src)
    s.sendall(PREFACE + SETTINGS_EMPTY)
    return s, read_some(s)


def settle():
    time.sleep(0.3)  # the router notices closed sockets (counts drop at its close)


def closeall(socks):
    for s in socks:
        s.close()
    settle()


def test_resp_per_peer_cap_counts_every_front(cl):
    held = [resp_authed(cl.resp_port, "127.0.0.2") for _ in range(PER_PEER)]
    try:
        # a 4th from that address is refused on RESP, with a RESP error line...
        s = connect(cl.resp_port, "127.0.0.2")
        got = read_to_eof(s)
        s.close()
        assert got.startswith(b"-ERR server busy: too many connections from this address"), got
        # ...and on gRPC too: the per-address count is the process's, across listeners
        g, first = grpc_open(cl.rls_port, "127.0.0.2")
        assert first == b"", first
        g.close()
        # another address is served on both
        o = resp_authed(cl.resp_port, "127.0.0.3")
        assert resp(o, b"PING") == b"+PONG\r\n"
        o.close()
        g, first = grpc_open(cl.rls_port, "127.0.0.3")
        assert first[3] == 4, first  # the router's SETTINGS frame
        g.close()
        # the held connections still work
        for s in held:
            assert resp(s, b"PING") == b"+PONG\r\n"
    finally:
        closeall(held)
    # and once they are gone the address is served again
    s = resp_authed(cl.resp_port, "127.0.0.2")
    s.close()
    settle()


def test_grpc_per_peer_cap(cl):
    held = []
    try:
        for _ in range(PER_PEER):
            g, first = grpc_open(cl.rls_port, "127.0.0.4")
            held.append(g)
            assert first[3] == 4, first
        g, first = grpc_open(cl.rls_port, "127.0.0.4")
        g.close()
        assert first == b"", first
        # RESP from that address is refused too: the count is the process's
        s = connect(cl.resp_port, "127.0.0.4")
        got = read_to_eof(s)
        s.close()
        assert got.startswith(b"-ERR server busy: too many connections from this address"), got
        other, first = grpc_open(cl.rls_port, "127.0.0.5")
        assert first[3] == 4, first
        other.close()
    finally:
        closeall(held)


def gone_now(s):
    """True when the router closed s (a PING gets no answer)."""
    try:
        return resp(s, b"PING") == b""
    except OSError:
        return True


def test_resp_preauth_share(cl):
    held = []
    try:
        for i in range(MAX_CONNS // 2):
            s = connect(cl.resp_port, f"127.0.0.{20 + i}")
            held.append(s)
            assert resp(s, b"PING").startswith(b"-NOAUTH"), "served before AUTH"
        # the share is full: a newcomer takes the place of its worker's oldest connection
        # still waiting for AUTH (refused only by a worker that has none)
        s = connect(cl.resp_port, "127.0.0.30")
        got = resp(s, b"PING")
        if got.startswith(b"-NOAUTH"):
            gone = [h for h in held if gone_now(h)]
            assert len(gone) == 1, f"{len(gone)} pre-AUTH connections closed for a newcomer"
            held = [h for h in held if h not in gone] + [s]
        else:
            got += read_to_eof(s)
            s.close()
            assert got.startswith(b"-ERR server busy: too many connections have not "
                                  b"authenticated yet"), got
        # one of them authenticates: its place in the pre-AUTH share is free again
        assert resp(held[0], b"AUTH", TOKEN) == b"+OK\r\n"
        s = connect(cl.resp_port, "127.0.0.31")
        held.append(s)
        assert resp(s, b"PING").startswith(b"-NOAUTH")
        assert resp(held[0], b"PING") == b"+PONG\r\n"
    finally:
        closeall(held)


def test_resp_failed_auth_is_slowed_per_address(cl):
    refused = None
    for _ in range(40):
        s = connect(cl.resp_port, "127.0.0.40")
        got = resp(s, b"AUTH", b"wrong-token-wrong-token-wrong")
        s.close()
        if b"too many failed AUTHs" in got:
            refused = got
            break
        assert got.startswith(b"-WRONGPASS") or got == b"", got
    assert refused is not None, "40 wrong AUTHs in a row were never slowed"
    # while it waits, even the right token from that address is refused (at connect or AUTH)
    s = connect(cl.resp_port, "127.0.0.40")
    got = resp(s, b"AUTH", TOKEN)
    s.close()
    assert b"too many failed AUTHs" in got or got == b"", got
    # another address is served at once
    o = resp_authed(cl.resp_port, "127.0.0.41")
    assert resp(o, b"PING") == b"+PONG\r\n"
    o.close()
    settle()
