"""The gRPC front's runtime features (docs/ENVOY.md): grpc-timeout, bearer-token
authentication, response_headers_to_add, and its metrics; against real routers and nodes,
with grpcio as Envoy would call, and a raw HTTP/2 client (the h2 package) for what grpcio
will not send."""

import signal
import socket
import subprocess
import time

import pytest

import harness
from rls_harness import METHOD, Caller, metrics_text, request, rls_cluster, running

pytestmark = pytest.mark.integration

grpc = pytest.importorskip("grpc")
h2 = pytest.importorskip("h2")
import h2.config  # noqa: E402
import h2.connection  # noqa: E402
import h2.events  # noqa: E402


EDGE = """\
domain: edge
descriptors:
  - key: k
    rate_limit:
      unit: hour
      requests_per_unit: 3
  - key: m
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: year
    rate_limit:
      unit: year
      requests_per_unit: 10
  - key: det
    detailed_metric: true
    rate_limit:
      unit: hour
      requests_per_unit: 2
  - key: sh
    shadow_mode: true
    rate_limit:
      unit: hour
      requests_per_unit: 1
  - key: n
    rate_limit:
      name: per-n
      unit: minute
      requests_per_unit: 1
"""


def gen_token(path):
    out = subprocess.run([str(harness.BUILD / "rl-cli"), "gen-token", str(path)],
                         check=True, capture_output=True, text=True).stdout
    return out.strip().split("=", 1)[1].strip()


def start(d, router="", extra="", deadline="200ms", nodes=("a",), token=None):
    """A router with [router] rls (and metrics) on envoy_config EDGE, and its nodes."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "edge.yaml").write_text(EDGE)
    return rls_cluster(d, "edge.yaml", nodes=nodes, extra=extra, deadline=deadline,
                       router=router, metrics=True, token=token,
                       binaries=("rl-node", "rl-router", "rl-cli"))


class Raw:
    """One call over a raw HTTP/2 connection, with the headers given."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), 5)
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.h2.initiate_connection()
        self.sock.sendall(self.h2.data_to_send())

    def call(self, body, extra_headers, sid=1, timeout=3.0):
        """(headers, trailers) of the answer: lists of (name, value) as str."""
        self.h2.send_headers(sid, [(":method", "POST"), (":scheme", "http"), (":path", METHOD),
                                   (":authority", "x"), ("content-type", "application/grpc"),
                                   ("te", "trailers")] + extra_headers)
        self.h2.send_data(sid, b"\0" + len(body).to_bytes(4, "big") + body, end_stream=True)
        self.sock.sendall(self.h2.data_to_send())
        heads, trailers = [], []
        end = time.monotonic() + timeout
        self.sock.settimeout(timeout)
        while time.monotonic() < end:
            data = self.sock.recv(65536)
            if not data:
                break
            for ev in self.h2.receive_data(data):
                if isinstance(ev, h2.events.ResponseReceived) and ev.stream_id == sid:
                    heads = [(k.decode(), v.decode()) for k, v in ev.headers]
                elif isinstance(ev, h2.events.TrailersReceived) and ev.stream_id == sid:
                    trailers = [(k.decode(), v.decode()) for k, v in ev.headers]
                elif isinstance(ev, h2.events.StreamEnded) and ev.stream_id == sid:
                    self.sock.sendall(self.h2.data_to_send())
                    return heads, trailers
            self.sock.sendall(self.h2.data_to_send())
        raise AssertionError("no complete answer")

    def close(self):
        self.sock.close()


def grpc_status(heads, trailers):
    for k, v in trailers + heads:
        if k == "grpc-status":
            return int(v)
    return None


def metric(c, name, labels="", page=None):
    """The value of series name{labels} (labels as written, without braces) on page, else on
    a page scraped now; 0 if absent."""
    want = f"{name}{{{labels}}}" if labels else name
    for line in (page if page is not None else metrics_text(c)).splitlines():
        if line.startswith(want + " "):
            return float(line.split()[-1])
    return 0.0


# How old a page a scrape may be served (docs/OPERATIONS.md, "Metrics"): a page that cost 1
# ms or more to make is served again for 50 times that, at most 1 s, without asking the
# router. Under a sanitizer this page costs about that, so a scrape right after a change can
# show the figures from before it.
PAGE_MAX_AGE = 1.0


def page_since(c, since, done):
    """A /metrics page made after `since` (time.monotonic() once the change was complete):
    the first page for which done(page) holds, else the first scraped more than PAGE_MAX_AGE
    after `since`, which the cache can no longer have made before it. The caller asserts its
    figures on it."""
    while True:
        t = time.monotonic()
        page = metrics_text(c)
        if done(page) or t - since > PAGE_MAX_AGE:
            return page
        time.sleep(0.05)


