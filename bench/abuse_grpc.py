#!/usr/bin/env python3
"""Hostile clients of a router's gRPC front for bench/abuse.sh grpc (docs/BENCHMARKS.md,
"Under abuse"), in plain sockets: HTTP/2 frames built by hand (no grpcio, no h2), the
request of envoy.service.ratelimit.v3 ShouldRateLimit for domain "edge", key "k".

  abuse_grpc.py silent PORT PID N   N sockets (10 addresses) that send nothing, then a
                                    call on a new connection: answered or not and how fast,
                                    the router's RSS growth, and how many of the N are still
                                    open 8 s later
  abuse_grpc.py bomb PORT KIND      2 connections send KIND (hpack: a 4,000-byte header in
                                    the HPACK table referenced 4,000 times a request;
                                    winupdate: WINDOW_UPDATE frames) for 5 s, opening a new
                                    connection when one is ended; a neighbour on the same
                                    worker calls back to back meanwhile: its p50/p99, and
                                    the attack's connections ended by GOAWAY
  abuse_grpc.py noread PORT PID N   N connections each make a call, then send PINGs (500
                                    every 20 ms, up to 6 MB) and never read: the router's RSS
                                    growth, and how many are still open 15 s later
"""
import socket
import struct
import sys
import threading
import time

METHOD = b"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0, 1, 4, 6, 7, 8
END_STREAM, END_HEADERS = 0x1, 0x4
MSG = b"\x0a\x04edge" + b"\x12\x08\x0a\x06\x0a\x01k\x12\x01v"


def frame(ftype, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", sid) \
        + payload


def plain_block():
    def lit(i, value, name=b""):
        head = bytes([i]) if i < 15 else b"\x0f" + bytes([i - 15])
        if not i:
            head += bytes([len(name)]) + name
        return head + bytes([len(value)]) + value
    return (b"\x83\x86" + lit(4, METHOD) + lit(1, b"x") + lit(31, b"application/grpc")
            + lit(0, b"trailers", b"te"))


def call(sid):
    return frame(HEADERS, END_HEADERS, sid, plain_block()) + \
        frame(DATA, END_STREAM, sid, b"\x00" + struct.pack(">I", len(MSG)) + MSG)


def opening():
    # a large window both ways: the answers never wait for a WINDOW_UPDATE
    return PREFACE + frame(SETTINGS, 0, 0, struct.pack(">HI", 4, (1 << 31) - 1)) + \
        frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", (1 << 30)))


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1])
    return -1


class Reader:
    """Frames read from s: waits for stream sid's end (a frame with END_STREAM)."""

    def __init__(self, s):
        self.s = s
        self.buf = b""
        self.goaway = None

    def frames(self):
        data = self.s.recv(1 << 16)
        if not data:
            raise EOFError
        self.buf += data
        while len(self.buf) >= 9:
            n = int.from_bytes(self.buf[:3], "big")
            if len(self.buf) < 9 + n:
                break
            t, fl = self.buf[3], self.buf[4]
            sid = int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF
            payload = self.buf[9:9 + n]
            self.buf = self.buf[9 + n:]
            if t == GOAWAY:
                self.goaway = int.from_bytes(payload[4:8], "big")
            yield t, fl, sid

    def until_end(self, sid):
        while True:
            for t, fl, s in self.frames():
                if s == sid and t in (HEADERS, DATA) and fl & END_STREAM:
                    return True


def dial(port, src="127.0.0.1"):
    s = socket.socket()
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def one_call(port, timeout=10.0, src="127.0.0.1"):
    """A call on a new connection: True when answered."""
    try:
        s = dial(port, src)
        s.settimeout(timeout)
        s.sendall(opening() + call(1))
        ok = Reader(s).until_end(1)
        s.close()
        return ok
    except (OSError, EOFError):
        return False


def is_open(s):
    """Whether the router still holds s: what it sent is read; then no EOF, no reset
    (and s is closed)."""
    s.setblocking(False)
    try:
        while s.recv(1 << 16):
            pass
        return False  # EOF
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        s.close()


