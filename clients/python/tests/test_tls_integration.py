"""TLS (docs/OPERATIONS.md, "TLS"): the blocking and asyncio clients against a router and a
node with [cluster] tls_*, certificates made at test time with the openssl command."""

import asyncio
import os
import subprocess

import pytest

import harness
import ratelimiter
from ratelimiter import AsyncClient, Client, Code, Unavailable, tls_context

pytestmark = pytest.mark.integration


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_ca(d, name):
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", str(d / f"{name}.key"), "-out", str(d / f"{name}.pem"), "-days", "2",
            "-subj", f"/CN={name}")


def make_cert(d, name, ca):
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", str(d / f"{name}.key"), "-out", str(d / f"{name}.csr"),
            "-subj", f"/CN={name}")
    openssl("x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / f"{ca}.pem"),
            "-CAkey", str(d / f"{ca}.key"), "-CAcreateserial", "-out", str(d / f"{name}.pem"),
            "-days", "2", "-extfile", str(d / "san.ext"))
    os.chmod(d / f"{name}.key", 0o600)


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory):
    harness.need_binaries("rl-node", "rl-router")
    d = tmp_path_factory.mktemp("tls")
    make_ca(d, "ca")
    make_ca(d, "other")
    make_cert(d, "member", "ca")
    c = harness.Cluster(d / "c", cluster=(f"tls_cert_file = {d}/member.pem\n"
                                          f"tls_key_file = {d}/member.key\n"
                                          f"tls_ca_file = {d}/ca.pem\n"))
    c.ready_ssl = tls_context(str(d / "ca.pem"))
    c.start()
    c.certs = d
    yield c
    c.stop()


def test_router_over_tls(tls_cluster):
    ctx = tls_context(str(tls_cluster.certs / "ca.pem"))
    with Client("127.0.0.1", tls_cluster.port, ssl=ctx) as c:
        assert c.check("fw", "tls-sync").code == Code.ALLOWED
        assert c.check("fw", "tls-sync").remaining == 8
        reps = c.check_many([("fw", f"many{i}") for i in range(200)])
        assert all(r.code == Code.ALLOWED for r in reps)


def test_node_wants_a_client_certificate(tls_cluster):
    d = tls_cluster.certs
    port = tls_cluster.node_ports["a"]
    with Client("127.0.0.1", port, ssl=tls_context(str(d / "ca.pem"))) as c:
        with pytest.raises(Unavailable) as e:
            c.check("fw", "nocert")
    assert "certificate" in str(e.value)
    member = tls_context(str(d / "ca.pem"), str(d / "member.pem"), str(d / "member.key"))
    with Client("127.0.0.1", port, ssl=member) as c:
        assert c.check("fw", "withcert").code == Code.ALLOWED


def test_wrong_ca_and_plaintext(tls_cluster):
    d = tls_cluster.certs
    with Client("127.0.0.1", tls_cluster.port, ssl=tls_context(str(d / "other.pem"))) as c:
        with pytest.raises(Unavailable) as e:
            c.check("fw", "wrongca")
    assert "certificate was refused" in str(e.value)
    with Client("127.0.0.1", tls_cluster.port) as c:           # plaintext to a TLS port
        with pytest.raises(Unavailable) as e:
            c.check("fw", "plain")
    assert "TLS is required" in str(e.value)


def test_key_file_mode(tls_cluster):
    d = tls_cluster.certs
    os.chmod(d / "member.key", 0o644)
    try:
        with pytest.raises(ValueError, match="group or others"):
            tls_context(str(d / "ca.pem"), str(d / "member.pem"), str(d / "member.key"))
    finally:
        os.chmod(d / "member.key", 0o600)


def test_async_over_tls(tls_cluster):
    ctx = tls_context(str(tls_cluster.certs / "ca.pem"))

    async def run():
        async with AsyncClient("127.0.0.1", tls_cluster.port, ssl=ctx) as c:
            reps = await asyncio.gather(*(c.check("fw", f"a{i}") for i in range(50)))
            return reps

    reps = asyncio.run(run())
    assert all(r.code == Code.ALLOWED for r in reps)


def test_tls_to_plain_router(tmp_path):
    harness.need_binaries("rl-node", "rl-router")
    make_ca(tmp_path, "ca")
    c = harness.Cluster(tmp_path / "plain").start()
    try:
        with Client("127.0.0.1", c.port, ssl=tls_context(str(tmp_path / "ca.pem"))) as cl:
            with pytest.raises(Unavailable) as e:
                cl.check("fw", "x")
        assert "does not speak TLS" in str(e.value)
    finally:
        c.stop()


def test_grpc_front_over_tls(tmp_path):
    """Envoy's rate limit service over TLS (ALPN h2), called with grpcio's secure channel,
    which also checks the certificate's address (the test certificate names 127.0.0.1)."""
    grpc = pytest.importorskip("grpc")
    import sys

    import rls_harness

    harness.need_binaries("rl-node", "rl-router")
    gen = tmp_path / "gen"
    gen.mkdir()
    rls_harness.protoc_python(gen)
    sys.path.insert(0, str(gen))
    try:
        from envoy.service.ratelimit.v3 import rls_pb2 as pb
    finally:
        sys.path.remove(str(gen))
    make_ca(tmp_path, "ca")
    make_cert(tmp_path, "member", "ca")
    (tmp_path / "envoy").mkdir()
    (tmp_path / "envoy" / "edge.yaml").write_text(
        "domain: edge\ndescriptors:\n  - key: k\n    rate_limit:\n"
        "      unit: hour\n      requests_per_unit: 1\n")
    c = harness.Cluster(tmp_path / "c", cluster=(f"tls_cert_file = {tmp_path}/member.pem\n"
                                                 f"tls_key_file = {tmp_path}/member.key\n"
                                                 f"tls_ca_file = {tmp_path}/ca.pem\n"
                                                 f"envoy_config = {tmp_path}/envoy\n"))
    c.rls_port = harness.free_port()
    c.conf.write_text(c.conf.read_text().replace("[router]\n", f"[router]\nrls = {c.rls_port}\n", 1))
    c.ready_ssl = tls_context(str(tmp_path / "ca.pem"))
    c.start()
    try:
        harness.wait_port(c.rls_port, c.router, c.dir / "router.log")
        creds = grpc.ssl_channel_credentials(root_certificates=(tmp_path / "ca.pem").read_bytes())
        ch = grpc.secure_channel(f"127.0.0.1:{c.rls_port}", creds)
        stub = ch.unary_unary("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
                              request_serializer=pb.RateLimitRequest.SerializeToString,
                              response_deserializer=pb.RateLimitResponse.FromString)
        req = pb.RateLimitRequest(domain="edge")
        e = req.descriptors.add().entries.add()
        e.key, e.value = "k", "v"
        assert stub(req, timeout=5).overall_code == pb.RateLimitResponse.OK
        assert stub(req, timeout=5).overall_code == pb.RateLimitResponse.OVER_LIMIT
        ch.close()
        # a plaintext gRPC client is closed: UNAVAILABLE, not an answer
        plain = grpc.insecure_channel(f"127.0.0.1:{c.rls_port}")
        pstub = plain.unary_unary("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
                                  request_serializer=pb.RateLimitRequest.SerializeToString,
                                  response_deserializer=pb.RateLimitResponse.FromString)
        with pytest.raises(grpc.RpcError) as err:
            pstub(req, timeout=5)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        plain.close()
    finally:
        c.stop()
