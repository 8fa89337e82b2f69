"""A fake router for the clients' tests: a real TCP socket on 127.0.0.1, a thread per
connection answering each request frame [op, id, ...] with the bytes the test chose for its
id. Only the server is fake; the clients under test are real (test_hostile_server.py,
test_lua_hostile.py)."""

import socket
import struct
import threading
from typing import Callable, List

import msgpack


class FakeRouter:
    """Reads each request frame and sends answer(id) in chunks of `chunk` bytes, `gap`
    seconds apart (gap 0: at once). Counts connections and requests; runs until close()."""

    def __init__(self, answer: Callable[[int], bytes], chunk: int = 0, gap: float = 0.0):
        self.answer, self.chunk, self.gap = answer, chunk, gap
        self.stop = threading.Event()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.conns: List[socket.socket] = []
        self.requests = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                s, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(s)
            threading.Thread(target=self._serve, args=(s,), daemon=True).start()

    def _send(self, s: socket.socket, data: bytes) -> None:
        if not self.chunk:
            s.sendall(data)
            return
        for i in range(0, len(data), self.chunk):
            if self.stop.wait(self.gap if i else 0):
                return
            s.sendall(data[i:i + self.chunk])

    def _serve(self, s: socket.socket) -> None:
        buf = b""
        try:
            while not self.stop.is_set():
                data = s.recv(65536)
                if not data:
                    return
                buf += data
                while len(buf) >= 4:
                    (n,) = struct.unpack(">I", buf[:4])
                    if len(buf) < 4 + n:
                        break
                    msg = msgpack.unpackb(buf[4:4 + n], raw=True)
                    buf = buf[4 + n:]
                    self.requests += 1
                    self._send(s, self.answer(msg[1]))
        except OSError:
            return
        finally:
            s.close()

    def close(self) -> None:
        self.stop.set()
        self.sock.close()
        for s in self.conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