def silent(port, pid, n):
    before = rss_kib(pid)
    socks = []
    for i in range(n):
        try:
            s = socket.socket()
            s.bind((f"127.0.0.{2 + i % 10}", 0))
            s.connect(("127.0.0.1", port))
            socks.append(s)
        except OSError:
            break
    time.sleep(1.0)
    grown = rss_kib(pid) - before
    t0 = time.time()
    ok = one_call(port, src="127.0.0.20")
    ms = (time.time() - t0) * 1000
    time.sleep(8.0)
    still = sum(is_open(s) for s in socks)
    print(f"RESULT grpc silent sockets={len(socks)} rss_growth_kib={grown} valid_call_ok={int(ok)} "
          f"answer_ms={ms:.1f} still_open_after_8s={still}", flush=True)


def bomb_conn(port, kind, stop, ended):
    while not stop.is_set():
        try:
            s = dial(port)
            s.settimeout(2)
            s.sendall(opening() + call(1))
            r = Reader(s)
            r.until_end(1)
            if kind == "hpack":
                name, value = b"x-bomb", b"a" * 4000
                n = len(value) - 127
                v = b""
                while n >= 128:
                    v += bytes([(n & 0x7F) | 0x80])
                    n >>= 7
                lit = b"\x40" + bytes([len(name)]) + name + b"\x7f" + v + bytes([n]) + value
                s.sendall(frame(HEADERS, END_HEADERS, 3, plain_block() + lit))
                unit = b"".join(frame(HEADERS, END_HEADERS | END_STREAM, 5 + 2 * i,
                                      plain_block() + b"\xbe" * 4000) for i in range(4))
                sid = 13
            else:
                unit = frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 1)) * 4000
            while not stop.is_set():
                s.sendall(unit)
                if kind == "hpack":
                    sid += 8
                    unit = b"".join(frame(HEADERS, END_HEADERS | END_STREAM, sid + 2 * i,
                                          plain_block() + b"\xbe" * 4000) for i in range(4))
        except (OSError, EOFError):
            ended[0] += 1
        finally:
            s.close()


def bomb(port, kind, secs=5.0):
    stop = threading.Event()
    ended = [0]
    ts = [threading.Thread(target=bomb_conn, args=(port, kind, stop, ended), daemon=True)
          for _ in range(2)]
    for t in ts:
        t.start()
    time.sleep(0.5)
    s = dial(port)
    s.settimeout(10)
    s.sendall(opening())
    r = Reader(s)
    lat, sid, t_end = [], 1, time.time() + secs
    while time.time() < t_end:
        t0 = time.perf_counter()
        s.sendall(call(sid))
        r.until_end(sid)
        lat.append((time.perf_counter() - t0) * 1e3)
        sid += 2
    stop.set()
    for t in ts:
        t.join(5)
    s.close()
    lat.sort()
    print(f"RESULT grpc {kind} calls={len(lat)} p50_ms={lat[len(lat) // 2]:.3f} "
          f"p99_ms={lat[int(len(lat) * 0.99)]:.3f} attack_conns_ended={ended[0]}", flush=True)


def noread(port, pid, n):
    before = rss_kib(pid)
    socks = []
    # 500 PINGs every 20 ms (under nghttp2's 1,000 ACKs queued per read), up to 6 MB: past
    # the kernel's buffers on both sides, so that the ACKs pile up in the router
    pings = frame(PING, 0, 0, b"12345678") * 500

    def attack(i):
        s = dial(port, f"127.0.0.{2 + i % 10}")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(10)
        s.sendall(opening() + call(1))
        Reader(s).until_end(1)
        s.settimeout(3)
        try:
            for _ in range(700):
                s.sendall(pings)
                time.sleep(0.02)
        except OSError:
            pass
        socks.append(s)

    ts = [threading.Thread(target=attack, args=(i,), daemon=True) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    time.sleep(1.0)
    grown = rss_kib(pid) - before
    time.sleep(14.0)
    still = sum(is_open(s) for s in socks)
    print(f"RESULT grpc noread conns={n} rss_growth_kib={grown} "
          f"per_conn_kib={grown // max(n, 1)} still_open_after_15s={still}", flush=True)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "silent":
        silent(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    elif cmd == "bomb":
        bomb(int(sys.argv[2]), sys.argv[3])
    elif cmd == "noread":
        noread(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    else:
        sys.exit(__doc__)
