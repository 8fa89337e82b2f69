"""A router's clean stop (SIGTERM, docs/OPERATIONS.md "Signals"), seen from a client on a raw
socket of the binary protocol: what it had forwarded is answered, then the router shuts its
side (a FIN, so the client reads every answer and then the end of the stream) even when the
client went on sending after the signal. Closing a socket with unread input makes the
kernel send a reset, which on a real network drops answers still in flight; the router now
reads and drops such input until the client closes."""

import os
import signal
import socket
import struct
import time

import msgpack
import pytest

import harness

pytestmark = pytest.mark.integration


def frame(msg) -> bytes:
    body = msgpack.packb(msg)
    return struct.pack(">I", len(body)) + body


def read_frame(s: socket.socket):
    head = b""
    while len(head) < 4:
        d = s.recv(4 - len(head))
        if not d:
            return None
        head += d
    (n,) = struct.unpack(">I", head)
    body = b""
    while len(body) < n:
        d = s.recv(n - len(body))
        assert d, "the stream ended inside a frame"
        body += d
    return msgpack.unpackb(body)


def test_sigterm_answers_then_ends_the_stream_cleanly(tmp_path):
    harness.need_binaries("rl-node", "rl-router")
    c = harness.Cluster(tmp_path, deadline="3s").start()
    try:
        s = socket.create_connection(("127.0.0.1", c.port), 5)
        s.settimeout(10)
        s.sendall(frame([1, 1, "fw", "warm", None, 1]))
        assert read_frame(s)[0] == 1
        node = c.nodes["a"]
        os.kill(node.pid, signal.SIGSTOP)
        s.sendall(b"".join(frame([1, 100 + i, "fw", f"u{i}", None, 1]) for i in range(20)))
        time.sleep(0.3)  # forwarded, held at the paused node
        os.kill(c.router.pid, signal.SIGTERM)
        time.sleep(0.2)
        # the client goes on: the router reads no more of it
        s.sendall(b"".join(frame([1, 200 + i, "fw", f"late{i}", None, 1]) for i in range(50)))
        os.kill(node.pid, signal.SIGCONT)
        ids = set()
        for _ in range(20):
            rep = read_frame(s)
            assert rep is not None and rep[0] == 1, rep
            ids.add(rep[1])
        assert ids == {100 + i for i in range(20)}
        # then the end of the stream, not a reset
        assert read_frame(s) is None
        s.close()
        assert c.router.wait(10) == 0
        c.router = None
    finally:
        c.stop()