# ---- grpc-timeout ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def slow(tmp_path_factory):
    """A router whose deadline (3 s) is far past the calls' grpc-timeout."""
    yield from running(start(tmp_path_factory.mktemp("timeout") / "c", deadline="3s"))


@pytest.fixture(scope="module")
def slow_error(tmp_path_factory):
    """The same with [router] rls_failure = error."""
    yield from running(start(tmp_path_factory.mktemp("timeout_err") / "c", deadline="3s",
                             router="rls_failure = error\n"))


def frozen(c):
    """The node stops answering (SIGSTOP) while its connection stays open."""
    class Freeze:
        def __enter__(self):
            for p in c.nodes.values():
                p.send_signal(signal.SIGSTOP)

        def __exit__(self, *a):
            for p in c.nodes.values():
                p.send_signal(signal.SIGCONT)
    return Freeze()


def test_grpc_timeout_answers_before_envoy_gives_up(slow, pb):
    call = Caller(slow.rls_port, pb)
    try:
        assert call("edge", [("k", "warm")]).overall_code == pb.RateLimitResponse.OK
        with frozen(slow):
            t0 = time.monotonic()
            # grpcio sends grpc-timeout for its 1 s; the router's deadline is 3 s
            r = call("edge", [("k", "t1")], [("m", "t1")], [("nothing", "x")], timeout=1.0)
            took = time.monotonic() - t0
        # inline_failure = open: parts without a decision are OK, the call is answered
        assert r.overall_code == pb.RateLimitResponse.OK
        assert [s.code for s in r.statuses] == [pb.RateLimitResponse.OK] * 3
        assert r.statuses[0].current_limit.requests_per_unit == 3
        # answered at all: grpcio raises DEADLINE_EXCEEDED at its 1 s otherwise (how long
        # it took is printed only: a loaded machine moves it)
        print(f"answered in {took:.3f} s under a 1 s grpc-timeout")
        page = page_since(slow, time.monotonic(),
                          lambda p: metric(slow, "rl_router_rls_timeouts_total", page=p) >= 1)
        assert metric(slow, "rl_router_rls_timeouts_total", page=page) >= 1
        # a grpc-timeout past the router's deadline changes nothing: answered by the node
        r = call("edge", [("k", "t2")], timeout=10)
        assert r.statuses[0].limit_remaining == 2
    finally:
        call.close()


def test_grpc_timeout_with_rls_failure_error_is_unavailable(slow_error, pb):
    call = Caller(slow_error.rls_port, pb)
    try:
        assert call("edge", [("k", "warm")]).overall_code == pb.RateLimitResponse.OK
        with frozen(slow_error):
            with pytest.raises(grpc.RpcError) as e:
                call("edge", [("k", "t1")], timeout=1.0)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "rls_failure" in e.value.details()
        # a call with nothing to ask a node is not a failure
        with frozen(slow_error):
            r = call("edge", [("nothing", "x")], timeout=1.0)
        assert r.overall_code == pb.RateLimitResponse.OK
        # nor is a limit no CHECK can carry (unit: year), answered by inline_failure
        r = call("edge", [("year", "y")], timeout=1)
        assert r.overall_code == pb.RateLimitResponse.OK
    finally:
        call.close()


def test_malformed_grpc_timeout_is_invalid_argument(slow, pb):
    body = pb.RateLimitRequest(domain="edge").SerializeToString()
    req = request(pb, "edge", [("k", "malformed")])
    body = req.SerializeToString()
    raw = Raw(slow.rls_port)
    try:
        for sid, bad in ((1, "20"), (3, "x20m"), (5, "123456789m"), (7, "20s"), (9, "m")):
            heads, trailers = raw.call(body, [("grpc-timeout", bad)], sid=sid)
            assert grpc_status(heads, trailers) == 3, bad  # INVALID_ARGUMENT
        heads, trailers = raw.call(body, [("grpc-timeout", "20000000n")], sid=11)
        assert grpc_status(heads, trailers) == 0
    finally:
        raw.close()


# ---- bearer tokens -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def authed(tmp_path_factory):
    """A router with [client] sections: web may use the configured service fw only, ops every
    service (so inline limits)."""
    d = tmp_path_factory.mktemp("auth")
    web, ops = d / "web.token", d / "ops.token"
    extra = (f"[client web]\ntoken_sha256 = {gen_token(web)}\nservices = fw\n\n"
             f"[client ops]\ntoken_sha256 = {gen_token(ops)}\nservices = *\nstats = yes\n")
    c = start(d / "c", extra=extra, token=ops.read_bytes().strip())
    c.web = web.read_text().strip()
    c.ops = ops.read_text().strip()
    c.ops_file = ops
    yield c
    c.stop()


