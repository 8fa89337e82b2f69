#!/usr/bin/env python3
"""Hostile clients for bench/abuse.sh, in plain sockets (no MessagePack library: the few
messages are spelled out in bytes, as docs/PROTOCOL.md's example does).

  abuse_probe.py idle PORT PID N     N connections each send one legal 64 KiB frame and stay
                                     idle; prints the server's RSS growth and a neighbour's
                                     PING p50/p99 meanwhile
  abuse_probe.py stream PORT         one client streams 64 KiB frames; a neighbour's PING
                                     p50/p99 meanwhile
  abuse_probe.py flood PORT ALGO     a user of victim_ALGO exhausts its 5/h, 100,000 users of
                                     flood_ALGO follow, then: is the victim still limited,
                                     and how many of 150 requests of a new flood user pass
                                     its 100/h
  abuse_probe.py slowloris PORT      on the metrics listener at PORT: 40 connections from
                                     127.0.0.1 drip a header line a second for 8 s; /healthz
                                     from 127.0.0.2 every 500 ms (2 s timeout): answered,
                                     p50/max latency; dripping connections closed within 1 s
                                     and still open at the end
  abuse_probe.py wrongtokens PORT     one process sends AUTH with a wrong token on a new
                                     connection, one after another, for 3 s: tokens checked
                                     ("unknown token") and refused as too many, a second
  abuse_probe.py silentflood PORT    10 addresses (127.0.0.2..11) x 1,000 connections that
                                     send nothing, then a client with $RL_TOKEN_FILE's token
                                     from 127.0.0.12: is it let in, and how fast
  abuse_probe.py loopcpu PORT PID WHO  on the metrics listener at PORT of process PID: 5
                                     scrapes 1.1 s apart (past the page cache, so each is
                                     rendered): the loop thread's CPU per scrape, from
                                     /proc/PID/task/PID/schedstat (ns), and the page's size
  abuse_probe.py scrapers PORT N SECS  N threads pull /metrics at PORT back to back for SECS:
                                     pages served, and their p50/max time
  abuse_probe.py inlinelimits PORT  on a router's RESP listener at PORT, with $RL_ATTACK_TOKEN
                                     and $RL_VICTIM_TOKEN (two [client] tokens): the attacker
                                     sends 200,000 CL.THROTTLE with distinct parameters, then
                                     the victim 300 CL.THROTTLE of one key at 100 a minute
                                     (burst 100): allowed, limited, errors of each
  abuse_probe.py inlinekeys PORT    the same two clients: the victim uses up its key (1,000 a
                                     day), the attacker sends N ($KEYS, 500,000) distinct keys
                                     each used up at once (1 a day), then the victim asks 5
                                     more times: how many pass (its counter evicted)
With $RL_TOKEN_FILE set, every connection first sends AUTH with that file's token
([6, 0, token]) and reads its reply, for servers that want one.
"""
import os
import resource
import socket
import struct
import sys
import threading
import time


def frame(payload):
    return struct.pack(">I", len(payload)) + payload


def mp_str(b):
    if len(b) < 32:
        return bytes([0xA0 | len(b)]) + b
    if len(b) < 256:
        return bytes([0xD9, len(b)]) + b
    return b"\xdb" + struct.pack(">I", len(b)) + b


def mp_uint(n):
    if n < 128:
        return bytes([n])
    return b"\xce" + struct.pack(">I", n)


def check(rid, svc, user, cost=1):
    # [1, id, service, user, nil, cost]
    return frame(b"\x96\x01" + mp_uint(rid) + mp_str(svc) + mp_str(user) + b"\xc0" + mp_uint(cost))


PING = frame(b"\x92\x02\x07")


def big_frame():
    svc = b"flood_token_bucket"
    head = b"\x94\x01\x01" + mp_str(svc)
    ulen = 65536 - len(head) - 5
    return frame(head + b"\xdb" + struct.pack(">I", ulen) + b"u" * ulen)


def auth(s):
    """AUTH with $RL_TOKEN_FILE's token when it is set; the reply is read and must be AUTH."""
    path = os.environ.get("RL_TOKEN_FILE")
    if not path:
        return s
    with open(path, "rb") as f:
        token = f.read().rstrip(b"\r\n")
    s.sendall(frame(b"\x93\x06\x00" + mp_str(token)))
    reply = read_frame(s)
    if reply[1] != 0x06:
        raise SystemExit(f"AUTH refused: {reply!r}")
    return s


def dial(port):
    return auth(socket.create_connection(("127.0.0.1", port)))


def read_frame(s):
    def exact(n):
        b = b""
        while len(b) < n:
            c = s.recv(n - len(b))
            if not c:
                raise ConnectionError("closed")
            b += c
        return b
    (n,) = struct.unpack(">I", exact(4))
    return exact(n)


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1])
    return -1


