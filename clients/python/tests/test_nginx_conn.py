"""The OpenResty client's cluster-wide limit_conn (clients/lua/ratelimiter.lua: conn_access in
the access phase, conn_log in the log phase) in a real nginx (Debian's nginx with
libnginx-mod-http-lua) under real HTTP load, in front of an upstream that counts the
requests it holds at once; and the slot helpers of the Python client on the same cluster.

20 concurrent slow requests of one user against `concurrency 5`: the upstream sees exactly
5 of them (counted in its handler: the most it ever held at once, and how many came in),
the 15 others are answered 429 by nginx, and once the 5 are done their slots are given back
(a peek shows 5 free), so a second wave gets exactly 5 again; two nginx asking two routers
share the 5. A request whose upstream fails gives its slot back too. No assertion on time: each wait has a generous bound."""

import http.client
import shutil
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import harness
import ratelimiter
from ratelimiter import Client, Code, Limited

pytestmark = pytest.mark.integration

NGINX = "/usr/sbin/nginx"
LUA_MODULE = "/usr/lib/nginx/modules/ngx_http_lua_module.so"
WAIT = 60.0  # the bound of every wait (a loaded machine), never an assertion

# [clients] adjust = no: nobody may refund, so the routers' deny cache is in force (it
# keeps refusals of other rules; never those of a concurrency rule, which RELEASE undoes)
SERVICES = "[service export]\nlimit = concurrency 5 lease 1h\n[clients]\nadjust = no\n"


class Upstream:
    """An HTTP server whose handler holds each request until `go` is set, counting those
    inside at once (`inside`, its maximum `most`) and those that came in (`came`).
    /fail/ answers by closing the connection at once."""

    def __init__(self):
        self.lock = threading.Lock()
        self.inside = self.most = self.came = 0
        self.go = threading.Event()
        up = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                with up.lock:
                    up.inside += 1
                    up.came += 1
                    up.most = max(up.most, up.inside)
                try:
                    if self.path.startswith("/fail/"):
                        self.close_connection = True
                        self.connection.shutdown(2)
                        return
                    up.go.wait(WAIT)
                    body = b"ok\n"
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                finally:
                    with up.lock:
                        up.inside -= 1

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def reset(self):
        with self.lock:
            self.most = self.came = 0
        self.go.clear()

    def stop(self):
        self.go.set()
        self.server.shutdown()


CONF = """\
load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;
daemon off;
master_process off;
worker_processes 1;
error_log {prefix}/error.log warn;
pid {prefix}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/tmp/body;
    proxy_temp_path {prefix}/tmp/proxy;
    fastcgi_temp_path {prefix}/tmp/fastcgi;
    uwsgi_temp_path {prefix}/tmp/uwsgi;
    scgi_temp_path {prefix}/tmp/scgi;
    lua_package_path "{lua}/?.lua;;";
    init_by_lua_block {{
        require("ratelimiter").configure{{ host = "127.0.0.1", port = {rl_port},
                                           timeout = 5000, failure = "closed" }}
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            access_by_lua_block {{
                require("ratelimiter").conn_access{{ service = "export",
                                                     user = ngx.var.http_x_user }}
            }}
            log_by_lua_block {{ require("ratelimiter").conn_log() }}
            proxy_read_timeout 120s;
            proxy_pass http://127.0.0.1:{up};
        }}
        location = /enc {{
            content_by_lua_block {{
                local rl = require "ratelimiter"
                local out = {{}}
                for _, d in ipairs{{ 0, 5, 127, 128, -1, -32, -33, -128, -129, -32768,
                                     -32769, -1000000, 1000000 }} do
                    out[#out + 1] = ngx.encode_base64(rl._enc_keyed(9, 7, "s", "u", nil, d))
                end
                ngx.say(table.concat(out, " "))
            }}
        }}
    }}
}}
"""


def start_nginx(d, name, rl_port, up):
    """An nginx (prefix d/name) whose module asks the router on rl_port: (process, port)."""
    prefix = d / name
    (prefix / "tmp").mkdir(parents=True)
    ng_port = harness.free_port()
    conf = prefix / "nginx.conf"
    conf.write_text(CONF.format(prefix=prefix, lua=harness.REPO / "clients" / "lua",
                                rl_port=rl_port, port=ng_port, up=up.port))
    ng = harness.spawn([NGINX, "-p", str(prefix), "-c", str(conf), "-e",
                        str(prefix / "error.log")], prefix / "stderr.log")
    harness.wait_port(ng_port, ng, prefix / "error.log")
    return ng, ng_port


def start_router2(c, d):
    """A second router on the same nodes (static membership): its port, once it answers
    from a node rather than by its failure policy."""
    port = harness.free_port()
    r2 = harness.spawn([str(harness.BUILD / "rl-router"), "--config", str(c.conf), "--listen",
                        f"127.0.0.1:{port}", "--metrics", "off"], d / "router2.log")
    harness.wait_port(port, r2, d / "router2.log")
    with Client("127.0.0.1", port, timeout=5) as cl:
        until(lambda: cl.check("export", "__ready__", cost=0).code != Code.FAIL_OPEN,
              "the second router reaches the node")
    return r2, port


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    if not (Path(NGINX).exists() and Path(LUA_MODULE).exists()):
        pytest.skip("nginx with libnginx-mod-http-lua is missing")
    harness.need_binaries("rl-node", "rl-router")
    d = tmp_path_factory.mktemp("ngconn")
    c = harness.Cluster(d / "cluster", extra=SERVICES).start()
    port = c.port  # the router: CHECK and RELEASE forwarded to the node owning the key
    up = Upstream()
    ng, ng_port = start_nginx(d, "nginx", port, up)
    yield c, port, up, ng_port, d
    harness.kill(ng)
    up.stop()
    c.stop()