def bearer(token):
    return [("authorization", f"Bearer {token}")]


def test_calls_need_a_client_token(authed, pb):
    call = Caller(authed.rls_port, pb)
    try:
        before = metric(authed, "rl_router_errors_total", 'kind="auth"')
        r = call("edge", [("k", "auth1")], metadata=bearer(authed.ops))
        assert r.overall_code == pb.RateLimitResponse.OK
        assert r.statuses[0].limit_remaining == 2
        with pytest.raises(grpc.RpcError) as e:
            call("edge", [("k", "auth1")])
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "Bearer" in e.value.details()
        with pytest.raises(grpc.RpcError) as e:
            call("edge", [("k", "auth1")], metadata=bearer("not-a-token-of-anyone-at-all"))
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "not-a-token" not in e.value.details()
        with pytest.raises(grpc.RpcError) as e:  # not "Bearer"
            call("edge", [("k", "auth1")], metadata=[("authorization", f"Basic {authed.ops}")])
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        # web's token names configured services only: no inline limits, as on the binary
        # protocol
        with pytest.raises(grpc.RpcError) as e:
            call("edge", [("k", "auth1")], metadata=bearer(authed.web))
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
        # none of the refused calls counted against the limit
        r = call("edge", [("k", "auth1")], metadata=bearer(authed.ops))
        assert r.statuses[0].limit_remaining == 1

        def auth_errors(p):
            return metric(authed, "rl_router_errors_total", 'kind="auth"', page=p) - before
        page = page_since(authed, time.monotonic(), lambda p: auth_errors(p) == 3)
        assert auth_errors(page) == 3
        assert metric(authed, "rl_router_rls_auth_failures_total", page=page) >= 3
        log = (authed.dir / "router.log").read_text()
        assert authed.ops not in log and authed.web not in log
    finally:
        call.close()


def test_failed_tokens_slow_the_address_down_for_every_protocol(authed, pb):
    import ratelimiter

    call = Caller(authed.rls_port, pb)
    try:
        time.sleep(2.5)  # earlier failures forgiven
        for _ in range(12):
            with pytest.raises(grpc.RpcError):
                call("edge", [("k", "slow")], metadata=bearer("wrong-token-guessed-badly"))
        # past 10 failures at once: even the right token waits
        with pytest.raises(grpc.RpcError) as e:
            call("edge", [("k", "slow")], metadata=bearer(authed.ops))
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "too many failed" in e.value.details()
        # the binary protocol's AUTH from this address shares the count
        with pytest.raises(ratelimiter.AuthError):
            with ratelimiter.Client("127.0.0.1", authed.port, 1.0,
                                    token_file=str(authed.ops_file)) as c:
                c.check("fw", "x")
        time.sleep(1.0)
        r = call("edge", [("k", "slow")], metadata=bearer(authed.ops))
        assert r.overall_code == pb.RateLimitResponse.OK
    finally:
        call.close()


# ---- response_headers_to_add -------------------------------------------------------------------


@pytest.fixture(scope="module")
def hdr_ratelimit(tmp_path_factory):
    yield from running(start(tmp_path_factory.mktemp("hdr") / "c",
                             router="rls_headers = ratelimit\n"))


@pytest.fixture(scope="module")
def hdr_draft(tmp_path_factory):
    yield from running(start(tmp_path_factory.mktemp("hdrd") / "c",
                             router="rls_headers = draft\n"))


def headers_of(r):
    return {h.key: h.value for h in r.response_headers_to_add}


def test_no_headers_by_default(slow, pb):
    call = Caller(slow.rls_port, pb)
    try:
        r = call("edge", [("k", "h0")])
        assert r.statuses[0].HasField("current_limit")
        assert len(r.response_headers_to_add) == 0
    finally:
        call.close()