def pings(port, n=300):
    p = dial(port)
    p.settimeout(10)
    p.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    lat = []
    for _ in range(n):
        t = time.perf_counter()
        p.sendall(PING)
        read_frame(p)
        lat.append((time.perf_counter() - t) * 1e3)
    p.close()
    lat.sort()
    return lat[len(lat) // 2], lat[int(len(lat) * 0.99)]


def idle(port, pid, n):
    resource.setrlimit(resource.RLIMIT_NOFILE, (n + 100, max(n + 100, resource.getrlimit(resource.RLIMIT_NOFILE)[1])))
    before = rss_kib(pid)
    f = big_frame()
    socks = []
    for i in range(n):
        s = socket.socket()
        s.bind((f"127.0.0.{2 + i % 4}", 0))  # 4 addresses: under any per-address cap
        s.connect(("127.0.0.1", port))
        auth(s)
        s.sendall(f)
        socks.append(s)
    for s in socks:
        s.settimeout(10)
        read_frame(s)
    time.sleep(0.5)
    p50, p99 = pings(port)
    after = rss_kib(pid)
    print(f"RESULT idle conns={n} rss_before_kib={before} rss_after_kib={after} "
          f"rss_growth_kib={after - before} ping_p50_ms={p50:.3f} ping_p99_ms={p99:.3f}")


def stream(port):
    f = big_frame()
    s = dial(port)
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            try:
                if not s.recv(65536):
                    return
            except OSError:
                return

    def writer():
        while not stop.is_set():
            try:
                s.sendall(f)
            except OSError:
                return
    threading.Thread(target=reader, daemon=True).start()
    threading.Thread(target=writer, daemon=True).start()
    time.sleep(0.3)
    try:
        p50, p99 = pings(port)
        print(f"RESULT stream ping_p50_ms={p50:.3f} ping_p99_ms={p99:.3f}")
    except OSError as e:
        print(f"RESULT stream ping_p50_ms=timeout ping_p99_ms=timeout ({e})")
    stop.set()


def decode_check(payload):
    # [1, id, code, limit, remaining, reset_ms, retry_after_ms] or an ERROR
    if payload[1] != 0x01:
        return -1
    i = 2
    b = payload[i]
    i += 1 if b < 128 else 5  # id: fixint or uint32 (the server's shortest form)
    if b == 0xCC:
        i -= 3
    elif b == 0xCD:
        i -= 2
    return payload[i]


def flood(port, algo):
    s = dial(port)
    s.settimeout(30)
    victim = f"victim_{algo}".encode()
    fl = f"flood_{algo}".encode()

    def one(svc, user, cost=1):
        s.sendall(check(1, svc, user, cost))
        return decode_check(read_frame(s))
    for _ in range(5):
        one(victim, b"v")
    before = one(victim, b"v")
    batch = 5000
    for start in range(0, 100000, batch):
        buf = b"".join(check(2, fl, b"f%d" % i, 100 if i % 7 == 0 else 1)
                       for i in range(start, start + batch))
        s.sendall(buf)
        for _ in range(batch):
            read_frame(s)
    after = one(victim, b"v")
    allowed = sum(1 for _ in range(150) if one(fl, b"newcomer") in (0, 5))
    print(f"RESULT flood algo={algo} victim_limited_before={int(before == 1)} "
          f"victim_limited_after={int(after == 1)} newcomer_allowed_of_150={allowed} limit=100")


def healthz(port, src, timeout=2.0):
    """Seconds a GET /healthz from src took, or None if it was not answered 200 in time."""
    t0 = time.monotonic()
    try:
        s = socket.socket()
        s.settimeout(timeout)
        s.bind((src, 0))
        s.connect(("127.0.0.1", port))
        s.sendall(b"GET /healthz HTTP/1.0\r\nHost: probe\r\n\r\n")
        data = b""
        while True:
            b = s.recv(4096)
            if not b:
                break
            data += b
        s.close()
    except OSError:
        return None
    return time.monotonic() - t0 if data.startswith(b"HTTP/1.1 200") else None


def slowloris(port, conns=40, run_s=8.0):
    drip = []
    for _ in range(conns):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.connect(("127.0.0.1", port))
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: victim\r\n")
        s.setblocking(False)
        drip.append([s, time.monotonic(), None])
    t0 = time.monotonic()
    lat, missed, n = [], 0, 0
    next_drip, next_probe = t0 + 1, t0
    while time.monotonic() - t0 < run_s:
        now = time.monotonic()
        if now >= next_probe:
            took = healthz(port, "127.0.0.2")
            n += 1
            if took is None:
                missed += 1
                lat.append(2.0)
            else:
                lat.append(took)
            next_probe += 0.5
        if now >= next_drip:
            for d in drip:
                if d[2] is None:
                    try:
                        d[0].send(b"X-Drip: still here\r\n")
                    except OSError:
                        d[2] = time.monotonic()
            next_drip += 1
        for d in drip:
            if d[2] is None:
                try:
                    if d[0].recv(4096) == b"":
                        d[2] = time.monotonic()
                except BlockingIOError:
                    pass
                except OSError:
                    d[2] = time.monotonic()
        time.sleep(0.02)
    at_once = sum(1 for d in drip if d[2] is not None and d[2] - d[1] < 1)
    still = sum(1 for d in drip if d[2] is None)
    for d in drip:
        d[0].close()
    lat.sort()
    print(f"RESULT slowloris healthz healthz_answered={n - missed} healthz_asked={n} "
          f"healthz_p50_ms={lat[len(lat) // 2] * 1000:.1f} healthz_max_ms={lat[-1] * 1000:.1f} "
          f"closed_within_1s={at_once} open_at_end={still} conns={conns}")


def auth_frame(token):
    return frame(b"\x93\x06\x00" + mp_str(token))


def wrongtokens(port, secs=3.0):
    checked = slowed = other = 0
    t0 = time.time()
    while time.time() - t0 < secs:
        s = socket.create_connection(("127.0.0.1", port))
        try:
            s.sendall(auth_frame(b"wrong-token-0123456789"))
            r = read_frame(s)
        except OSError:
            r = b""
        s.close()
        if b"unknown token" in r:
            checked += 1
        elif b"too many failed" in r:
            slowed += 1
        else:
            other += 1
    print(f"RESULT preauth wrong_tokens checked_per_s={checked / secs:.0f} "
          f"refused_per_s={slowed / secs:.0f} other={other}")


def silentflood(port, addrs=10, per=1000):
    socks = []
    for a in range(addrs):
        for _ in range(per):
            s = socket.socket()
            s.bind((f"127.0.0.{a + 2}", 0))
            s.connect(("127.0.0.1", port))
            socks.append(s)
    time.sleep(0.5)
    with open(os.environ["RL_TOKEN_FILE"], "rb") as f:
        token = f.read().rstrip(b"\r\n")
    t0 = time.time()
    s = socket.socket()
    s.bind(("127.0.0.12", 0))
    s.connect(("127.0.0.1", port))
    s.sendall(auth_frame(token))
    try:
        r = read_frame(s)
    except OSError:
        r = b""
    ms = (time.time() - t0) * 1000
    ok = len(r) > 1 and r[1] == 0x06
    print(f"RESULT preauth silent_flood valid_client_in={int(ok)} answer_ms={ms:.1f} "
          f"silent={len(socks)}")
    for c in socks + [s]:
        c.close()


def http_get(port, path="/metrics", timeout=10.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(b"GET " + path.encode() + b" HTTP/1.0\r\nHost: x\r\nConnection: close\r\n\r\n")
    chunks = []
    while True:
        b = s.recv(1 << 20)
        if not b:
            break
        chunks.append(b)
    s.close()
    raw = b"".join(chunks)
    return int(raw.split(b" ", 2)[1]), raw.partition(b"\r\n\r\n")[2]


def loop_ns(pid):
    with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
        return int(f.read().split()[0])


def loopcpu(port, pid, who, n=5, gap=1.1):
    http_get(port)  # the first page (allocations that stay)
    time.sleep(gap)
    costs, size, refused = [], 0, 0
    while len(costs) < n and refused < 10:
        t0 = loop_ns(pid)
        status, body = http_get(port)
        time.sleep(0.2)  # the loop's answer is in; nothing else runs on it
        if status == 200:  # 503: the loop did not answer within 1 s (a loaded machine)
            costs.append((loop_ns(pid) - t0) / 1e6)
            size = len(body)
        else:
            refused += 1
        time.sleep(gap - 0.2)
    costs.sort()
    if costs:
        print(f"RESULT loopcpu {who} loop_ms_per_scrape={costs[len(costs) // 2]:.3f} "
              f"max_ms={costs[-1]:.3f} page_MB={size / 1e6:.2f} refused={refused}", flush=True)


def scrapers(port, n, secs):
    stop = time.monotonic() + secs
    lat, bad = [], [0]

    def run():
        while time.monotonic() < stop:
            t = time.perf_counter()
            try:
                status, _ = http_get(port)
            except OSError:
                status = 0
            if status != 200:
                bad[0] += 1
            lat.append((time.perf_counter() - t) * 1e3)

    th = [threading.Thread(target=run) for _ in range(n)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    lat.sort()
    print(f"RESULT scrapers pages pages={len(lat)} bad={bad[0]} "
          f"p50_ms={lat[len(lat) // 2]:.1f} max_ms={lat[-1]:.1f}", flush=True)


def resp_cmd(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def resp_replies(s, n):
    """Reads n replies of CL.THROTTLE or AUTH: the first integer of each array (0 allowed,
    1 limited), "ok" for +OK, or "err" for an error."""
    buf, out = b"", []
    while len(out) < n:
        c = s.recv(1 << 20)
        if not c:
            raise ConnectionError("closed")
        buf += c
        while len(out) < n:
            if buf.startswith(b"+") or buf.startswith(b"-"):
                end = buf.find(b"\r\n")
                if end < 0:
                    break
                out.append("ok" if buf[0:1] == b"+" else "err")
                buf = buf[end + 2:]
                continue
            # *5 then 5 integers: 6 lines
            at, lines = 0, []
            for _ in range(6):
                end = buf.find(b"\r\n", at)
                if end < 0:
                    break
                lines.append(buf[at:end])
                at = end + 2
            if len(lines) < 6:
                break
            out.append(int(lines[1][1:]))
            buf = buf[at:]
    return out


def resp_client(port, token):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(resp_cmd("AUTH", token))
    if resp_replies(s, 1) != ["ok"]:
        raise SystemExit("AUTH refused")
    return s


def resp_pipeline(s, cmds, batch=2000):
    out = []
    for i in range(0, len(cmds), batch):
        part = cmds[i:i + batch]
        s.sendall(b"".join(part))
        out += resp_replies(s, len(part))
    return out


def tally(replies):
    return (sum(1 for r in replies if r == 0), sum(1 for r in replies if r == 1),
            sum(1 for r in replies if r == "err"))


def inlinelimits(port):
    a = resp_client(port, os.environ["RL_ATTACK_TOKEN"])
    v = resp_client(port, os.environ["RL_VICTIM_TOKEN"])
    t0 = time.monotonic()
    got = resp_pipeline(a, [resp_cmd("CL.THROTTLE", "a", i, 1, 3600) for i in range(200000)])
    secs = time.monotonic() - t0
    aa, al, ae = tally(got)
    va, vl, ve = tally(resp_pipeline(v, [resp_cmd("CL.THROTTLE", "victim", 99, 100, 60)] * 300,
                                     batch=1))
    print(f"RESULT inline limits attack_s={secs:.2f} attacker_allowed={aa} attacker_limited={al} "
          f"attacker_errors={ae} victim_allowed={va} victim_limited={vl} victim_errors={ve}",
          flush=True)


def inlinekeys(port):
    n = int(os.environ.get("KEYS", "500000"))
    a = resp_client(port, os.environ["RL_ATTACK_TOKEN"])
    v = resp_client(port, os.environ["RL_VICTIM_TOKEN"])
    before = tally(resp_pipeline(v, [resp_cmd("CL.THROTTLE", "victim", 999, 1000, 86400, 1000)] +
                                 [resp_cmd("CL.THROTTLE", "victim", 999, 1000, 86400)] * 5, batch=1))
    t0 = time.monotonic()
    got = resp_pipeline(a, [resp_cmd("CL.THROTTLE", "k%d" % i, 0, 1, 86400) for i in range(n)])
    secs = time.monotonic() - t0
    aa, al, ae = tally(got)
    va, vl, ve = tally(resp_pipeline(v, [resp_cmd("CL.THROTTLE", "victim", 999, 1000, 86400)] * 5,
                                     batch=1))
    print(f"RESULT inline keys attack_s={secs:.2f} attacker_keys={n} attacker_errors={ae} "
          f"victim_limited_before={before[1]} victim_allowed_after={va} "
          f"victim_limited_after={vl} victim_errors_after={ve}", flush=True)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "idle":
        idle(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    elif cmd == "stream":
        stream(int(sys.argv[2]))
    elif cmd == "flood":
        flood(int(sys.argv[2]), sys.argv[3])
    elif cmd == "slowloris":
        slowloris(int(sys.argv[2]))
    elif cmd == "wrongtokens":
        wrongtokens(int(sys.argv[2]))
    elif cmd == "silentflood":
        silentflood(int(sys.argv[2]))
    elif cmd == "loopcpu":
        loopcpu(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    elif cmd == "scrapers":
        scrapers(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
    elif cmd == "inlinelimits":
        inlinelimits(int(sys.argv[2]))
    elif cmd == "inlinekeys":
        inlinekeys(int(sys.argv[2]))
    else:
        sys.exit(__doc__)
