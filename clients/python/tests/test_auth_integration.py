"""AUTH against a router with [client NAME] sections (tokens made by rl-cli gen-token)."""

import asyncio
import subprocess

import pytest

import harness
import ratelimiter
from ratelimiter import AsyncClient, AuthError, Client, Code, ErrorCode, ServerError

pytestmark = pytest.mark.integration


def gen_token(path):
    out = subprocess.run([str(harness.BUILD / "rl-cli"), "gen-token", str(path)],
                         check=True, capture_output=True, text=True).stdout
    return out.strip().split("=", 1)[1].strip()


@pytest.fixture(scope="module")
def auth_cluster(tmp_path_factory):
    harness.need_binaries("rl-node", "rl-router", "rl-cli")
    d = tmp_path_factory.mktemp("auth")
    web, ops = d / "web.token", d / "ops.token"
    extra = (f"[client web]\ntoken_sha256 = {gen_token(web)}\nservices = fw\n\n"
             f"[client ops]\ntoken_sha256 = {gen_token(ops)}\nservices = *\nstats = yes\n")
    c = harness.Cluster(d / "c", extra=extra)
    c.ready_token = ops.read_bytes().strip()
    c.start()
    c.web, c.ops = web, ops
    yield c
    c.stop()


def test_right_token_file(auth_cluster):
    with Client("127.0.0.1", auth_cluster.port, token_file=str(auth_cluster.web)) as c:
        assert c.check("fw", "auth").remaining == 9
        assert c.principal == "web"
        with pytest.raises(ServerError) as e:          # a service web may not use
            c.check("fwc", "auth")
        assert e.value.code == ErrorCode.UNAUTHORIZED
        assert c.check("fw", "auth").remaining == 8     # the connection stays
        with pytest.raises(ServerError):
            c.stats()                                   # no stats = yes
    with Client("127.0.0.1", auth_cluster.port, token=auth_cluster.ops.read_bytes().strip()) as c:
        assert c.check("fwc", "auth").code == Code.ALLOWED
        assert c.stats()["checks"] >= 1 and c.principal == "ops"


def test_wrong_token_raises(auth_cluster, tmp_path):
    with pytest.raises(AuthError) as e:
        ratelimiter.connect("127.0.0.1", auth_cluster.port, token=b"not-a-token")
    assert e.value.code == ErrorCode.UNAUTHORIZED and "unknown token" in e.value.message
    # a wrong token is never covered by the failure policy
    c = Client("127.0.0.1", auth_cluster.port, token=b"x" * 32, failure_default="open")
    with pytest.raises(AuthError):
        c.check("fw", "auth")


def test_no_token_refused(auth_cluster):
    with Client("127.0.0.1", auth_cluster.port) as c:
        with pytest.raises(ServerError) as e:
            c.check("fw", "noauth")
        assert e.value.code == ErrorCode.UNAUTHORIZED


def test_async_tokens(auth_cluster):
    async def main():
        async with AsyncClient("127.0.0.1", auth_cluster.port,
                               token_file=str(auth_cluster.web)) as c:
            rs = await asyncio.gather(*[c.check("fw", f"aauth{i}") for i in range(50)])
            assert all(r.remaining == 9 for r in rs) and c.principal == "web"
        with pytest.raises(AuthError):
            await AsyncClient("127.0.0.1", auth_cluster.port, token=b"wrong").connect()
    asyncio.run(main())
