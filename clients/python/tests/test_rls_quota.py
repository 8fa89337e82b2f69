"""The gRPC front's quota_mode, response metadata and stream-end reports (docs/ENVOY.md,
"quota_mode", "Response metadata", "Charging a stream's real cost") on a real router and
node, called with grpcio as Envoy would.

quota_mode as envoyproxy/ratelimit judges it: a call is over its limit when a descriptor
without quota_mode is, or when every quota_mode descriptor with a limit is; dynamic_metadata
holds upstream's fields (domain, descriptors, hitsAddend) and `decided`: which descriptor
and which limit decided the call."""

import pytest

from rls_harness import caller_fixture, codes, make_stub, request, rls_cluster

pytestmark = pytest.mark.integration

grpc = pytest.importorskip("grpc")
json_format = pytest.importorskip("google.protobuf.json_format")

QUOTA = """\
domain: q
descriptors:
  - key: rate
    rate_limit:
      name: per_rate
      unit: hour
      requests_per_unit: 3
  - key: quota1
    quota_mode: true
    rate_limit:
      name: small
      unit: hour
      requests_per_unit: 1
  - key: quota2
    quota_mode: true
    rate_limit:
      name: big
      unit: hour
      requests_per_unit: 2
  - key: shadowq
    quota_mode: true
    shadow_mode: true
    rate_limit:
      unit: hour
      requests_per_unit: 1
  - key: free
    quota_mode: true
    rate_limit:
      unlimited: true
  - key: tenant
    descriptors:
      - key: plan
        value: gold
        quota_mode: true
        rate_limit:
          - name: fast
            unit: second
            requests_per_unit: 100
          - name: daily
            unit: day
            requests_per_unit: 1
"""


LLM = """\
domain: llm
descriptors:
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: 100
"""

MARK = ("ratelimiter.charge", "stream_done")


@pytest.fixture(scope="module")
def rls(tmp_path_factory):
    d = tmp_path_factory.mktemp("rlsq")
    (d / "envoy").mkdir()
    (d / "envoy" / "q.yaml").write_text(QUOTA)
    (d / "envoy" / "llm.yaml").write_text(LLM)
    c = rls_cluster(d, "envoy")
    yield c
    c.stop()


@pytest.fixture(scope="module")
def call(rls, pb):
    yield from caller_fixture(rls, pb)


def meta(r):
    return json_format.MessageToDict(r.dynamic_metadata)


def test_quota_over_only_when_every_quota_descriptor_is(call, pb):
    OK, OVER = pb.RateLimitResponse.OK, pb.RateLimitResponse.OVER_LIMIT
    descs = [[("rate", "u1")], [("quota1", "u1")], [("quota2", "u1")]]
    r = call("q", *descs)
    assert r.overall_code == OK and codes(pb, r) == ["OK", "OK", "OK"]
    # quota1 (1 per hour) is over, quota2 is not: the call passes, quota1's status says over
    r = call("q", *descs)
    assert codes(pb, r) == ["OK", "OVER_LIMIT", "OK"]
    assert r.overall_code == OK
    m = meta(r)["decided"]
    assert m["descriptor"] == 2 and m["code"] == "OK"  # the least left among those OK
    assert m["limit"] == {"name": "big", "requests_per_unit": 2, "unit": "HOUR"}
    assert m["limit_remaining"] == 0 and m["quota_mode"] is True
    # both quota descriptors over (rate has 1 of 3 left): the call is over, decided by the
    # first quota descriptor over
    r = call("q", *descs)
    assert codes(pb, r) == ["OK", "OVER_LIMIT", "OVER_LIMIT"]
    assert r.overall_code == OVER
    d = meta(r)["decided"]
    assert d["descriptor"] == 1 and d["quota_mode"] is True and d["code"] == "OVER_LIMIT"
    assert d["limit"]["name"] == "small" and d["limit_remaining"] == 0


def test_a_rate_descriptor_over_refuses_whatever_the_quotas(call, pb):
    for _ in range(3):
        assert call("q", [("rate", "u2")]).overall_code == pb.RateLimitResponse.OK
    r = call("q", [("quota2", "u2")], [("rate", "u2")])
    assert codes(pb, r) == ["OK", "OVER_LIMIT"]
    assert r.overall_code == pb.RateLimitResponse.OVER_LIMIT
    d = meta(r)["decided"]
    assert d["descriptor"] == 1 and d["quota_mode"] is False and d["code"] == "OVER_LIMIT"
    assert d["limit"]["name"] == "per_rate" and d["full_key"] == "q.rate"


def test_a_lone_quota_descriptor_over_refuses(call, pb):
    assert call("q", [("quota1", "u3")]).overall_code == pb.RateLimitResponse.OK
    r = call("q", [("quota1", "u3")])
    assert r.overall_code == pb.RateLimitResponse.OVER_LIMIT  # every quota one (1 of 1)
    assert meta(r)["decided"]["descriptor"] == 0


