#!/usr/bin/env python3
"""Writes the seed corpora of tests/fuzz/corpus/ (committed; rerun after a format change):
real frames of every op and the edge cases of docs/PROTOCOL.md for wire, configs for conf,
assignments for assign, log lines for reqline. Plain bytes: no MessagePack library."""
import os
import struct

top = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(kind, name, data):
    d = os.path.join(top, kind)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def frame(p):
    return struct.pack(">I", len(p)) + p


def s(b):
    return bytes([0xA0 | len(b)]) + b if len(b) < 32 else bytes([0xD9, len(b)]) + b


wire = {
    "check": frame(b"\x96\x01\x07" + s(b"checkout") + s(b"alice") + b"\xc0\x01"),
    "check_endpoint": frame(b"\x96\x01\xce\xff\xff\xff\xff" + s(b"checkout") + s(b"u") + s(b"/pay") + b"\xce\x00\x0f\x42\x40"),
    "ping": frame(b"\x92\x02\x01"),
    "unknown_op": frame(b"\x92\xcc\xc8\x05"),  # op 200: no op has it (UNKNOWN_OP)
    "stats": frame(b"\x92\x03\x02"),
    "clock": frame(b"\x93\x04\x03\xcf" + struct.pack(">Q", 1700000000000)),
    "hello": frame(b"\x93\x05\x00" + s(b"router")),
    "auth": frame(b"\x93\x06\x00" + s(b"token-0123456789")),
    "auth_bin": frame(b"\x93\x06\x01\xc4\x04\x00\x01\x02\x03"),
    "auth_reply": frame(b"\x93\x06\x00" + s(b"web")),
    "pipelined": frame(b"\x92\x02\x01") * 3 + frame(b"\x96\x01\x07" + s(b"s") + s(b"u") + b"\xc0\x00"),
    "check_inline": frame(b"\x97\x01\x07" + s(b"api") + s(b"alice") + b"\xc0\x01\x94" + s(b"gcra") + b"\x0a\xcd\x03\xe8\x05"),
    "check_inline_nil": frame(b"\x97\x01\x07" + s(b"api") + s(b"alice") + b"\xc0\x01\x94" + s(b"fixed_window") + b"\x0a\xcd\x03\xe8\xc0"),
    "check_reply": frame(b"\x97\x01\x07\x00\x0a\x09\xcd\x03\xe8\x00"),
    "ping_reply": frame(b"\x93\x02\x01" + s(b"n1")),
    "stats_reply": frame(b"\x93\x03\x02\x82" + s(b"checks") + b"\x05" + s(b"keys") + b"\xd3" + struct.pack(">q", -1)),
    "error_reply": frame(b"\x94\xcc\xff\x00\x01" + s(b"frame length must be 1..65536")),
    "throttled": frame(b"\x95\x07\x08" + s(b"web") + b"\xcd\xea\x60\x14"),
    "throttled_bare": frame(b"\x92\x07\x09"),
    "throttled_reply": frame(b"\x94\x07\x08\x91\x88" + s(b"service") + s(b"web") + s(b"endpoint") + b"\xc0" + s(b"user") + s(b"bob") + s(b"start_ms") + b"\xcf" + struct.pack(">Q", 1700000000000) + s(b"end_ms") + b"\x00" + s(b"refused") + b"\x0c" + s(b"ended") + s(b"open") + s(b"node") + s(b"a") + b"\x91" + s(b"b")),
    "zero_length": b"\x00\x00\x00\x00",
    "too_long": b"\x00\x01\x00\x01" + b"\x90",
    "truncated": frame(b"\x96\x01\x07\xd9\x10abc"),
    "nested": frame(b"\x91" * 40 + b"\x00"),
    "map32_huge": frame(b"\xdf\xff\xff\xff\xff\x01"),
    "bin_user": frame(b"\x96\x01\x07" + s(b"s") + b"\xc4\x01u\xc0\x01"),
    "adjust": frame(b"\x96\x09\x07" + s(b"llm") + s(b"alice") + b"\xc0\xcd\x01\xf4"),
    "adjust_refund": frame(b"\x96\x09\x07" + s(b"llm") + s(b"alice") + b"\xc0\xd2\xff\xf0\xbd\xc0"),
    "adjust_inline": frame(b"\x98\x09\x07" + s(b"api") + s(b"alice") + b"\xc0\xe0\x94" + s(b"gcra") + b"\x0a\xcd\x03\xe8\x05\x2a"),
    "adjust_reply": frame(b"\x97\x09\x07\x00\x0a\x00\xcd\x03\xe8\xcd\x02\xbc"),
    "release": frame(b"\x96\x0a\x07" + s(b"export") + s(b"alice") + b"\xc0\x01"),
    "release_inline": frame(b"\x98\x0a\x07" + s(b"api") + s(b"alice") + b"\xc0\x02\x94" + s(b"concurrency") + b"\x05\xcd\x75\x30\xc0\x2a"),
    "release_reply": frame(b"\x97\x0a\x07\x00\x05\x03\xcd\x75\x30\x00"),
    "http": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    "tls": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
}

