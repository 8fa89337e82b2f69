"""The OpenResty client (clients/lua/ratelimiter.lua) against a hostile server, in a real
nginx (Debian's nginx with libnginx-mod-http-lua).

A fake router in this process (a real TCP socket on 127.0.0.1, a thread per connection)
reads each request frame and answers as the test says:

- a valid ALLOWED reply trickled one byte every 100 ms: `timeout` is one deadline for the
  whole call, so check() fails with a timeout after about `timeout` (300 ms), and access()
  answers with the failure policy, never the trickled ALLOWED (a cosocket re-arms its read
  timer whenever a byte arrives, so per-read timeouts alone held the request for as long
  as the frame took: here about 4 s);
- an ERROR whose message holds a newline, a forged log line, a NUL and bytes that are not
  UTF-8: error.log gets the message escaped (\\xNN) on the warn line, never a line of the
  server's making; an overlong message is cut; a service taken from the request is escaped
  the same way;
- and, as regressions of the new read loop: a reply split in pieces within the timeout is
  read whole, and a clean exchange still returns the connection to the pool.

Each test has an nginx of its own (prefix in a temp dir, free port, killed however the test
ends): the module logs a failure at most once a second per worker."""

import http.client
import struct
import time
import urllib.parse
from pathlib import Path
from typing import Callable, Optional

import msgpack
import pytest

import harness
from fake_router import FakeRouter

NGINX = "/usr/sbin/nginx"
LUA_MODULE = "/usr/lib/nginx/modules/ngx_http_lua_module.so"
TIMEOUT_MS = 300  # the module's timeout in these tests
TRICKLE_S = 0.1   # one byte of the reply every 100 ms
BOUND_S = 1.2     # a call must return within this (timeout + a margin for a loaded machine)
SLACK_MS = "5000"  # the timeout of the tests whose server answers at once (or nearly)
FORGED = "2026/01/01 00:00:00 [emerg] 1#1: FORGED LINE"

CONF = """\
load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;
daemon off;
master_process off;
worker_processes 1;
error_log @PREFIX@/error.log warn;
pid @PREFIX@/nginx.pid;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path @PREFIX@/tmp/body;
    proxy_temp_path @PREFIX@/tmp/proxy;
    fastcgi_temp_path @PREFIX@/tmp/fastcgi;
    uwsgi_temp_path @PREFIX@/tmp/uwsgi;
    scgi_temp_path @PREFIX@/tmp/scgi;
    lua_package_path "@LUA@/?.lua;;";
    init_by_lua_block {
        require("ratelimiter").configure{ host = "127.0.0.1", port = @RL_PORT@,
                                           timeout = @TIMEOUT@, failure = "open" }
    }
    server {
        listen 127.0.0.1:@PORT@;
        location = /check {
            content_by_lua_block {
                local rl = require "ratelimiter"
                ngx.update_time()
                local t0 = ngx.now()
                local reply, err = rl.check{ service = "svc", user = "alice",
                    timeout = tonumber(ngx.var.arg_timeout),
                    read_timeout = tonumber(ngx.var.arg_rt) }
                ngx.update_time()
                local ms = string.format("%.0f", (ngx.now() - t0) * 1000)
                if reply then
                    ngx.say("OK ", reply.code_name, " ", ms)
                else
                    ngx.say("ERR ", ms, " ", err)
                end
            }
        }
        location = /access {
            access_by_lua_block {
                require("ratelimiter").access{
                    service = ngx.unescape_uri(ngx.var.arg_svc or "svc"), user = "alice",
                    failure = "closed", timeout = tonumber(ngx.var.arg_timeout) }
            }
            content_by_lua_block { ngx.say("passed") }
        }
    }
}
"""


def frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def u32(n: int) -> bytes:
    """n as a MessagePack uint32 (a valid, if not the shortest, encoding)."""
    return b"\xce" + struct.pack(">I", n)


def allowed_reply(rid: int) -> bytes:
    """[1, id, ALLOWED, 100, 99, 1000, 0], every integer a uint32: 40 bytes in all, so
    trickled at 100 ms a byte it takes 4 s."""
    return frame(b"\x97" + b"".join(u32(v) for v in (1, rid, 0, 100, 99, 1000, 0)))