def test_descriptors_without_a_limit_take_no_part(call, pb):
    call("q", [("quota1", "u4")])
    # unlimited (quota_mode), unmatched and shadowed quota descriptors do not count: the one
    # quota descriptor with a limit is over, so the call is
    r = call("q", [("free", "x")], [("nothing", "x")], [("quota1", "u4")])
    assert codes(pb, r) == ["OK", "OK", "OVER_LIMIT"]
    assert r.overall_code == pb.RateLimitResponse.OVER_LIMIT
    assert meta(r)["decided"]["descriptor"] == 2
    # a shadowed quota descriptor over its limit is OK: with it, not every quota one is over
    call("q", [("shadowq", "u4")])
    r = call("q", [("shadowq", "u4")], [("quota1", "u4")])
    assert codes(pb, r) == ["OK", "OVER_LIMIT"]
    assert r.overall_code == pb.RateLimitResponse.OK
    d = meta(r)["decided"]
    assert d["descriptor"] == 0 and d["shadow_mode"] is True and d["limit_remaining"] == 0


def test_metadata_as_upstream_fills_it(call, pb):
    r = call("q", [("rate", "m1")], [("nothing", "a"), ("deeper", "b")], hits=2)
    m = meta(r)
    assert m["domain"] == "q"
    assert m["hitsAddend"] == 2
    assert m["descriptors"] == [{"entries": ["rate=m1"]},
                                {"entries": ["nothing=a", "deeper=b"]}]
    assert m["decided"] == {"descriptor": 0, "code": "OK", "limit_remaining": 1,
                            "quota_mode": False, "shadow_mode": False, "full_key": "q.rate",
                            "limit": {"name": "per_rate", "requests_per_unit": 3,
                                      "unit": "HOUR"}}
    # nothing with a limit: no `decided`; no hits_addend: no `hitsAddend`
    m = meta(call("nowhere", [("a", "b")]))
    assert m == {"domain": "nowhere", "descriptors": [{"entries": ["a=b"]}]}


def test_metadata_of_an_override_and_descriptor_hits(call, pb):
    req = request(pb, "q", [("rate", "m2")])
    req.descriptors[0].limit.requests_per_unit = 7
    req.descriptors[0].limit.unit = pb.RateLimitResponse.RateLimit.MINUTE
    req.descriptors[0].hits_addend.value = 3
    r = call.stub(req, timeout=5)
    d = meta(r)["descriptors"][0]
    assert d["entries"] == ["rate=m2"]
    assert d["limit"] == "requests_per_unit:7 unit:minute"
    assert d["hitsAddend"] == 3
    dec = meta(r)["decided"]
    assert dec["limit"]["requests_per_unit"] == 7 and dec["limit_remaining"] == 4
    assert "full_key" not in dec  # an override is no descriptor of the configuration


def test_several_limits_name_the_one_that_decided(call, pb):
    r = call("q", [("tenant", "t"), ("plan", "gold")])
    d = meta(r)["decided"]
    assert d["limit"]["name"] == "daily" and d["limit"]["index"] == 1  # the least left
    assert d["full_key"] == "q.tenant.plan_gold"
    r = call("q", [("tenant", "t"), ("plan", "gold")])
    assert r.overall_code == pb.RateLimitResponse.OVER_LIMIT
    assert meta(r)["decided"]["limit"]["name"] == "daily"


def test_bytes_that_are_not_utf8_come_back_escaped(rls, pb):
    """protobuf-c does not check a request's strings; the answer must still be a message
    every decoder takes (a string field holds UTF-8): the entry is written with \\xHH."""
    import grpc as g

    raw = request(pb, "q", [("rate", "ZZZZ")]).SerializeToString()
    assert raw.count(b"ZZZZ") == 1
    raw = raw.replace(b"ZZZZ", b"\xff\xfeZZ")
    ch = g.insecure_channel(f"127.0.0.1:{rls.rls_port}")
    stub = ch.unary_unary("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
                          request_serializer=lambda b: b,
                          response_deserializer=pb.RateLimitResponse.FromString)
    r = stub(raw, timeout=5)
    ch.close()
    assert meta(r)["descriptors"][0]["entries"] == ["rate=\\xff\\xfeZZ"]