def test_ratelimit_headers_of_the_most_restrictive_limit(hdr_ratelimit, pb):
    call = Caller(hdr_ratelimit.rls_port, pb)
    try:
        # k: 3 an hour (2 left after this call), m: 10 a minute (9 left): k is the tightest
        r = call("edge", [("m", "h1")], [("k", "h1")], [("nothing", "x")])
        h = headers_of(r)
        assert set(h) == {"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"}
        assert h["RateLimit-Limit"] == "3" and h["RateLimit-Remaining"] == "2"
        assert 0 < int(h["RateLimit-Reset"]) <= 3600
        # over the limit: 0 left, that one is shown
        r = call("edge", [("k", "h2")], [("n", "h1")])
        r = call("edge", [("k", "h2")], [("n", "h1")])
        assert r.overall_code == pb.RateLimitResponse.OVER_LIMIT
        h = headers_of(r)
        assert h["RateLimit-Limit"] == "1" and h["RateLimit-Remaining"] == "0"
        assert 0 < int(h["RateLimit-Reset"]) <= 60
        # nothing limited: no headers
        r = call("edge", [("nothing", "x")])
        assert len(r.response_headers_to_add) == 0
    finally:
        call.close()


def test_draft_headers(hdr_draft, pb):
    import re

    call = Caller(hdr_draft.rls_port, pb)
    try:
        r = call("edge", [("m", "d1")], [("k", "d1")])
        h = headers_of(r)
        assert set(h) == {"RateLimit-Policy", "RateLimit"}
        assert h["RateLimit-Policy"] == '"default";q=3;w=3600'
        m = re.fullmatch(r'"default";r=2;t=(\d+)', h["RateLimit"])
        assert m and 0 < int(m.group(1)) <= 3600
        r = call("edge", [("n", "d1")])
        h = headers_of(r)
        assert h["RateLimit-Policy"] == '"per-n";q=1;w=60'
        assert re.fullmatch(r'"per-n";r=0;t=\d+', h["RateLimit"])
    finally:
        call.close()


# ---- metrics and STATS -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def counted(tmp_path_factory):
    yield from running(start(tmp_path_factory.mktemp("met") / "c"))


def test_calls_counted_by_domain_and_result(counted, pb):
    call = Caller(counted.rls_port, pb)
    try:
        for _ in range(3):
            call("edge", [("k", "m1")])
        r = call("edge", [("k", "m1")])
        assert r.overall_code == pb.RateLimitResponse.OVER_LIMIT
        call("edge", [("sh", "x")])
        r = call("edge", [("sh", "x")])  # over, but shadow_mode
        assert r.overall_code == pb.RateLimitResponse.OK
        call("nowhere", [("k", "m1")])
        with pytest.raises(grpc.RpcError):
            call("edge")  # no descriptor: an error, in a known domain
        with pytest.raises(grpc.RpcError):
            call("", [("k", "x")])

        def val(domain, result, p):
            return metric(counted, "rl_router_rls_domain_calls_total",
                          f'domain="{domain}",result="{result}"', page=p)
        page = page_since(counted, time.monotonic(), lambda p: val("", "error", p) == 1)
        assert val("edge", "ok", page) == 4  # 3 on k, the first on sh
        assert val("edge", "over_limit", page) == 1
        assert val("edge", "shadow", page) == 1
        assert val("edge", "error", page) == 1
        assert val("", "unknown_domain", page) == 1
        assert val("", "error", page) == 1
        assert 'domain="nowhere"' not in page  # a client's domain is no series of its own
    finally:
        call.close()


def test_detailed_metric_counts_hits_by_full_key(counted, pb):
    call = Caller(counted.rls_port, pb)
    try:
        call("edge", [("k", "not-detailed")])
        for _ in range(3):
            call("edge", [("det", "a")])
        call("edge", [("det", "b")])
        # a value holding a NUL byte is its own key, the NUL written \u0000 (escaped once
        # more as a label value)
        call("edge", [("det", "b\0x")])

        def val(key, result, p):
            return metric(counted, "rl_router_rls_detailed_hits_total",
                          f'key="{key}",result="{result}"', page=p)
        # a page with the last call's count has every call's before it
        page = page_since(counted, time.monotonic(),
                          lambda p: val("edge.det_b\\\\u0000x", "within_limit", p) == 1)
        assert val("edge.det_a", "within_limit", page) == 2
        assert val("edge.det_a", "over_limit", page) == 1
        assert val("edge.det_b", "within_limit", page) == 1
        assert "not-detailed" not in page
    finally:
        call.close()


