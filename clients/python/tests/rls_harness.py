"""What the gRPC front's tests (test_rls_*.py) share: a cluster whose router serves Envoy's
rate limit service, a throwaway ZooKeeper, the generated message classes and a client.

The fixture `pb` (conftest.py) gives the message classes; the processes run on the build
that harness.BUILD names (RL_BUILD_DIR: build/ or build-asan/)."""

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import harness

METHOD = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

ZK_JARS = ["zookeeper", "zookeeper-jute", "slf4j-api", "slf4j-simple", "metrics-core",
           "snappy-java", "commons-io", "commons-cli", "netty-buffer", "netty-common",
           "netty-handler", "netty-resolver", "netty-transport",
           "netty-transport-native-epoll", "netty-transport-native-unix-common"]


def protoc_python(out: Path) -> None:
    """protoc's Python classes of proto/ in out, with those of protobuf-c's options, which
    proto/ imports (/usr/include/protobuf-c/protobuf-c.proto: string_as_bytes)."""
    if shutil.which("protoc") is None:
        pytest.skip("protoc is missing (scripts/deps.sh installs protobuf-compiler)")
    protos = [str(p) for p in (harness.REPO / "proto").rglob("*.proto")]
    subprocess.run(["protoc", "-I", str(harness.REPO / "proto"), "-I", "/usr/include",
                    f"--python_out={out}", "protobuf-c/protobuf-c.proto"] + protos, check=True)


def generate_pb(out: Path):
    """protoc's Python classes of proto/ in out; yields the rls_pb2 module (a fixture body)."""
    protoc_python(out)
    sys.path.insert(0, str(out))
    from envoy.service.ratelimit.v3 import rls_pb2  # noqa: E402

    yield rls_pb2
    sys.path.remove(str(out))


class ZooKeeper:
    """A throwaway standalone ZooKeeper on a free loopback port (Debian's jars), as the C
    harness starts one (harness/harness_zk.c)."""

    def __init__(self, workdir: Path, timeout: float = 60.0) -> None:
        self.dir = workdir
        self.port = harness.free_port()
        (workdir / "data").mkdir(parents=True, exist_ok=True)
        cfg = workdir / "zoo.cfg"
        cfg.write_text(f"tickTime=200\nminSessionTimeout=400\nmaxSessionTimeout=30000\n"
                       f"dataDir={workdir / 'data'}\nclientPort={self.port}\n"
                       "clientPortAddress=127.0.0.1\nmaxClientCnxns=0\n"
                       "admin.enableServer=false\n4lw.commands.whitelist=*\nforceSync=no\n")
        cp = os.environ.get("RL_ZK_CLASSPATH") or ":".join(
            f"/usr/share/java/{j}.jar" for j in ZK_JARS)
        java = os.environ.get("RL_JAVA") or "java"
        if shutil.which(java) is None or not Path("/usr/share/java/zookeeper.jar").exists():
            pytest.skip("java or Debian's zookeeper is missing (scripts/deps.sh installs them)")
        self.proc = harness.spawn(
            [java, "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             "-XX:-UsePerfData", "-Djava.awt.headless=true", f"-Djava.io.tmpdir={workdir}",
             "-Dzookeeper.admin.enableServer=false", "-Dzookeeper.jmx.log4j.disable=true",
             "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", cp,
             "org.apache.zookeeper.server.ZooKeeperServerMain", str(cfg)], workdir / "zk.log")
        deadline = time.monotonic() + timeout
        while not self._serving():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = (workdir / "zk.log").read_text(errors="replace")
                self.stop()
                raise RuntimeError(f"ZooKeeper did not start:\n{log}")
            time.sleep(0.1)
        self.connect = f"127.0.0.1:{self.port}"

    def _serving(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), 0.3) as s:
                s.sendall(b"srvr")
                return s.recv(64).startswith(b"Zookeeper version:")
        except OSError:
            return False

    def stop(self) -> None:
        harness.kill(self.proc)


clear_of_window_edge = harness.clear_of_window_edge


