"""What the attack benchmarks share (bench/attack_*.py): a free loopback port, a binary
protocol frame, and a connection that reads whole replies."""
import socket
import struct

import msgpack


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def frame(obj):
    b = msgpack.packb(obj, use_bin_type=True)
    return struct.pack(">I", len(b)) + b


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
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