def u64(v):
    return b"\xcf" + struct.pack(">Q", v)


def rec(p):
    return struct.pack(">I", len(p)) + p


# handoff records (docs/PROTOCOL.md, "Handoff records"): header, keys, end
ho_header = rec(b"\x95\x00" + s(b"rl-handoff") + b"\x01" + u64(1700000000000) + b"\x03")
ho_fw = rec(b"\x9d\x01" + u64(0x1234567890ABCDEF) + b"\x05\x00" + u64(0xFEDCBA9876543210)
            + b"\x00\x0a\xce" + struct.pack(">I", 3600000) + b"\x0a\x00\xcd\x0b\xb8\x03\x90")
ho_swl = rec(b"\x9d\x01" + u64(0x0123456789ABCDEF) + b"\x0f\x01\xce\x00\x00\x00\x07"
             + b"\x01\x0a\xcd\xea\x60\x0a\x01\x00\x00"
             + b"\x94\xcd\x03\xe8\x01\xff\x02")
ho_end = rec(b"\x92\x02\x02")
ho_stream = ho_header + ho_fw + ho_swl + ho_end
wire["handoff_out"] = frame(b"\x94\x0b\x01\x03\x00")
wire["handoff_out_next"] = frame(b"\x94\x0b\x02\x03\xcd\xff\xdc")
wire["handoff_out_reply"] = frame(b"\x94\x0b\x01\xc5" + struct.pack(">H", len(ho_stream)) + ho_stream + b"\x00")
wire["handoff_in"] = frame(b"\x94\x0c\x01\x03\xc5" + struct.pack(">H", len(ho_stream)) + ho_stream)
wire["handoff_in_empty"] = frame(b"\x94\x0c\x01\x03\xc4\x00")
wire["handoff_in_reply"] = frame(b"\x94\x0c\x01\x02\x00")
for k, v in wire.items():
    put("wire", k, v)
put("handoff", "stream", ho_stream)
put("handoff", "header", ho_header)
put("handoff", "key_fixed_window", ho_fw)
put("handoff", "key_log", ho_swl)
put("handoff", "cut", ho_stream[:-3])

conf_base = open(os.path.join(os.path.dirname(top), "..", "..", "cluster.conf")).read()
confs = {
    "cluster": conf_base,
    "minimal": "[node a]\nlisten = 127.0.0.1:7401\n",
    "client_sections": "[client web]\ntoken_sha256 = abababababababababababababababababababababababababababababababab\nservices = shop, *\nstats = yes\n[service shop]\nlimit = gcra 1 per 1s\n[cluster]\nfencing = disconnect\n",
    "clients": "[clients]\nmax_connections = 10\nmax_connections_per_peer = 2\nidle_timeout = 0\n"
               "frame_timeout = 1s\nbuffer_memory = 2mb\nrouter_reserve = 0\n",
    "tiers": "[service s]\nfailure = closed\nmode = shadow\nlimit = token_bucket 100 per 1m burst 20\n"
             "limit = fixed_window 1000 per 1h\n[service s /pay]\nlimit = gcra 5 per 1s\n",
    "all_algos": "".join(f"[service {a}]\nlimit = {a} 10 per 1s\n" for a in (
        "fixed_window", "sliding_window_log", "sliding_window_counter", "token_bucket",
        "gcra", "leaky_bucket")),
    "errors": "[cluster]\nshards = 0\n",
    "dup": "[router]\n[router]\n",
    "ipv6": "[router]\nlisten = [::1]:7400\n[node b]\nlisten = [fe80::1%eth0]:7401\nmemory = 64mb\n",
    "zk": "[cluster]\nname = prod\nzookeeper = zk1:2181,zk2:2181/chroot\nsession_timeout = 10s\n",
    "continuation": "[service s]\nlimit = fixed_window 1 per 1ms ; comment\n# comment\n",
}
for k, v in confs.items():
    put("conf", k, v)

