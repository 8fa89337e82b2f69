"""The gRPC front (docs/ENVOY.md) end to end: a real rl-node and rl-router with [router] rls
and an envoy_config, called by grpcio (python3-grpc) as Envoy calls it. Each test asserts
what the router decides: the descriptors' codes and remaining counts, upstream's special
cases (an unknown domain, shadow_mode, unlimited, a RateLimitOverride, several limits on a
descriptor, `replaces`), the error statuses, the headers of [router] rls_headers, a call
answered at its grpc-timeout by the failure policy while its node is stopped, a pushed
config taking over while the old one stays with the calls that hold it, and the counters
(STATS and /metrics: by result, by domain, detailed_metric keys, timeouts)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import grpc
import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "clients" / "python" / "tests"))
import harness  # noqa: E402

PROTOS = ["envoy/service/ratelimit/v3/rls.proto",
          "envoy/extensions/common/ratelimit/v3/ratelimit.proto",
          "envoy/config/core/v3/base.proto", "envoy/type/v3/ratelimit_unit.proto"]
_gen = tempfile.mkdtemp(prefix="rls-pb-")
subprocess.run(["protoc", "-I" + str(REPO / "proto"), "-I/usr/include", "--python_out=" + _gen]
               + PROTOS, check=True)
sys.path.insert(0, _gen)
from envoy.service.ratelimit.v3 import rls_pb2  # noqa: E402
from envoy.type.v3 import ratelimit_unit_pb2  # noqa: E402

OK = rls_pb2.RateLimitResponse.OK
OVER = rls_pb2.RateLimitResponse.OVER_LIMIT

EDGE = """
domain: edge
descriptors:
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: 3
  - key: shadow
    shadow_mode: true
    rate_limit:
      unit: hour
      requests_per_unit: 1
  - key: free
    rate_limit:
      unlimited: true
  - key: detailed
    detailed_metric: true
    rate_limit:
      unit: hour
      requests_per_unit: 1
  - key: two
    rate_limit:
      - name: small
        unit: hour
        requests_per_unit: 2
      - name: big
        unit: day
        requests_per_unit: 10
  - key: bucket
    rate_limit:
      unit: hour
      requests_per_unit: 100
      algorithm: token_bucket
      burst: 2
  - key: plan
    rate_limit:
      name: plan
      unit: hour
      requests_per_unit: 1
  - key: vip
    rate_limit:
      unit: hour
      requests_per_unit: 5
      replaces:
        - name: plan