def get(port, path, user, out, i):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT * 2)
    try:
        conn.request("GET", path, headers={"X-User": user})
        r = conn.getresponse()
        r.read()
        out[i] = (r.status, r.getheader("Retry-After"))
    except OSError as e:
        out[i] = ("error", str(e))
    finally:
        conn.close()


def until(pred, what):
    deadline = time.monotonic() + WAIT
    while not pred():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.02)


def free_slots(port, user):
    with Client("127.0.0.1", port, timeout=5) as c:
        return c.check("export", user, cost=0).remaining  # a peek: N minus the slots held


def wave(setup, user, n=20, ports=None):
    """n concurrent requests of user, spread over the nginx ports (default: the first
    nginx): returns their (status, Retry-After) and how many the upstream held at once."""
    c, port, up, ng_port, d = setup
    ports = ports or [ng_port]
    up.reset()
    out = [None] * n
    threads = [threading.Thread(target=get, args=(ports[i % len(ports)], f"/x/{i}", user, out,
                                                  i))
               for i in range(n)]
    for t in threads:
        t.start()
    # every request is either held upstream or answered: then nothing else can come in
    until(lambda: up.inside + sum(1 for o in out if o is not None) == n,
          "every request upstream or answered")
    held = up.inside
    up.go.set()
    for t in threads:
        t.join(WAIT * 2)
    return out, held


def test_twenty_concurrent_requests_five_upstream(setup):
    c, port, up, ng_port, d = setup
    for round_ in range(2):
        out, held = wave(setup, "alice")
        statuses = sorted(o[0] for o in out)
        assert held == 5 and up.most == 5 and up.came == 5, (held, up.most, up.came, out)
        assert statuses == [200] * 5 + [429] * 15, out
        assert all(o[1] is not None and int(o[1]) > 0 for o in out if o[0] == 429)
        # the log phase gives the five slots back (a RELEASE from a timer)
        until(lambda: free_slots(port, "alice") == 5, f"round {round_}: 5 slots free again")
    # another user has slots of its own meanwhile
    assert free_slots(port, "bob") == 5


def test_two_gateways_two_routers_share_the_slots(setup):
    """The limit is the cluster's: two nginx, each asking its own router, 10 requests each
    at once against concurrency 5: exactly 5 upstream in all."""
    c, port, up, ng_port, d = setup
    r2, port2 = start_router2(c, d)
    ng2, ng2_port = start_nginx(d, "nginx2", port2, up)
    try:
        out, held = wave(setup, "frank", ports=[ng_port, ng2_port])
        assert held == 5 and up.most == 5 and up.came == 5, (held, up.most, up.came, out)
        assert sorted(o[0] for o in out) == [200] * 5 + [429] * 15, out
        until(lambda: free_slots(port, "frank") == 5 and free_slots(port2, "frank") == 5,
              "the slots given back through both routers")
    finally:
        harness.kill(ng2)
        harness.kill(r2)


def test_a_failed_upstream_gives_its_slot_back(setup):
    c, port, up, ng_port, d = setup
    up.reset()
    out = [None]
    get(ng_port, "/fail/1", "carol", out, 0)
    assert out[0][0] == 502 and up.came == 1
    until(lambda: free_slots(port, "carol") == 5, "the failed request's slot given back")


def test_signed_encoding_matches_msgpack(setup):
    import base64

    msgpack = pytest.importorskip("msgpack")
    c, port, up, ng_port, d = setup
    conn = http.client.HTTPConnection("127.0.0.1", ng_port, timeout=10)
    conn.request("GET", "/enc")
    body = conn.getresponse().read().decode().split()
    conn.close()
    deltas = [0, 5, 127, 128, -1, -32, -33, -128, -129, -32768, -32769, -1000000, 1000000]
    for d, b in zip(deltas, body):
        frame = base64.b64decode(b)
        assert msgpack.unpackb(frame[4:]) == [9, 7, "s", "u", None, d]


def test_python_slot_on_the_same_rule(setup):
    c, port, up, ng_port, d = setup
    with Client("127.0.0.1", port) as cl:
        with cl.slot("export", "dave", count=3) as r:
            assert r.code == Code.ALLOWED and r.remaining == 2
            with pytest.raises(Limited) as e:
                with cl.slot("export", "dave", count=3):
                    pytest.fail("the block must not run")
            assert e.value.reply.code == Code.LIMITED
            with pytest.raises(RuntimeError):
                with cl.slot("export", "dave", count=2) as r2:
                    assert r2.remaining == 0
                    raise RuntimeError("the work failed")
            assert free_slots(port, "dave") == 2  # given back on the exception
        assert free_slots(port, "dave") == 5


def test_async_slot_on_the_same_rule(setup):
    import asyncio

    c, port, up, ng_port, d = setup

    async def run():
        async with ratelimiter.AsyncClient("127.0.0.1", port) as cl:
            async with cl.slot("export", "erin", count=4) as r:
                assert r.remaining == 1
                with pytest.raises(Limited):
                    async with cl.slot("export", "erin", count=2):
                        pytest.fail("the block must not run")
                with pytest.raises(KeyError):
                    async with cl.slot("export", "erin"):
                        raise KeyError("the work failed")
                assert (await cl.check("export", "erin", cost=0)).remaining == 1
            assert (await cl.check("export", "erin", cost=0)).remaining == 5

    asyncio.run(run())