def error_reply(message: bytes) -> Callable[[int], bytes]:
    """[255, id, OVERLOADED, message]: message raw bytes in a str (not necessarily UTF-8)."""
    assert len(message) < 65536
    hdr = bytes([0xa0 + len(message)]) if len(message) < 32 else (
        b"\xd9" + bytes([len(message)]) if len(message) < 256
        else b"\xda" + struct.pack(">H", len(message)))

    def answer(rid: int) -> bytes:
        return frame(b"\x94" + b"\xcc\xff" + u32(rid) + b"\x04" + hdr + message)
    return answer


class Nginx:
    def __init__(self, prefix: Path, rl_port: int):
        self.prefix = prefix
        (prefix / "tmp").mkdir(parents=True)
        self.port = harness.free_port()
        conf = prefix / "nginx.conf"
        text = CONF
        for k, v in (("@PREFIX@", str(prefix)), ("@LUA@", str(harness.REPO / "clients" / "lua")),
                     ("@RL_PORT@", str(rl_port)), ("@PORT@", str(self.port)),
                     ("@TIMEOUT@", str(TIMEOUT_MS))):
            text = text.replace(k, v)
        conf.write_text(text)
        self.log = prefix / "error.log"
        self.proc = harness.spawn([NGINX, "-p", str(prefix), "-c", str(conf), "-e",
                                   str(self.log)], prefix / "stderr.log")
        harness.wait_port(self.port, self.proc, self.log)

    def get(self, path: str):
        """(status, body, seconds the request took)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            t0 = time.monotonic()
            conn.request("GET", path)
            r = conn.getresponse()
            body = r.read().decode("utf-8", "replace")
            return r.status, body, time.monotonic() - t0
        finally:
            conn.close()

    def log_bytes(self, want: Optional[bytes] = None, wait: float = 5.0) -> bytes:
        """error.log's bytes (once it holds want, or after wait seconds)."""
        deadline = time.monotonic() + wait
        while True:
            data = self.log.read_bytes() if self.log.exists() else b""
            if want is None or want in data or time.monotonic() > deadline:
                return data
            time.sleep(0.05)

    def stop(self) -> None:
        harness.kill(self.proc)


@pytest.fixture
def setup(tmp_path):
    """make(answer, chunk, gap) -> (FakeRouter, Nginx asking it); all stopped at the end."""
    if not (Path(NGINX).exists() and Path(LUA_MODULE).exists()):
        pytest.skip("nginx with libnginx-mod-http-lua is missing")
    made = []

    def make(answer, chunk=0, gap=0.0):
        srv = FakeRouter(answer, chunk, gap)
        made.append(srv)
        ng = Nginx(tmp_path / f"nginx{len(made)}", srv.port)
        made.append(ng)
        return srv, ng
    try:
        yield make
    finally:
        for m in reversed(made):
            if isinstance(m, Nginx):
                m.stop()
            else:
                m.close()


# ---- D3: timeout is one deadline for the whole call ---------------------------------------

def test_trickled_reply_check_times_out(setup):
    srv, ng = setup(allowed_reply, chunk=1, gap=TRICKLE_S)
    assert len(allowed_reply(1)) * TRICKLE_S >= 1.7  # the trickle alone outlasts the bound
    status, body, took = ng.get("/check")
    assert status == 200, body
    assert took < BOUND_S, f"check() held the request {took:.2f} s: {body}"
    assert body.startswith("ERR "), body  # never the trickled ALLOWED
    assert "timeout" in body, body
    ms = int(body.split()[1])
    assert ms >= TIMEOUT_MS - 20, body  # it did wait for its timeout, not fail early


def test_trickled_reply_access_answers_failure_policy(setup):
    srv, ng = setup(allowed_reply, chunk=1, gap=TRICKLE_S)
    status, body, took = ng.get("/access")
    assert took < BOUND_S, f"access() held the request {took:.2f} s"
    assert status == 503, (status, body)  # failure = "closed", not the trickled ALLOWED
    log = ng.log_bytes(b"ratelimiter: service svc")
    assert b"ratelimiter: service svc: receive: timeout" in log, log.decode(errors="replace")


def test_split_reply_within_timeout_is_read(setup):
    """A reply in 4 pieces 30 ms apart (well within 300 ms) is assembled and accepted."""
    srv, ng = setup(allowed_reply, chunk=11, gap=0.03)
    status, body, took = ng.get("/check?timeout=" + SLACK_MS)
    assert status == 200 and body.startswith("OK ALLOWED"), body


def test_clean_exchange_keeps_the_connection(setup):
    srv, ng = setup(allowed_reply)
    for _ in range(3):
        status, body, _ = ng.get("/check?timeout=" + SLACK_MS)
        assert status == 200 and body.startswith("OK ALLOWED"), body
    assert srv.requests == 3
    assert len(srv.conns) == 1  # pooled after each clean exchange


