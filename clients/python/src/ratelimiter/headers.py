"""The one mapping from a CHECK reply to an HTTP answer (docs/INTEGRATION.md)."""

from __future__ import annotations

from typing import List, Optional, Tuple

from .protocol import MAX_HEADER_S, Code, Reply

PASS = 0  # status meaning: pass the request on (after reply.delay_s for QUEUED)

Headers = List[Tuple[str, str]]


def ceil_s(ms: int) -> int:
    """Whole seconds, rounded up: 0 -> 0, 1..1000 -> 1, 1001 -> 2; at most MAX_HEADER_S
    (4294968, RETRY_NEVER in seconds), the largest Retry-After or t= ever sent."""
    return min((ms + 999) // 1000, MAX_HEADER_S)


def sf_string(name: str) -> str:
    """A structured-field string: double quotes, backslash before \\ and ", and each
    byte of the UTF-8 encoding outside printable ASCII (0x20..0x7E) replaced by _."""
    out = []
    for b in name.encode("utf-8"):
        c = chr(b)
        if c in '\\"':
            out.append("\\" + c)
        elif 0x20 <= b <= 0x7E:
            out.append(c)
        else:
            out.append("_")
    return '"' + "".join(out) + '"'


def headers(reply: Reply, name: Optional[str] = None, window_s: Optional[int] = None,
            legacy: bool = False) -> Tuple[int, Headers]:
    """(status, headers) for ``reply``.

    status is 0 (pass the request on; for QUEUED after holding it ``reply.delay_s``), 429
    or 503. ``name`` is the policy name (default: the reply's service); ``window_s`` the
    rule's window in seconds, advertised as ``w=`` when given; ``legacy`` adds the
    X-RateLimit-* fields.
    """
    code = reply.code
    if reply.local:  # the router could not be reached: the client's own policy
        if code == Code.FAIL_CLOSED:
            return 503, [("Retry-After", "1")]
        return PASS, []
    if code in (Code.FAIL_OPEN, Code.NO_RULE):
        return PASS, []
    if code == Code.FAIL_CLOSED:
        return 503, [("Retry-After", str(ceil_s(reply.retry_after_ms)))]
    if name is None:
        name = reply.service
    if name is None:
        raise ValueError("headers() needs a policy name: the reply has no service")
    if window_s is not None and (type(window_s) is not int or window_s < 0):
        raise ValueError("window_s must be a non-negative int")
    sf = sf_string(name)
    reset_s = ceil_s(reply.reset_ms)
    policy = f"{sf};q={reply.limit}" + (f";w={window_s}" if window_s is not None else "")
    out: Headers = [("RateLimit-Policy", policy),
                    ("RateLimit", f"{sf};r={reply.remaining};t={reset_s}")]
    status = PASS
    if code == Code.LIMITED:
        status = 429
        out.append(("Retry-After", str(ceil_s(reply.retry_after_ms))))
    if legacy:
        out += [("X-RateLimit-Limit", str(reply.limit)),
                ("X-RateLimit-Remaining", str(reply.remaining)),
                ("X-RateLimit-Reset", str(reset_s))]
    return status, out