assigns = {
    "empty": "rl-assignment 1 64\n",
    "some": "rl-assignment 1 64\n0 a\n3 node-b\n63 c.d_e\n",
    "comments": "# made by rl-rebalance\nrl-assignment 1 64\n\n5 a # hot\n",
    "wrong_shards": "rl-assignment 1 4096\n",
    "bad_line": "rl-assignment 1 64\n64 a\nx y\n",
    "dup": "rl-assignment 1 64\n1 a\n1 b\n",
}
for k, v in assigns.items():
    put("assign", k, v)

lines = {
    "plain": "1700000000000 17 n1 0 0123456789abcdef checkout alice",
    "no_node": "1700000000001 0 - 2 fedcba9876543210 s -",
    "escaped": "1700000000002 5 n2 1 00000000000000ff svc%20x us%25er%0a",
    "crlf": "1700000000003 1 a 4 0000000000000001 s u\r",
    "bad_hex": "1700000000004 1 a 0 zz s u",
    "short": "1700000000005 1",
    "adjust": "1700000000006 1 a 0 0000000000000001 s u adjust",
    "release": "1700000000007 1 a 2 0000000000000001 s u release",
}
for k, v in lines.items():
    put("reqline", k, v)

# envoycfg: envoyproxy/ratelimit YAML configurations (docs/ENVOY.md), upstream's shapes and ours.
envoy = {
    "basic": "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    descriptors:\n"
             "      - key: subkey1\n        rate_limit:\n          unit: second\n          requests_per_unit: 5\n"
             "  - key: key2\n    rate_limit:\n      unit: minute\n      requests_per_unit: 20\n"
             "  - key: key2\n    value: value3\n  - key: key6\n    rate_limit:\n      unlimited: true\n"
             "  - key: key7\n    detailed_metric: true\n    shadow_mode: yes\n    rate_limit:\n"
             "      name: n\n      replaces:\n        - name: other\n      unit: day\n      requests_per_unit: 70\n",
    "wildcard": "domain: w\ndescriptors:\n  - key: wild\n    value: foo*\n    share_threshold: true\n"
                "    rate_limit: {unit: minute, requests_per_unit: 20}\n  - key: mid\n    value: a*b*c\n"
                "    descriptors:\n      - key: k\n        rate_limit: {unit: hour, requests_per_unit: 1}\n",
    "extensions": "domain: api\ndescriptors:\n  - key: user\n    rate_limit:\n      - unit: second\n"
                  "        requests_per_unit: 10\n        algorithm: token_bucket\n        burst: 20\n"
                  "      - unit: week\n        requests_per_unit: 1000\n        algorithm: sliding_window_log\n",
    "metadata": "domain: m\ndescriptors:\n  - key: k\n    metadata:\n      a: [1, {b: c}]\n"
                "    quota_mode: true\n    value_to_metric: false\n    rate_limit: {unit: Second}\n",
    "errors": "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n",
    "alias": "domain: d\ndescriptors:\n  - &a {key: k}\n  - *a\n",
    "flow": "{domain: f, descriptors: [{key: a, descriptors: [{key: b, value: c, rate_limit: {unit: year}}]}]}\n",
    "empty": "",
}
for k, v in envoy.items():
    put("envoycfg", k, v)


# rls: RateLimitRequest messages (proto/envoy/service/ratelimit/v3/rls.proto), hand-encoded.
def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field(num, data):
    if isinstance(data, int):
        return varint(num << 3) + varint(data)
    if isinstance(data, str):
        data = data.encode()
    return varint(num << 3 | 2) + varint(len(data)) + data


def entry(k, v):
    return field(1, field(1, k) + field(2, v))


rls = {
    "simple": field(1, "edge") + field(2, entry("remote_address", "10.0.0.1")),
    "full": field(1, "edge") + field(2, entry("path", "/api/v1") + entry("method", "GET")
                                     + field(2, field(1, 42) + field(2, 3)) + field(3, field(1, 7)))
            + field(2, entry("generic_key", "a")) + field(3, 5),
    "unknown_fields": field(1, "edge") + field(9, "x") + varint(10 << 3) + varint(1) + field(2, entry("k", "")),
    "empty": b"",
    "truncated": field(1, "edge")[:-2],
}
for k, v in rls.items():
    put("rls", k, v)