def test_metadata_of_long_strings_and_many_descriptors(rls, pb):
    """The Struct is written by hand (router/rls_meta.c): lengths of one, two and three
    varint bytes, an escape that makes a string four times longer (5,000 bytes that are not
    UTF-8 become 20,000), and more descriptors than an answer is built for without
    allocating (4): every decoder must take it and find each field."""
    import grpc as g

    descs = [[("rate", "A" * 200)], [("nothing", "Z" * 5000)]]
    descs += [[("nothing", str(i))] for i in range(5)]
    raw = request(pb, "q", *descs, hits=1).SerializeToString()
    assert raw.count(b"Z" * 5000) == 1
    raw = raw.replace(b"Z" * 5000, b"\xff" * 5000)
    ch = g.insecure_channel(f"127.0.0.1:{rls.rls_port}")
    stub = ch.unary_unary("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
                          request_serializer=lambda b: b, response_deserializer=lambda b: b)
    body = stub(raw, timeout=5)
    ch.close()
    r = pb.RateLimitResponse.FromString(body)
    m = meta(r)
    assert m["domain"] == "q" and m["hitsAddend"] == 1
    assert [d["entries"] for d in m["descriptors"]] == (
        [["rate=" + "A" * 200], ["nothing=" + "\\xff" * 5000]] +
        [[f"nothing={i}"] for i in range(5)])
    assert m["decided"]["descriptor"] == 0 and m["decided"]["full_key"] == "q.rate"
    assert len(r.statuses) == 7 and codes(pb, r) == ["OK"] * 7
    # dynamic_metadata (field 6) is the answer's last field, as protobuf-c placed it
    meta_len = r.dynamic_metadata.ByteSize()
    assert meta_len > 20000 and body[-meta_len - 4] == 0x32  # tag, three length bytes


def test_many_calls_each_with_its_metadata(rls, pb):
    ch, stub = make_stub(rls.rls_port, pb)
    futs = [stub.future(request(pb, "q", [("quota2", f"p{i}")], [("nothing", str(i))]),
                        timeout=10) for i in range(40)]
    for i, f in enumerate(futs):
        m = meta(f.result())
        assert m["descriptors"][1]["entries"] == [f"nothing={i}"]
        assert m["decided"]["descriptor"] == 0
    ch.close()


def hits_call(call, pb, entries, hits):
    """One descriptor with its own hits_addend (as Envoy's hits_addend on a rate limit sets
    it; 0 is sent, unlike the request's field)."""
    req = request(pb, "llm", entries)
    req.descriptors[0].hits_addend.value = hits
    return call.stub(req, timeout=5)


def test_stream_done_reports_charge_past_the_limit(call, pb):
    """Envoy's pattern for a cost known at the end: the request asks with 0 hits, the
    stream's end reports its real cost (apply_on_stream_done, the descriptor marked)."""
    OK, OVER = pb.RateLimitResponse.OK, pb.RateLimitResponse.OVER_LIMIT
    user = [("user", "s1")]
    r = hits_call(call, pb, user, 0)
    assert r.overall_code == OK and r.statuses[0].limit_remaining == 100
    r = hits_call(call, pb, user + [MARK], 70)
    assert r.overall_code == OK and r.statuses[0].limit_remaining == 30
    assert r.statuses[0].current_limit.requests_per_unit == 100
    r = hits_call(call, pb, user + [MARK], 50)  # 20 past the limit: charged all the same
    assert codes(pb, r) == ["OK"] and r.statuses[0].limit_remaining == 0
    # the same counter: the next request is refused, 0 hits or 1
    r = hits_call(call, pb, user, 0)
    assert r.overall_code == OVER and meta(r)["decided"]["code"] == "OVER_LIMIT"
    assert call("llm", user).overall_code == OVER
    # a report past the limit again is still charged (and still answered OK)
    assert codes(pb, hits_call(call, pb, user + [MARK], 5)) == ["OK"]
    # another user: its own counter
    assert hits_call(call, pb, [("user", "s2")], 0).statuses[0].limit_remaining == 100


def test_a_call_without_the_marker_is_refused_whole(call, pb):
    user = [("user", "s3")]
    assert hits_call(call, pb, user, 70).statuses[0].limit_remaining == 30
    r = hits_call(call, pb, user, 50)  # more than is left: refused, nothing counted
    assert r.overall_code == pb.RateLimitResponse.OVER_LIMIT
    r = hits_call(call, pb, user, 0)
    assert r.overall_code == pb.RateLimitResponse.OK and r.statuses[0].limit_remaining == 30
    r = hits_call(call, pb, user, 30)  # exactly what is left: then 0 hits is over
    assert r.overall_code == pb.RateLimitResponse.OK
    assert hits_call(call, pb, user, 0).overall_code == pb.RateLimitResponse.OVER_LIMIT


def test_the_marker_only_as_the_last_entry(call, pb):
    r = hits_call(call, pb, [MARK], 5)  # the marker alone: nothing to match
    assert codes(pb, r) == ["OK"] and not r.statuses[0].HasField("current_limit")
    r = hits_call(call, pb, [("user", "s4"), ("ratelimiter.charge", "other")], 5)
    assert not r.statuses[0].HasField("current_limit")  # an ordinary entry: deeper, no match
    r = hits_call(call, pb, [MARK, ("user", "s4")], 5)
    assert not r.statuses[0].HasField("current_limit")
    # metadata shows the request as sent, the marker included
    r = hits_call(call, pb, [("user", "s4"), MARK], 5)
    assert meta(r)["descriptors"][0]["entries"] == ["user=s4", "ratelimiter.charge=stream_done"]
    assert r.statuses[0].limit_remaining == 95
