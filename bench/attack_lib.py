"""What the attack benchmarks share (bench/attack_*.py): a free loopback port, a binary
protocol frame, and a connection that reads whole replies."""
import contextlib
import os
import socket
import struct
import subprocess
import tempfile
import time

import msgpack


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def frame(obj):
    b = msgpack.packb(obj, use_bin_type=True)
    return struct.pack(">I", len(b)) + b


class Conn:
    def __init__(self, port, source=None):
        """A connection to 127.0.0.1:port, from the loopback address source if given (another
        client for the router, which tells clients apart by address without tokens)."""
        self.s = socket.create_connection(("127.0.0.1", port),
                                          source_address=(source, 0) if source else None)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def replies(self, block=True):
        """The whole replies received so far (waiting for some when block)."""
        self.s.setblocking(block)
        try:
            data = self.s.recv(1 << 20)
        except BlockingIOError:
            data = b""
        finally:
            self.s.setblocking(True)
        self.buf += data
        out = []
        while len(self.buf) >= 4:
            n = struct.unpack(">I", self.buf[:4])[0]
            if len(self.buf) < 4 + n:
                break
            out.append(msgpack.unpackb(self.buf[4:4 + n], raw=False))
            self.buf = self.buf[4 + n:]
        return out


@contextlib.contextmanager
def cluster(bindir, services, router_keys="", memory="256mb"):
    """A node and a router from bindir (static membership, `deadline = 50ms`, one router
    worker, its metrics listener, router_keys more [router] lines) on free loopback ports,
    with the [service] sections services; yields (router port, metrics port) once the router
    listens, and stops both however the block ends."""
    rport, nport, mport = free_port(), free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="rl-attack-") as d:
        conf = os.path.join(d, "cluster.conf")
        with open(conf, "w") as f:
            f.write(f"[cluster]\nname = attack\nshards = 64\n\n[router]\n"
                    f"listen = 127.0.0.1:{rport}\ndeadline = 50ms\nmetrics = 127.0.0.1:{mport}\n"
                    f"workers = 1\n{router_keys}\n[node a]\nlisten = 127.0.0.1:{nport}\n"
                    f"memory = {memory}\n\n{services}")
        procs = [subprocess.Popen([os.path.join(bindir, "rl-node"), "--config", conf, "--name", "a",
                                   "--log-file", os.path.join(d, "node.log")])]
        time.sleep(0.5)
        procs.append(subprocess.Popen([os.path.join(bindir, "rl-router"), "--config", conf,
                                       "--log-file", os.path.join(d, "router.log")]))
        try:
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", rport)).close()
                    break
                except OSError:
                    time.sleep(0.05)
            yield rport, mport
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
