"""The codec: exact bytes of requests, strict decoding of replies, framing bounds."""

import struct

import msgpack
import pytest

import ratelimiter
from ratelimiter.protocol import (Check, Code, ErrorCode, ErrorReply, FrameReader, Named, Op,
                                  Pong, ProtocolError, Reply, Stats, decode, encode_auth,
                                  encode_check, encode_simple, read_token_file, server_error)


def test_installed_package_when_required():
    import os
    if os.environ.get("RL_REQUIRE_INSTALLED"):
        assert "clients/python/src" not in ratelimiter.__file__


def test_check_request_bytes_match_protocol_example():
    frame = encode_check(7, Check("checkout", "u42", None, 1))
    assert frame.hex(" ") == ("00 00 00 12 96 01 07 a8 63 68 65 63 6b 6f 75 74 "
                              "a3 75 34 32 c0 01")


def test_simple_and_auth_requests():
    assert encode_simple(Op.PING, 1) == b"\x00\x00\x00\x03\x92\x02\x01"
    assert encode_simple(Op.STATS, 300) == b"\x00\x00\x00\x05\x92\x03\xcd\x01\x2c"
    assert encode_auth(2, b"tok") == b"\x00\x00\x00\x08\x93\x06\x02\xc4\x03tok"
    with pytest.raises(ValueError):
        encode_auth(2, b"")
    with pytest.raises(ValueError):
        encode_auth(2, b"x" * 257)


@pytest.mark.parametrize("check", [
    Check("", "u"), Check("s" * 129, "u"), Check("s", ""), Check("s", "u" * 257),
    Check("s", "u", "e" * 129), Check("s", "u", None, -1), Check("s", "u", None, 1000001),
    Check("s", "u", None, 1.0), Check("s", "u", None, True), Check("é" * 65, "u"),
])
def test_request_bounds_refused_before_sending(check):
    with pytest.raises((ValueError, TypeError)):
        ratelimiter.protocol.as_check(check)


def test_request_bounds_accepted():
    for c in (Check("s" * 128, "u" * 256, "e" * 128, 1000000), Check("s", "u", "", 0)):
        assert ratelimiter.protocol.as_check(c) == c
    assert ratelimiter.protocol.as_check(("s", "u")) == Check("s", "u", None, 1)
    assert ratelimiter.protocol.as_check({"service": "s", "user": "u", "cost": 3}).cost == 3


def test_check_reply_example():
    rep = decode(bytes.fromhex("97 01 07 00 64 63 cd ea 60 00"))
    assert rep == Reply(Code.ALLOWED, 100, 99, 60000, 0)
    assert rep.id == 7 and rep.allowed and not rep.limited and rep.decided


def p(*v):
    return msgpack.packb(list(v), use_bin_type=True)


def test_every_reply_shape():
    assert decode(p(1, 1, 5, 4, 0, 1000, 250)).delay_s == 0.25
    assert decode(p(1, 1, 1, 2**64 - 1, 0, 0, 4294967295)).retry_after_ms == 4294967295
    assert decode(p(2, 3, "router@x")) == Pong(3, "router@x")
    assert decode(p(3, 4, {"checks": 5, "neg": -(2**63)})) == Stats(4, {"checks": 5, "neg": -(2**63)})
    assert decode(p(6, 5, "web")) == Named(Op.AUTH, 5, "web")
    assert decode(p(255, 6, 3, "cost must be")) == ErrorReply(6, 3, "cost must be")
    # a non-negative value in a signed format is the same integer
    assert decode(bytes.fromhex("97 01 07 00 d2 00 00 00 05 00 00 00")).limit == 5