def rls_cluster(d: Path, envoy_config: str, *, nodes=("a",), extra="", deadline="200ms",
                router="", cluster="", metrics=False, token=None, start=True,
                binaries=("rl-node", "rl-router")) -> harness.Cluster:
    """A harness.Cluster in d whose router serves gRPC ([router] rls, on c.rls_port) with
    envoy_config (relative to d); metrics: also [router] metrics on c.metrics_port.
    router and cluster: more lines for those sections. Started (and its rls port
    answering) unless start=False: then start_rls(c) starts it."""
    harness.need_binaries(*binaries)
    c = harness.Cluster(d, nodes=nodes, extra=extra, deadline=deadline)
    c.ready_token = token
    c.rls_port = harness.free_port()
    c.metrics_port = harness.free_port() if metrics else None
    text = c.conf.read_text()
    text = text.replace("[cluster]\n", f"[cluster]\n{cluster}envoy_config = {envoy_config}\n",
                        1)
    mline = f"metrics = {c.metrics_port}\n" if metrics else ""
    text = text.replace("[router]\n", f"[router]\nrls = {c.rls_port}\n{mline}{router}", 1)
    c.conf.write_text(text)
    if start:
        start_rls(c)
    return c


def start_rls(c: harness.Cluster) -> harness.Cluster:
    """Starts the nodes and router of c and waits for its gRPC port."""
    c.start()
    harness.wait_port(c.rls_port, c.router, c.dir / "router.log")
    return c


def sighup(c) -> None:
    """SIGHUP to c's router, then waits (5 s at most) for its log's "SIGHUP: " line, and a
    moment for the workers, which take the new configuration when woken."""
    import signal

    log = c.dir / "router.log"
    n = log.read_text().count("SIGHUP: ")
    c.router.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 5
    while log.read_text().count("SIGHUP: ") == n:
        assert time.monotonic() < deadline, "no SIGHUP line in the log"
        time.sleep(0.02)
    time.sleep(0.2)


def running(c):
    """A fixture body: yields the started cluster c, stops it at the end."""
    yield c
    c.stop()


def request(pb, domain, *descriptors, hits=0):
    """A RateLimitRequest: each descriptor a list of (key, value); hits_addend hits."""
    req = pb.RateLimitRequest(domain=domain, hits_addend=hits)
    for entries in descriptors:
        d = req.descriptors.add()
        for k, v in entries:
            e = d.entries.add()
            e.key, e.value = k, v
    return req


def make_stub(port, pb):
    """(channel, ShouldRateLimit callable) to 127.0.0.1:port with grpcio."""
    import grpc

    ch = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = ch.unary_unary(METHOD, request_serializer=pb.RateLimitRequest.SerializeToString,
                          response_deserializer=pb.RateLimitResponse.FromString)
    return ch, stub


class Caller:
    """ShouldRateLimit over one grpcio channel: caller(domain, [(k, v), ...], ...)."""

    def __init__(self, port, pb, hits=0, timeout=5.0):
        self.pb = pb
        self.hits = hits
        self.timeout = timeout
        self.ch, self.stub = make_stub(port, pb)

    def request(self, domain, *descriptors, hits=None):
        return request(self.pb, domain, *descriptors,
                       hits=self.hits if hits is None else hits)

    def __call__(self, domain, *descriptors, hits=None, timeout=None, metadata=None):
        return self.stub(self.request(domain, *descriptors, hits=hits),
                         timeout=self.timeout if timeout is None else timeout,
                         metadata=metadata)

    def with_call(self, domain, *descriptors, hits=None, timeout=None, metadata=None):
        return self.stub.with_call(self.request(domain, *descriptors, hits=hits),
                                   timeout=self.timeout if timeout is None else timeout,
                                   metadata=metadata)

    def close(self):
        self.ch.close()


def caller_fixture(c, pb, **kw):
    """A fixture body: a Caller to c's gRPC port, closed at the end."""
    caller = Caller(c.rls_port, pb, **kw)
    yield caller
    caller.close()


def codes(pb, resp):
    """The names of a response's statuses' codes."""
    return [pb.RateLimitResponse.Code.Name(s.code) for s in resp.statuses]


def metrics_text(c) -> str:
    """The router's /metrics page (c.metrics_port)."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{c.metrics_port}/metrics", timeout=5) as r:
        return r.read().decode()


def router_log(c) -> str:
    return (c.dir / "router.log").read_text(errors="replace")