"""


def uid() -> str:
    return uuid.uuid4().hex[:12]


class Rls:
    def __init__(self, tmp: Path) -> None:
        self.dir = tmp
        self.nport, self.rport = harness.free_port(), harness.free_port()
        self.gport, self.mport = harness.free_port(), harness.free_port()
        (tmp / "envoy").mkdir()
        (tmp / "envoy" / "edge.yaml").write_text(EDGE)
        self.conf = tmp / "cluster.conf"
        self.conf.write_text(
            "[cluster]\nname = rls\nsession_timeout = 2s\nshards = 64\n"
            f"envoy_config = {tmp / 'envoy'}\n"
            f"[router]\nlisten = 127.0.0.1:{self.rport}\nrls = 127.0.0.1:{self.gport}\n"
            f"metrics = 127.0.0.1:{self.mport}\ndeadline = 500ms\nworkers = 2\n"
            "rls_headers = ratelimit\n"
            f"[node a]\nlisten = 127.0.0.1:{self.nport}\nmemory = 64mb\n")

    def start(self) -> "Rls":
        harness.need_binaries("rl-node", "rl-router")
        self.node = harness.spawn([str(harness.BUILD / "rl-node"), "--config", str(self.conf),
                                   "--name", "a", "--metrics", "off"], self.dir / "node.log")
        harness.wait_port(self.nport, self.node, self.dir / "node.log")
        self.router = harness.spawn([str(harness.BUILD / "rl-router"), "--config",
                                     str(self.conf)], self.dir / "router.log")
        harness.wait_port(self.gport, self.router, self.dir / "router.log")
        self.chan = grpc.insecure_channel(f"127.0.0.1:{self.gport}")
        self.call_fn = self.chan.unary_unary(
            "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
            request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
            response_deserializer=rls_pb2.RateLimitResponse.FromString)
        deadline = time.monotonic() + 10
        while True:  # until the router reaches its node: a limit decided, not by policy
            rep = self.call("edge", [[("user", "__ready")]])
            if rep.statuses[0].limit_remaining == 2 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        return self

    def call(self, domain: str, descs, timeout: float = 5.0, **kw):
        req = rls_pb2.RateLimitRequest(domain=domain, **kw)
        for entries in descs:
            d = req.descriptors.add()
            for k, v in entries:
                d.entries.add(key=k, value=v)
        return self.call_fn(req, timeout=timeout)

    def metrics(self) -> str:
        with socket.create_connection(("127.0.0.1", self.mport), 2) as s:
            s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            page = b""
            while True:
                b = s.recv(65536)
                if not b:
                    return page.decode()
                page += b

    def metric(self, line_start: str) -> int:
        for ln in self.metrics().splitlines():
            if ln.startswith(line_start + " "):
                return int(float(ln.split()[-1]))
        return 0

    def stop(self) -> None:
        self.chan.close()
        harness.kill(self.router, signal.SIGTERM)
        rc = self.router.returncode
        harness.kill(self.node)
        assert rc == 0, (self.dir / "router.log").read_text()[-3000:]


@pytest.fixture(scope="module")
def rls(tmp_path_factory):
    r = Rls(tmp_path_factory.mktemp("rls")).start()
    yield r
    r.stop()


def test_a_limit_counts_then_refuses(rls):
    u = uid()
    got = [rls.call("edge", [[("user", u)]]) for _ in range(4)]
    assert [g.overall_code for g in got] == [OK, OK, OK, OVER]
    assert [g.statuses[0].limit_remaining for g in got] == [2, 1, 0, 0]
    st = got[0].statuses[0]
    assert st.current_limit.requests_per_unit == 3
    assert st.current_limit.unit == ratelimit_unit_pb2.HOUR
    assert 0 < st.duration_until_reset.seconds <= 3600
    # [router] rls_headers = ratelimit: from the most restrictive status
    hdrs = {h.key: h.value for h in got[1].response_headers_to_add}
    assert hdrs == {"RateLimit-Limit": "3", "RateLimit-Remaining": "1",
                    "RateLimit-Reset": hdrs["RateLimit-Reset"]}


def test_upstreams_special_cases(rls):
    # an unknown domain or descriptor: OK, no current_limit
    rep = rls.call("nowhere", [[("user", uid())]])
    assert rep.overall_code == OK and not rep.statuses[0].HasField("current_limit")
    rep = rls.call("edge", [[("nokey", "x")]])
    assert rep.overall_code == OK and not rep.statuses[0].HasField("current_limit")
    # shadow_mode: over its limit, yet OK
    u = uid()
    got = [rls.call("edge", [[("shadow", u)]]) for _ in range(2)]
    assert [g.overall_code for g in got] == [OK, OK]
    assert got[1].statuses[0].code == OK and got[1].statuses[0].limit_remaining == 0
    # unlimited: as upstream, the most a uint32 says
    rep = rls.call("edge", [[("free", uid())]])
    assert rep.statuses[0].limit_remaining == 4294967295
    # several limits on one descriptor: the least remaining answers, each counted apart
    u = uid()
    got = [rls.call("edge", [[("two", u)]]) for _ in range(3)]
    assert [g.statuses[0].limit_remaining for g in got] == [1, 0, 0]
    assert got[2].overall_code == OVER and got[2].statuses[0].current_limit.name == "small"
    # a bursty algorithm takes its burst (token_bucket, burst 2): the third is refused
    u = uid()
    got = [rls.call("edge", [[("bucket", u)]]) for _ in range(3)]
    assert [g.overall_code for g in got] == [OK, OK, OVER]
    # `replaces`: the plan limit is not applied when vip matched in the same request
    u = uid()
    got = [rls.call("edge", [[("plan", u)], [("vip", u)]]) for _ in range(2)]
    assert [g.overall_code for g in got] == [OK, OK]
    assert not got[1].statuses[0].HasField("current_limit")
    # RateLimitOverride: that limit, under the descriptor's key
    u = uid()
    req = rls_pb2.RateLimitRequest(domain="edge")
    d = req.descriptors.add()
    d.entries.add(key="user", value=u)
    d.limit.requests_per_unit = 1
    d.limit.unit = ratelimit_unit_pb2.HOUR
    got = [rls.call_fn(req, timeout=5) for _ in range(2)]
    assert [g.overall_code for g in got] == [OK, OVER]


def test_errors(rls):
    with pytest.raises(grpc.RpcError) as e:
        rls.call("", [[("user", "x")]])
    assert e.value.code() == grpc.StatusCode.UNKNOWN
    assert "domain must not be empty" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        rls.call("edge", [])
    assert "descriptor list must not be empty" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        rls.call("edge", [[("user", "x")]] * 65)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    with pytest.raises(grpc.RpcError) as e:
        rls.call("edge", [[("user", "x")]], hits_addend=2000000)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_counters(rls):
    before_ok = rls.metric('rl_router_rls_calls_total{result="ok"}')
    before_over = rls.metric('rl_router_rls_calls_total{result="over_limit"}')
    before_err = rls.metric('rl_router_rls_calls_total{result="error"}')
    before_dom = rls.metric('rl_router_rls_domain_calls_total{domain="edge",result="ok"}')
    u = uid()
    for _ in range(2):
        rls.call("edge", [[("detailed", u)]])
    with pytest.raises(grpc.RpcError):
        rls.call("", [[("user", "x")]])
    assert rls.metric('rl_router_rls_calls_total{result="ok"}') == before_ok + 1
    assert rls.metric('rl_router_rls_calls_total{result="over_limit"}') == before_over + 1
    assert rls.metric('rl_router_rls_calls_total{result="error"}') == before_err + 1
    assert rls.metric('rl_router_rls_domain_calls_total{domain="edge",result="ok"}') == \
        before_dom + 1
    key = f'rl_router_rls_detailed_hits_total{{key="edge.detailed_{u}",result='
    assert rls.metric(key + '"within_limit"}') == 1
    assert rls.metric(key + '"over_limit"}') == 1


def test_grpc_timeout_answers_by_policy(rls):
    """The node stopped: a call with grpc-timeout 150 ms (under the router's 500 ms deadline)
    is answered a little before it passes, by the failure policy (open: OK), and counted."""
    before = rls.metric("rl_router_rls_timeouts_total")
    rls.node.send_signal(signal.SIGSTOP)
    try:
        rep = rls.call("edge", [[("user", uid())]], timeout=0.15)
        assert rep.overall_code == OK
        assert rls.metric("rl_router_rls_timeouts_total") == before + 1
    finally:
        rls.node.send_signal(signal.SIGCONT)
    # and the node's late answers are dropped: the next calls are decided again
    deadline = time.monotonic() + 5
    u = uid()
    while rls.call("edge", [[("user", u)]]).statuses[0].limit_remaining != 2:
        assert time.monotonic() < deadline
        u = uid()


def test_a_pushed_config_takes_over(rls):
    """An edited envoy_config is put in force for new calls (each worker holds it by
    reference; the old one is freed once no call holds it)."""
    path = rls.dir / "envoy" / "edge.yaml"
    path.write_text(EDGE.replace("requests_per_unit: 3", "requests_per_unit: 7"))
    os.kill(rls.router.pid, signal.SIGHUP)
    deadline = time.monotonic() + 10
    while True:
        rep = rls.call("edge", [[("user", uid())]])
        if rep.statuses[0].current_limit.requests_per_unit == 7:
            break
        assert time.monotonic() < deadline, "the new config never took over"
        time.sleep(0.1)