@pytest.mark.parametrize("payload", [
    p(1, 1, 6, 0, 0, 0, 0),            # code out of range
    p(1, 1, 0, 0, 0, 0),               # 6 elements
    p(1, 1, 0, 0, 0, 0, 0, 0),         # 8 elements
    p(1, 1, 0, -1, 0, 0, 0),           # negative
    p(1, 1, 0, 1.0, 0, 0, 0),          # float
    p(1, 1, True, 0, 0, 0, 0),         # bool is not an integer
    p(1, 1, 0, "1", 0, 0, 0),
    p(1, 2**32, 0, 0, 0, 0, 0),        # id above 32 bits
    p(1, -1, 0, 0, 0, 0, 0),
    p(2, 1, b"bin-name"),              # a bin is not a str
    p(2, 1),
    p(3, 1, {"k": 2**63}),             # above int64
    p(3, 1, {b"k": 1}),
    p(3, 1, {str(i): i for i in range(257)}),
    p(3, 1, [1]),
    p(255, 1, 0, "x"), p(255, 1, 8, "x"), p(255, 1, 3, b"x"), p(255, 1, 3),
    p(255, 1, 3, "x", "b"),            # only MOVING has a 5th element
    p(255, 1, 7, "x", 2), p(255, 1, 7, "x", "b", "c"),
    p(9, 1, "x"), p(True, 1, 0, 0, 0, 0, 0),
    p(1), msgpack.packb(5), msgpack.packb({"a": 1}),
    p(1, 1, 0, 0, 0, 0, 0) + b"\x00",  # trailing bytes
    p(1, 1, 0, 0, 0, 0, 0)[:-1],       # truncated
    b"\xc1", b"\x92\x02\xc1",          # reserved byte
    b"\xdd\xff\xff\xff\xff\x01\x02\x03\x04\x05",  # count exceeds the frame
    b"\x92\x02\xa3ab",                 # str longer than the frame
    b"",
])
def test_malformed_replies_raise(payload):
    with pytest.raises(ProtocolError):
        decode(payload)


def test_moving_is_a_server_error_naming_the_owner():
    """ERROR MOVING (code 7) is a v1 reply of a node during a planned move, with the owner
    to ask as an optional 5th element (docs/PROTOCOL.md, "MOVING"): a ServerError that
    carries it, not a protocol break."""
    rep = decode(p(255, 9, 7, "shard 3 is moving to b", "b"))
    assert rep == ErrorReply(9, 7, "shard 3 is moving to b", "b")
    e = server_error(rep)
    assert e.code == ErrorCode.MOVING and e.owner == "b" and e.request_id == 9
    assert decode(p(255, 9, 7, "shard 3 is being handed off (node a)")).owner == ""
    assert server_error(decode(p(255, 1, 6, "not mine"))).owner == ""


def test_frame_reader_splits_and_bounds():
    f1 = struct.pack(">I", 3) + b"\x92\x02\x01"
    f2 = struct.pack(">I", 4) + p(2, 9, "a")[:4]
    r = FrameReader()
    data = f1 + f2 + f1
    got = []
    for i in range(len(data)):  # one byte at a time
        got += r.feed(data[i:i + 1])
    assert got == [b"\x92\x02\x01", p(2, 9, "a")[:4], b"\x92\x02\x01"]
    assert FrameReader().feed(struct.pack(">I", 65536) + b"x") == []
    for n in (0, 65537, 2**32 - 1):
        with pytest.raises(ProtocolError):
            FrameReader().feed(struct.pack(">I", n))  # refused as soon as 4 bytes arrive


def test_token_file(tmp_path):
    f = tmp_path / "t"
    f.write_bytes(b"secret\r\n")
    assert read_token_file(str(f)) == b"secret"
    f.write_bytes(b"secret\n\n")
    assert read_token_file(str(f)) == b"secret\n"
    f.write_bytes(b"\n")
    with pytest.raises(ValueError):
        read_token_file(str(f))


def test_failure_policy():
    pol = ratelimiter.FailurePolicy({"a": "open", "b": "closed"}, default=None)
    assert pol.decide(Check("a", "u")) == Reply(Code.FAIL_OPEN, service="a", local=True)
    assert pol.decide(Check("b", "u", "/x")) == Reply(Code.FAIL_CLOSED, retry_after_ms=1000,
                                                      service="b", endpoint="/x", local=True)
    assert pol.decide(Check("c", "u")) is None
    assert ratelimiter.FailurePolicy(default="closed").decide(Check("c", "u")).code == Code.FAIL_CLOSED
    with pytest.raises(ValueError):
        ratelimiter.FailurePolicy({"a": "maybe"})
    with pytest.raises(ValueError):
        ratelimiter.FailurePolicy(default="yes")
