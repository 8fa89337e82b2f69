"""The RESP front under TLS (docs/RESP.md, "TLS"): with [cluster] tls_cert_file, tls_key_file
and tls_ca_file set, `[router] resp` takes TLS only, like the router's other listeners.
redis-cli (`--tls --cacert`, Debian's redis-tools is built with TLS) and Python's redis
(`ssl=True, ssl_ca_certs=`) are served over it, the count shared across two routers; a
client that checks against another CA refuses the server; a plaintext Redis client is
answered `-ERR TLS is required ...` and closed, without disturbing a TLS client. The nodes
run with the same files (mutual TLS router to node). Certificates are made at test time
with the openssl command."""

from __future__ import annotations

import os
import socket
import subprocess
import uuid
from pathlib import Path

import pytest
import redis

from conftest import RespCluster


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_ca(d: Path, name: str) -> None:
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", str(d / f"{name}.key"), "-out", str(d / f"{name}.pem"), "-days", "2",
            "-subj", f"/CN={name}")


def make_cert(d: Path, name: str, ca: str) -> None:
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", str(d / f"{name}.key"), "-out", str(d / f"{name}.csr"),
            "-subj", f"/CN={name}")
    openssl("x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / f"{ca}.pem"),
            "-CAkey", str(d / f"{ca}.key"), "-CAcreateserial", "-out", str(d / f"{name}.pem"),
            "-days", "2", "-extfile", str(d / "san.ext"))
    os.chmod(d / f"{name}.key", 0o600)


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    d = tmp_path_factory.mktemp("resp-tls")
    make_ca(d, "ca")
    make_ca(d, "other")
    make_cert(d, "member", "ca")
    c = RespCluster(d / "c", extra=(f"tls_cert_file = {d}/member.pem\n"
                                    f"tls_key_file = {d}/member.key\n"
                                    f"tls_ca_file = {d}/ca.pem\n"))
    c.redis_tls = {"ssl": True, "ssl_ca_certs": str(d / "ca.pem")}
    c.certs = d
    c.start()
    yield c
    c.stop()


def key(prefix: str = "k") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def redis_cli(port: int, *args: str, tls_args=()) -> subprocess.CompletedProcess:
    return subprocess.run(["redis-cli", "-p", str(port), *tls_args, *args], capture_output=True,
                          text=True, timeout=10)


def test_redis_cli_was_built_with_tls():
    out = subprocess.run(["redis-cli", "--help"], capture_output=True, text=True, timeout=10)
    assert "--tls" in out.stdout + out.stderr


def test_redis_cli_over_tls(tls):
    """redis-cell's README example through `redis-cli --tls --cacert`, then the same key's
    next answer through the other router: one count."""
    k = key("user123")
    ca = ("--tls", "--cacert", str(tls.certs / "ca.pem"))
    out = redis_cli(tls.resp_ports[0], "CL.THROTTLE", k, "15", "30", "60", tls_args=ca)
    assert out.returncode == 0 and out.stdout.split() == ["0", "16", "15", "-1", "2"], out
    out = redis_cli(tls.resp_ports[1], "CL.THROTTLE", k, "15", "30", "60", tls_args=ca)
    assert out.returncode == 0 and out.stdout.split()[:3] == ["0", "16", "14"], out
    assert redis_cli(tls.resp_ports[0], "PING", tls_args=ca).stdout.strip() == "PONG"


def test_python_redis_over_tls(tls):
    """python3-redis with ssl=True, ssl_ca_certs: a pipeline of 20 on one router, the count
    continued on the other."""
    k = key("py")
    rs = [redis.Redis(port=p, ssl=True, ssl_ca_certs=str(tls.certs / "ca.pem"), socket_timeout=5)
          for p in tls.resp_ports]
    try:
        pipe = rs[0].pipeline(transaction=False)
        for _ in range(20):
            pipe.execute_command("CL.THROTTLE", k, 29, 30, 60)
        reps = pipe.execute()
        assert [r[0] for r in reps] == [0] * 20
        assert [r[2] for r in reps] == list(range(29, 9, -1))
        rep = rs[1].execute_command("CL.THROTTLE", k, 29, 30, 60)
        assert rep[0] == 0 and rep[2] == 9, rep
    finally:
        for r in rs:
            r.close()


def test_another_ca_refuses_the_server(tls):
    r = redis.Redis(port=tls.resp_ports[0], ssl=True,
                    ssl_ca_certs=str(tls.certs / "other.pem"), socket_timeout=5)
    with pytest.raises(redis.ConnectionError) as e:
        r.ping()
    assert "certificate verify failed" in str(e.value)
    out = redis_cli(tls.resp_ports[0], "PING",
                    tls_args=("--tls", "--cacert", str(tls.certs / "other.pem")))
    assert "PONG" not in out.stdout and "certificate verify failed" in out.stdout + out.stderr, out


def test_plaintext_redis_client_refused(tls):
    """A plaintext client is told, in RESP, that TLS is required, and closed; a TLS client
    on the same router goes on being served."""
    k = key("tlsok")
    ok = redis.Redis(port=tls.resp_ports[0], ssl=True, ssl_ca_certs=str(tls.certs / "ca.pem"),
                     socket_timeout=5)
    assert ok.execute_command("CL.THROTTLE", k, 5, 10, 60)[0] == 0

    plain = redis.Redis(port=tls.resp_ports[0], socket_timeout=5)
    with pytest.raises(redis.RedisError) as e:
        plain.execute_command("CL.THROTTLE", key(), 5, 10, 60)
    assert "TLS is required" in str(e.value)
    plain.close()

    out = redis_cli(tls.resp_ports[0], "PING")
    assert "PONG" not in out.stdout, out
    assert "TLS is required" in out.stdout + out.stderr, out

    with socket.create_connection(("127.0.0.1", tls.resp_ports[0]), 2) as s:
        s.sendall(b"*1\r\n$4\r\nPING\r\n")
        s.settimeout(3)
        got = b""
        while True:
            b = s.recv(4096)
            if not b:
                break
            got += b
    assert got.startswith(b"-ERR TLS is required: this port takes TLS connections only"), got
    assert got.endswith(b"\r\n") and got.count(b"\r\n") == 1, got

    assert ok.execute_command("CL.THROTTLE", k, 5, 10, 60)[2] == 4
    ok.close()
