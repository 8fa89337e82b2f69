"""headers(): docs/INTEGRATION.md, exact strings for every code, rounding and escaping."""

import pytest

from ratelimiter import Code, Reply, ceil_s, headers, sf_string


def rep(code, limit=100, remaining=42, reset_ms=12300, retry_after_ms=0, service="api",
        local=False):
    return Reply(Code(code), limit, remaining, reset_ms, retry_after_ms, service, None, local)


def test_allowed_doc_example():
    assert headers(rep(Code.ALLOWED), window_s=60) == (0, [
        ("RateLimit-Policy", '"api";q=100;w=60'),
        ("RateLimit", '"api";r=42;t=13'),
    ])


def test_limited_doc_example_with_legacy():
    r = rep(Code.LIMITED, remaining=0, retry_after_ms=12300)
    assert headers(r, window_s=60) == (429, [
        ("RateLimit-Policy", '"api";q=100;w=60'),
        ("RateLimit", '"api";r=0;t=13'),
        ("Retry-After", "13"),
    ])
    assert headers(r, window_s=60, legacy=True) == (429, [
        ("RateLimit-Policy", '"api";q=100;w=60'),
        ("RateLimit", '"api";r=0;t=13'),
        ("Retry-After", "13"),
        ("X-RateLimit-Limit", "100"),
        ("X-RateLimit-Remaining", "0"),
        ("X-RateLimit-Reset", "13"),
    ])


def test_no_window_no_w():
    assert headers(rep(Code.ALLOWED))[1][0] == ("RateLimit-Policy", '"api";q=100')


def test_queued_doc_example():
    r = Reply(Code.QUEUED, 4, 0, 1000, 250, "upload")
    assert headers(r) == (0, [("RateLimit-Policy", '"upload";q=4'),
                              ("RateLimit", '"upload";r=0;t=1')])
    assert r.delay_s == 0.25 and r.allowed


def test_fail_closed_doc_example():
    r = Reply(Code.FAIL_CLOSED, 0, 0, 0, 4000, "api")
    assert headers(r) == (503, [("Retry-After", "4")])
    assert headers(r, legacy=True, window_s=60) == (503, [("Retry-After", "4")])
    assert not r.allowed and not r.decided


@pytest.mark.parametrize("code", [Code.FAIL_OPEN, Code.NO_RULE])
def test_pass_without_headers(code):
    assert headers(Reply(code, service="api"), window_s=60, legacy=True) == (0, [])


def test_client_side_policy():
    assert headers(Reply(Code.FAIL_OPEN, service="api", local=True)) == (0, [])
    assert headers(Reply(Code.FAIL_CLOSED, retry_after_ms=1000, service="api", local=True),
                   legacy=True) == (503, [("Retry-After", "1")])


@pytest.mark.parametrize("ms,s", [(0, 0), (1, 1), (999, 1), (1000, 1), (1001, 2),
                                  (12300, 13), (4294967295, 4294968)])
def test_rounding_up(ms, s):
    assert ceil_s(ms) == s
    r = rep(Code.LIMITED, reset_ms=ms, retry_after_ms=ms)
    status, h = headers(r, legacy=True)
    assert status == 429
    assert dict(h)["RateLimit"] == f'"api";r=42;t={s}'
    assert dict(h)["Retry-After"] == str(s)
    assert dict(h)["X-RateLimit-Reset"] == str(s)
    assert headers(Reply(Code.FAIL_CLOSED, retry_after_ms=ms))[1] == [("Retry-After", str(s))]


def test_retry_after_at_least_one_when_positive():
    for ms in (1, 2, 500, 999):
        assert dict(headers(rep(Code.LIMITED, retry_after_ms=ms))[1])["Retry-After"] == "1"


@pytest.mark.parametrize("name,sf", [
    ("api", '"api"'),
    ('a"b', r'"a\"b"'),
    ("a\\b", r'"a\\b"'),
    ('\\"', r'"\\\""'),
    ("tab\there", '"tab_here"'),
    ("del\x7f", '"del_"'),
    ("caf\u00e9", '"caf__"'),          # each byte of the UTF-8 encoding
    ("\u20ac", '"___"'),
    (" ~", '" ~"'),
    ("", '""'),
])
def test_name_escaping(name, sf):
    assert sf_string(name) == sf
    r = rep(Code.ALLOWED)
    assert headers(r, name=name)[1] == [("RateLimit-Policy", f"{sf};q=100"),
                                        ("RateLimit", f"{sf};r=42;t=13")]


def test_name_defaults_to_service_and_is_required():
    with pytest.raises(ValueError):
        headers(Reply(Code.ALLOWED, 1, 0, 0, 0))
    assert headers(Reply(Code.ALLOWED, 1, 0, 0, 0), name="n")[0] == 0
    with pytest.raises(ValueError):
        headers(rep(Code.ALLOWED), window_s=1.5)
