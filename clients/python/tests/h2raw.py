"""Raw HTTP/2 for the gRPC front's abuse tests (test_rls_abuse.py, test_front_opening.py):
frames built by hand, the request's header block without the HPACK table, and a client
connection whose reader thread notes GOAWAY, RST_STREAM, answered streams and the end.
Not a client to make calls with (rls_harness.request does that) nor an HTTP/2 parser beyond
the frame header. Needs hpack: import it after pytest.importorskip("hpack")."""

import socket
import struct
import threading
import time

import hpack

from rls_harness import METHOD

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = \
    0, 1, 3, 4, 6, 7, 8, 9
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1
REQ_HEADERS = [(":method", "POST"), (":scheme", "http"), (":path", METHOD),
               (":authority", "x"), ("content-type", "application/grpc"), ("te", "trailers")]
# RateLimitRequest{domain: "edge", descriptors: [{entries: [{key: "k", value: "v"}]}]}
MSG = b"\x0a\x04edge" + b"\x12\x08\x0a\x06\x0a\x01k\x12\x01v"


def frame(ftype, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", sid) \
        + payload


def grpc_body(msg, length=None):
    return b"\x00" + struct.pack(">I", len(msg) if length is None else length) + msg


def plain_block():
    """The request's headers without touching the HPACK dynamic table: static-table
    indexes and literals without indexing."""
    def lit(name_index, value, name=b""):
        head = bytes([name_index]) if name_index < 15 else b"\x0f" + bytes([name_index - 15])
        if not name_index:
            head += bytes([len(name)]) + name
        return head + bytes([len(value)]) + value
    return (b"\x83\x86" + lit(4, METHOD.encode()) + lit(1, b"x")
            + lit(31, b"application/grpc") + lit(0, b"trailers", b"te"))


def varint7(n):
    """HPACK integer with a 7-bit prefix already saturated (0x7f written before)."""
    n -= 127
    out = b""
    while n >= 128:
        out += bytes([(n & 0x7F) | 0x80])
        n >>= 7
    return out + bytes([n])


class Raw:
    """A raw HTTP/2 client connection: frames built by hand; a thread reads what comes back
    (unless read=False) and notes GOAWAY, RST_STREAM, response HEADERS and the end of the
    connection."""

    def __init__(self, port, read=True, settings=b"", rcvbuf=None):
        self.sock = socket.socket()
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(5)
        self.sock.connect(("127.0.0.1", port))
        self.enc = hpack.Encoder()
        self.goaway = None  # error code
        self.resets = {}
        self.heads = set()  # streams that got a response HEADERS
        self.status = {}  # grpc-status of the streams whose HEADERS carried one (trailers)
        self.dec = hpack.Decoder()
        self.closed = False
        self.sock.sendall(PREFACE + frame(SETTINGS, 0, 0, settings))
        if read:
            self.reader = threading.Thread(target=self._read, daemon=True)
            self.reader.start()

    def _read(self):
        buf = b""
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except socket.timeout:
                continue
            except OSError:
                data = b""
            if not data:
                self.closed = True
                return
            buf += data
            while len(buf) >= 9:
                n = int.from_bytes(buf[:3], "big")
                if len(buf) < 9 + n:
                    break
                t, sid, payload = buf[3], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF, buf[9:9 + n]
                buf = buf[9 + n:]
                if t == GOAWAY:
                    self.goaway = int.from_bytes(payload[4:8], "big")
                elif t == RST_STREAM:
                    self.resets[sid] = int.from_bytes(payload[:4], "big")
                elif t == HEADERS:
                    self.heads.add(sid)
                    try:  # the router's blocks: no padding, no priority, no CONTINUATION
                        hdrs = {k.decode() if isinstance(k, bytes) else k:
                                v.decode() if isinstance(v, bytes) else v
                                for k, v in self.dec.decode(payload)}
                    except Exception:  # noqa: BLE001 (a block this reader cannot take)
                        hdrs = {}
                    if "grpc-status" in hdrs:
                        self.status[sid] = int(hdrs["grpc-status"])

    def send(self, data):
        """False once the router stopped taking our bytes (closed, or not reading)."""
        try:
            self.sock.sendall(data)
            return True
        except (socket.timeout, OSError):
            return False

    def headers(self, sid, flags=END_HEADERS):
        return frame(HEADERS, flags, sid, self.enc.encode(REQ_HEADERS))

    def wait(self, cond, limit_s=10.0):
        """cond() once true, or at limit_s (an upper bound, never asserted)."""
        deadline = time.monotonic() + limit_s
        while not cond() and time.monotonic() < deadline:
            time.sleep(0.02)
        return cond()

    def ended(self, timeout=5.0):
        return self.wait(lambda: self.closed or self.goaway is not None, timeout)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