def test_read_timeout_still_caps_a_read(setup):
    """The per-step options stay: read_timeout = 100 within a timeout of 5 s, against a
    server that never answers, fails after about 100 ms."""
    srv, ng = setup(lambda rid: b"")
    status, body, took = ng.get("/check?timeout=5000&rt=100")
    assert body.startswith("ERR ") and "receive: timeout" in body, body
    assert took < 2.5, f"{took:.2f} s: {body}"
    assert srv.requests == 1


# ---- D5: what a server or a client sends cannot forge a log line ------------------------

def test_error_message_cannot_forge_a_log_line(setup):
    msg = b"busy\n" + FORGED.encode() + b"\x00tail\xff\xfe\x1b[31m"
    srv, ng = setup(error_reply(msg))
    status, body, _ = ng.get("/access?timeout=" + SLACK_MS)
    assert status == 503, (status, body)  # an ERROR: the failure policy (closed)
    log = ng.log_bytes(b"router answered OVERLOADED")
    text = log.decode("utf-8", "replace")
    assert b"router answered OVERLOADED" in log, text
    for line in log.split(b"\n"):
        assert not line.startswith(FORGED.encode()), text
        assert not line.startswith(b"tail"), text
    assert b"\x00" not in log and b"\xff" not in log and b"\x1b" not in log, text
    assert (b"router answered OVERLOADED: busy\\x0a" + FORGED.encode()
            + b"\\x00tail\\xff\\xfe\\x1b[31m") in log, text


def test_error_message_is_escaped_in_the_returned_error(setup):
    srv, ng = setup(error_reply(b"busy\n" + FORGED.encode() + b"\x00"))
    status, body, _ = ng.get("/check?timeout=" + SLACK_MS)
    assert status == 200
    assert body.startswith("ERR ") and body.endswith(
        " router answered OVERLOADED: busy\\x0a" + FORGED + "\\x00\n"), body


def test_moving_is_an_error_not_a_protocol_break(setup):
    """ERROR MOVING has a 5th element, the owner (docs/PROTOCOL.md, "MOVING"): the client
    reports the server's error, as for any ERROR, not a malformed reply."""
    def answer(rid: int) -> bytes:
        return frame(msgpack.packb([255, rid, 7, "shard 5 is moving to n2", "n2"]))
    srv, ng = setup(answer)
    status, body, _ = ng.get("/check?timeout=" + SLACK_MS)
    assert status == 200
    assert body.startswith("ERR ") and body.endswith(
        " router answered MOVING: shard 5 is moving to n2\n"), body


def test_long_error_message_is_cut(setup):
    srv, ng = setup(error_reply(b"x" * 300 + b"\n" + b"y" * 3000))
    status, body, _ = ng.get("/access?timeout=" + SLACK_MS)
    assert status == 503
    log = ng.log_bytes(b"router answered OVERLOADED")
    lines = [ln for ln in log.split(b"\n") if b"router answered OVERLOADED" in ln]
    assert len(lines) == 1, log
    assert b"x" * 256 + b"..." in lines[0], lines[0]
    assert b"x" * 257 not in lines[0] and b"y" not in lines[0].split(b"OVERLOADED")[1], lines[0]
    assert len(lines[0]) < 1024, len(lines[0])


def test_service_from_the_request_cannot_forge_a_log_line(setup):
    """A service taken from the request (here the query string, unescaped) that is too long
    is refused as a bad argument and logged: escaped, cut."""
    svc = "s\n" + FORGED + "\x01" + "z" * 200
    srv, ng = setup(allowed_reply)
    status, body, _ = ng.get("/access?svc=" + urllib.parse.quote(svc, safe=""))
    assert status == 503, (status, body)  # a bad argument: no reply, the failure policy
    log = ng.log_bytes(b"bad argument")
    text = log.decode("utf-8", "replace")
    assert b"bad argument: service" in log, text
    for line in log.split(b"\n"):
        assert not line.startswith(FORGED.encode()), text
    assert (b"ratelimiter: service s\\x0a" + FORGED.encode() + b"\\x01") in log, text
    logged = log.split(b"ratelimiter: service ", 1)[1].split(b": bad argument", 1)[0]
    assert logged.endswith(b"z" * 81 + b"..."), text  # 128 bytes of it, then "..."
    assert srv.requests == 0