def test_streams_refused_and_reset_are_counted(counted, pb):
    import ratelimiter

    before = {ev: metric(counted, "rl_router_rls_streams_total", f'event="{ev}"')
              for ev in ("refused", "reset_by_server", "reset_by_client")}
    raw = Raw(counted.rls_port)
    try:
        # 101 streams opened before the server's SETTINGS are read: the 101st is refused
        for i in range(101):
            raw.h2.send_headers(1 + 2 * i, [(":method", "POST"), (":scheme", "http"),
                                            (":path", METHOD), (":authority", "x"),
                                            ("content-type", "application/grpc")])
        raw.h2.reset_stream(1)  # and the client resets its first
        raw.sock.sendall(raw.h2.data_to_send())
        time.sleep(0.5)
    finally:
        raw.close()
    raw = Raw(counted.rls_port)
    try:
        # a request whose headers pass 16 KiB is reset by the router
        raw.h2.send_headers(1, [(":method", "POST"), (":scheme", "http"), (":path", METHOD),
                                (":authority", "x"), ("content-type", "application/grpc"),
                                ("x-big", "a" * 20000)])
        raw.sock.sendall(raw.h2.data_to_send())
        time.sleep(0.5)
    finally:
        raw.close()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        after = {ev: metric(counted, "rl_router_rls_streams_total", f'event="{ev}"')
                 for ev in before}
        if all(after[ev] > before[ev] for ev in before):
            break
        time.sleep(0.1)
    assert after["refused"] - before["refused"] >= 1
    assert after["reset_by_server"] - before["reset_by_server"] == 1
    assert after["reset_by_client"] - before["reset_by_client"] == 1
    with ratelimiter.Client("127.0.0.1", counted.port, 2.0) as c:
        st0 = c.stats()
    call = Caller(counted.rls_port, pb)  # one call answered, one in error: STATS counts both
    try:
        call("edge", [("k", "streams")])
        with pytest.raises(grpc.RpcError):
            call("edge")
    finally:
        call.close()
    with ratelimiter.Client("127.0.0.1", counted.port, 2.0) as c:
        st = c.stats()
    assert st["rls_streams_refused"] >= 1
    assert st["rls_calls_ok"] - st0["rls_calls_ok"] == 1
    assert st["rls_calls_error"] - st0["rls_calls_error"] == 1
    assert st["rls_connections"] >= 0


def test_router_stops_cleanly_with_timed_calls_and_tables(tmp_path, pb):
    """SIGTERM with calls waiting for their grpc-timeout (node frozen), detailed and domain
    tables filled, an authenticated front: exit 0 and, in an ASan build, no leak report."""
    d = tmp_path / "stop"
    d.mkdir()
    tok = d / "ops.token"
    extra = f"[client ops]\ntoken_sha256 = {gen_token(tok)}\nservices = *\n"
    c = start(d / "c", extra=extra, deadline="5s", token=tok.read_bytes().strip(),
              router="rls_headers = draft\n")
    call = Caller(c.rls_port, pb)
    try:
        md = bearer(tok.read_text().strip())
        call("edge", [("det", "s")], [("k", "s")], metadata=md)
        with pytest.raises(grpc.RpcError):
            call("edge", [("k", "s")])
        with frozen(c):
            futs = [call.stub.future(call.request("edge", [("k", f"s{i}")]), timeout=3,
                                     metadata=md) for i in range(20)]
            time.sleep(0.3)
            c.router.send_signal(signal.SIGTERM)
            assert c.router.wait(timeout=10) == 0
        for f in futs:
            try:
                f.result()
            except grpc.RpcError:
                pass
        log = (c.dir / "router.log").read_text()
        assert "Sanitizer" not in log and "runtime error" not in log, log[-2000:]
        c.router = None
    finally:
        call.close()
        c.stop()


def test_tokens_let_the_front_listen_beyond_loopback(tmp_path, pb):
    """With [client] sections the gRPC front authenticates, so a non-loopback [router] rls
    needs no [cluster] insecure (without them rl-router refuses it: check_daemon)."""
    harness.need_binaries("rl-node", "rl-router", "rl-cli")
    d = tmp_path / "wide"
    d.mkdir()
    tok = d / "ops.token"
    (d / "edge.yaml").write_text(EDGE)
    c = harness.Cluster(d, extra=f"[client ops]\ntoken_sha256 = {gen_token(tok)}\n"
                                 "services = *\n")
    c.ready_token = tok.read_bytes().strip()
    port = harness.free_port()
    text = c.conf.read_text()
    text = text.replace("[cluster]\n", "[cluster]\nenvoy_config = edge.yaml\n", 1)
    text = text.replace("[router]\n", f"[router]\nrls = 0.0.0.0:{port}\n", 1)
    c.conf.write_text(text)
    c.start()
    call = Caller(port, pb)
    try:
        harness.wait_port(port, c.router, c.dir / "router.log")
        with pytest.raises(grpc.RpcError) as e:
            call("edge", [("k", "wide")])
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        call.close()
        c.stop()
