"""Wire protocol v1 (docs/PROTOCOL.md): frames, request encoding, strict reply decoding.

A frame is a 4-byte big-endian length N (1..65536) and N bytes holding exactly one
MessagePack value. Replies are validated shape by shape; anything else raises
ProtocolError, as the C decoder answers -EPROTO.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple, Union

import msgpack

MAX_FRAME = 65536
U32_MAX = 0xFFFFFFFF
U64_MAX = 0xFFFFFFFFFFFFFFFF
I64_MIN = -(1 << 63)
I64_MAX = (1 << 63) - 1
RETRY_NEVER = U32_MAX  # retry_after_ms of a request that can never be allowed

# What the client accepts from a server (docs/CLIENTS.md, "Bounds"): a QUEUED delay above a
# client's max_queue_delay is not held (the reply becomes LIMITED); no reply's
# retry_after_ms is taken as more than RETRY_NEVER, and no header carries more seconds than
# MAX_HEADER_S, the protocol's "never" in whole seconds.
DEFAULT_MAX_QUEUE_DELAY = 10.0  # seconds
MAX_HEADER_S = (RETRY_NEVER + 999) // 1000  # 4294968

_LEN = struct.Struct(">I")


class Op(enum.IntEnum):
    CHECK = 1
    PING = 2
    STATS = 3
    CLOCK = 4
    HELLO = 5
    AUTH = 6
    THROTTLED = 7
    ADJUST = 9
    RELEASE = 10
    ERROR = 255


class Code(enum.IntEnum):
    """CHECK reply codes."""

    ALLOWED = 0
    LIMITED = 1
    FAIL_OPEN = 2
    FAIL_CLOSED = 3
    NO_RULE = 4
    QUEUED = 5


class ErrorCode(enum.IntEnum):
    MALFORMED = 1
    UNKNOWN_OP = 2
    BAD_FIELD = 3
    OVERLOADED = 4
    UNAUTHORIZED = 5
    NOT_OWNER = 6
    MOVING = 7


# ---------------------------------------------------------------------------- errors


class RateLimiterError(Exception):
    """Base of every error this package raises."""


class ProtocolError(RateLimiterError):
    """The peer broke the protocol (bad frame, bad reply shape). The connection is closed."""


class ServerError(RateLimiterError):
    """The server answered ERROR [255, id, err, message] to one request."""

    def __init__(self, code: int, message: str, request_id: int = 0, owner: str = "") -> None:
        try:
            self.code: Union[ErrorCode, int] = ErrorCode(code)
        except ValueError:  # pragma: no cover - decode() only lets 1..7 through
            self.code = code
        self.message = message
        self.request_id = request_id
        # MOVING only: the member name of the node to ask now, "" to ask the same one again
        # shortly (docs/PROTOCOL.md, "MOVING").
        self.owner = owner
        name = self.code.name if isinstance(self.code, ErrorCode) else str(code)
        super().__init__(f"{name}: {message}")


class AuthError(ServerError):
    """AUTH was refused (ERROR UNAUTHORIZED on the AUTH frame); the server closes."""


class Unavailable(RateLimiterError):
    """The router could not be reached, or the connection was lost or timed out.

    ``in_doubt`` is True when a CHECK had been written and no reply came: the router may
    have counted it. The client never re-sends such a request.
    """

    in_doubt: bool = False

    def __init__(self, message: str, in_doubt: bool = False) -> None:
        super().__init__(message)
        self.in_doubt = in_doubt


class Timeout(Unavailable):
    """No reply within the call's timeout."""


class Limited(RateLimiterError):
    """``reserve()`` or ``slot()`` was refused: ``reply`` is the CHECK's answer (LIMITED or
    FAIL_CLOSED), with ``retry_after_ms`` the wait before asking again."""

    def __init__(self, reply: "Reply", what: str) -> None:
        self.reply = reply
        super().__init__(f"{what} refused ({reply.code.name}): retry after "
                         f"{reply.retry_after_ms} ms")


# ---------------------------------------------------------------------------- replies


@dataclass(frozen=True)
class Reply:
    """A CHECK decision.

    ``local`` is True for a decision made by this client's failure policy because the
    router could not be reached or timed out (code FAIL_OPEN or FAIL_CLOSED, numbers 0
    except ``retry_after_ms`` = 1000 for FAIL_CLOSED). ``service`` and ``endpoint`` are the
    request's, kept for headers().
    """

    code: Code
    limit: int = 0
    remaining: int = 0
    reset_ms: int = 0
    retry_after_ms: int = 0
    service: Optional[str] = None
    endpoint: Optional[str] = None
    local: bool = False
    id: int = field(default=0, compare=False)
    op: int = field(default=1, compare=False)  # 1 CHECK, 9 ADJUST, 10 RELEASE: what it answers

    @property
    def allowed(self) -> bool:
        """True if the request may go ahead (ALLOWED, FAIL_OPEN, NO_RULE, QUEUED after
        waiting ``delay_s``)."""
        return self.code in (Code.ALLOWED, Code.FAIL_OPEN, Code.NO_RULE, Code.QUEUED)

    @property
    def limited(self) -> bool:
        return self.code == Code.LIMITED

    @property
    def decided(self) -> bool:
        """False for FAIL_OPEN/FAIL_CLOSED: no limiter decision was made."""
        return self.code not in (Code.FAIL_OPEN, Code.FAIL_CLOSED)

    @property
    def delay_s(self) -> float:
        """Seconds to hold a QUEUED request before passing it on; 0 otherwise. A client
        never returns QUEUED with more than its ``max_queue_delay``; for a Reply built by
        hand it is at most RETRY_NEVER ms, so time.sleep() always accepts it."""
        if self.code != Code.QUEUED:
            return 0.0
        return min(self.retry_after_ms, RETRY_NEVER) / 1000.0


@dataclass(frozen=True)
class Check:
    """One CHECK request (for check_many). ``limit``, when given, is an inline limit
    (docs/PROTOCOL.md, "Inline limits"): ``(algorithm, limit, window_ms)`` or
    ``(algorithm, limit, window_ms, burst)``, or the config's own syntax as a str,
    ``"gcra 10 per 1s burst 5"``."""

    service: str
    user: str
    endpoint: Optional[str] = None
    cost: int = 1
    limit: Optional[Any] = None


ALGORITHMS = ("fixed_window", "sliding_window_log", "sliding_window_counter", "token_bucket",
              "gcra", "leaky_bucket")
_BURST_ALGORITHMS = ("token_bucket", "gcra", "leaky_bucket")
_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_U32 = 4294967295
# The longest window: 366 days for the two window algorithms, 2^32 - 1 ms for the others
# (docs/PROTOCOL.md, "Inline limits").
_WINDOW_MAX = {"fixed_window": 31_622_400_000, "sliding_window_counter": 31_622_400_000}


def parse_limit(text: str) -> Tuple[str, int, int, Optional[int]]:
    """``ALGORITHM N per DURATION [burst B]`` (docs/CONFIG.md, ``limit``) as the tuple
    ``(algorithm, limit, window_ms, burst or None)``; ValueError when it is not one."""
    tok = text.split()
    if len(tok) not in (4, 6) or tok[2] != "per" or (len(tok) == 6 and tok[4] != "burst"):
        raise ValueError(f"limit {text!r} is not \"ALGORITHM N per DURATION [burst B]\"")
    dur = tok[3]
    digits = dur.rstrip("smhd")
    unit = dur[len(digits):]
    if not digits.isdigit() or unit not in _UNITS_MS:
        raise ValueError(f"limit {text!r} has a window {dur!r} that is not a duration (50ms, 4s, "
                         "10m, 1h, 1d)")
    if not tok[1].isdigit() or (len(tok) == 6 and not tok[5].isdigit()):
        raise ValueError(f"limit {text!r}: N and B must be numbers")
    burst = int(tok[5]) if len(tok) == 6 else None
    return (tok[0], int(tok[1]), int(digits) * _UNITS_MS[unit], burst)


def limit_tuple(limit: Any) -> Tuple[str, int, int, Optional[int]]:
    """An inline limit as ``(algorithm, limit, window_ms, burst or None)``, checked against
    the bounds of docs/PROTOCOL.md."""
    if isinstance(limit, str):
        t = parse_limit(limit)
    elif isinstance(limit, (tuple, list)) and len(limit) in (3, 4):
        t = (limit[0], limit[1], limit[2], limit[3] if len(limit) == 4 else None)
    else:
        raise TypeError("limit must be (algorithm, limit, window_ms[, burst]) or a str")
    algo, n, w, b = t
    if algo not in ALGORITHMS:
        raise ValueError(f"limit's algorithm must be one of {', '.join(ALGORITHMS)}")
    if type(n) is not int or not 1 <= n <= _U32:
        raise ValueError(f"limit's limit must be an int of 1..{_U32}")
    wmax = _WINDOW_MAX.get(algo, _U32)
    if type(w) is not int or not 1 <= w <= wmax:
        raise ValueError(f"limit's window_ms must be an int of 1..{wmax} for {algo}")
    if b is not None:
        if algo not in _BURST_ALGORITHMS:
            raise ValueError("only token_bucket, gcra and leaky_bucket take a burst")
        if type(b) is not int or not 1 <= b <= _U32:
            raise ValueError(f"limit's burst must be an int of 1..{_U32}")
    return (algo, n, w, b)


CheckLike = Union[Check, Tuple[Any, ...], Dict[str, Any]]


def as_check(item: CheckLike) -> Check:
    if isinstance(item, Check):
        c = item
    elif isinstance(item, dict):
        c = Check(**item)
    else:
        c = Check(*item)
    validate_check(c)
    return c


# Decoded frames, one kind per reply shape.
@dataclass(frozen=True)
class Pong:
    id: int
    name: str


@dataclass(frozen=True)
class Stats:
    id: int
    values: Dict[str, int]


@dataclass(frozen=True)
class Named:
    """HELLO, AUTH (principal) replies."""

    op: Op
    id: int
    name: str


@dataclass(frozen=True)
class Clock:
    id: int
    now_ms: int


@dataclass(frozen=True)
class ErrorReply:
    id: int
    code: int
    message: str
    owner: str = ""  # MOVING's 5th element


Decoded = Union[Reply, Pong, Stats, Named, Clock, ErrorReply]


# ---------------------------------------------------------------------------- encoding


def _str_bytes(value: Any, what: str, lo: int, hi: int) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str")
    n = len(value.encode("utf-8"))
    if not lo <= n <= hi:
        raise ValueError(f"{what} must be {lo}..{hi} bytes of UTF-8, not {n}")


def validate_check(c: Check) -> None:
    """The request bounds of docs/PROTOCOL.md, checked before anything is sent."""
    _str_bytes(c.service, "service", 1, 128)
    _str_bytes(c.user, "user", 1, 256)
    if c.endpoint is not None:
        _str_bytes(c.endpoint, "endpoint", 0, 128)
    if type(c.cost) is not int or not 0 <= c.cost <= 1_000_000:
        raise ValueError("cost must be an int of 0..1000000")
    if c.limit is not None:
        limit_tuple(c.limit)


def frame(payload: bytes) -> bytes:
    if not 1 <= len(payload) <= MAX_FRAME:
        raise ValueError(f"frame payload of {len(payload)} bytes (1..{MAX_FRAME})")
    return _LEN.pack(len(payload)) + payload


def _pack(msg: List[Any]) -> bytes:
    return frame(msgpack.packb(msg, use_bin_type=True))


def encode_check(rid: int, c: Check) -> bytes:
    if c.limit is not None:
        return _pack([Op.CHECK.value, rid, c.service, c.user, c.endpoint, c.cost,
                      list(limit_tuple(c.limit))])
    return _pack([Op.CHECK.value, rid, c.service, c.user, c.endpoint, c.cost])


DELTA_MAX = 1_000_000  # ADJUST's |delta|, RELEASE's count (docs/PROTOCOL.md)


def encode_adjust(rid: int, service: str, user: str, endpoint: Optional[str], delta: int,
                  limit: Optional[Any] = None) -> bytes:
    """ADJUST [9, id, service, user, endpoint, delta] (with an inline limit: 7 elements)."""
    validate_check(Check(service, user, endpoint, 0, limit))
    if type(delta) is not int or not -DELTA_MAX <= delta <= DELTA_MAX:
        raise ValueError(f"delta must be an int of -{DELTA_MAX}..{DELTA_MAX}")
    msg = [Op.ADJUST.value, rid, service, user, endpoint, delta]
    if limit is not None:
        msg.append(list(limit_tuple(limit)))
    return _pack(msg)


def encode_release(rid: int, service: str, user: str, endpoint: Optional[str],
                   count: int) -> bytes:
    """RELEASE [10, id, service, user, endpoint, count]."""
    validate_check(Check(service, user, endpoint, 0))
    if type(count) is not int or not 1 <= count <= DELTA_MAX:
        raise ValueError(f"count must be an int of 1..{DELTA_MAX}")
    return _pack([Op.RELEASE.value, rid, service, user, endpoint, count])


def encode_simple(op: Op, rid: int) -> bytes:
    return _pack([op.value, rid])


def encode_auth(rid: int, token: bytes) -> bytes:
    if not isinstance(token, (bytes, bytearray)) or not 1 <= len(token) <= 256:
        raise ValueError("token must be 1..256 bytes")
    return _pack([Op.AUTH.value, rid, bytes(token)])


def read_token_file(path: str) -> bytes:
    """A token file as rl-cli reads it: one trailing newline (or CRLF) is not part of it."""
    with open(path, "rb") as f:
        data = f.read(260)
    if data.endswith(b"\n"):
        data = data[:-1]
        if data.endswith(b"\r"):
            data = data[:-1]
    if not 1 <= len(data) <= 256:
        raise ValueError(f"{path} must hold a token of 1..256 bytes")
    return data


# ---------------------------------------------------------------------------- decoding


def _is_uint(v: Any, hi: int) -> bool:
    return type(v) is int and 0 <= v <= hi


def decode(payload: bytes) -> Decoded:
    """Decode one frame's payload into a reply; ProtocolError unless it is a v1 reply."""
    if not 1 <= len(payload) <= MAX_FRAME:
        raise ProtocolError(f"frame of {len(payload)} bytes")
    try:
        msg = msgpack.unpackb(payload, raw=False, use_list=True, strict_map_key=False)
    except Exception as e:  # ExtraData, FormatError, StackError, ValueError, TypeError...
        raise ProtocolError(f"undecodable frame: {e}") from None
    if type(msg) is not list or len(msg) < 2:
        raise ProtocolError("reply is not an array of at least 2 elements")
    op, rid = msg[0], msg[1]
    if not _is_uint(rid, U32_MAX):
        raise ProtocolError("reply id is not an unsigned 32-bit integer")
    n = len(msg)
    if op in (Op.CHECK, Op.ADJUST, Op.RELEASE) and type(op) is int:
        name = Op(op).name
        if n != 7:
            raise ProtocolError(f"{name} reply needs 7 elements")
        code = msg[2]
        if not _is_uint(code, 5):
            raise ProtocolError(f"{name} reply code {code!r}")
        if not all(_is_uint(v, U64_MAX) for v in msg[3:7]):
            raise ProtocolError(f"{name} reply numbers must be unsigned 64-bit integers")
        return Reply(Code(code), msg[3], msg[4], msg[5], msg[6], id=rid, op=op)
    if op == Op.ERROR and type(op) is int:
        if n not in (4, 5) or not _is_uint(msg[2], 7) or msg[2] == 0 or type(msg[3]) is not str:
            raise ProtocolError("ERROR reply must be [255, id, 1..7, str]")
        if n == 5 and (msg[2] != ErrorCode.MOVING or type(msg[4]) is not str):
            raise ProtocolError("only a MOVING ERROR has a 5th element, a str")
        return ErrorReply(rid, msg[2], msg[3], msg[4] if n == 5 else "")
    if op in (Op.PING, Op.HELLO, Op.AUTH) and type(op) is int:
        if n != 3 or type(msg[2]) is not str:
            raise ProtocolError(f"{Op(op).name} reply must be [{op}, id, str]")
        if op == Op.PING:
            return Pong(rid, msg[2])
        return Named(Op(op), rid, msg[2])
    if op == Op.STATS and type(op) is int:
        m = msg[2] if n == 3 else None
        if type(m) is not dict or len(m) > 256:
            raise ProtocolError("STATS reply must be [3, id, map of at most 256 pairs]")
        for k, v in m.items():
            if type(k) is not str or type(v) is not int or not I64_MIN <= v <= I64_MAX:
                raise ProtocolError("STATS pairs must be str: signed 64-bit integer")
        return Stats(rid, m)
    if op == Op.CLOCK and type(op) is int:
        if n != 3 or not _is_uint(msg[2], U64_MAX):
            raise ProtocolError("CLOCK reply must be [4, id, uint]")
        return Clock(rid, msg[2])
    raise ProtocolError(f"unexpected reply op {op!r}")


class FrameReader:
    """Accumulates bytes and yields whole frame payloads; bounds the length prefix."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> List[bytes]:
        self._buf += data
        out: List[bytes] = []
        buf = self._buf
        pos = 0
        while len(buf) - pos >= 4:
            (n,) = _LEN.unpack_from(buf, pos)
            if not 1 <= n <= MAX_FRAME:
                raise ProtocolError(f"frame length {n} outside 1..{MAX_FRAME}")
            if len(buf) - pos - 4 < n:
                break
            out.append(bytes(buf[pos + 4:pos + 4 + n]))
            pos += 4 + n
        if pos:
            del buf[:pos]
        return out

    def clear(self) -> None:
        self._buf.clear()


def max_queue_delay_ms(value: Any) -> int:
    """A client's ``max_queue_delay`` (seconds, 0..RETRY_NEVER/1000) in milliseconds;
    ValueError for anything else (a bool, a str, NaN, infinity, a negative number)."""
    if type(value) not in (int, float) or not 0 <= value <= RETRY_NEVER / 1000:
        raise ValueError("max_queue_delay must be a number of seconds of 0..4294967.295")
    return min(int(value * 1000), RETRY_NEVER)


def attach(reply: Reply, c: Check, max_delay_ms: int) -> Reply:
    """The reply as the client returns it: with its request's service and endpoint (for
    headers()), and bounded: a QUEUED delay over ``max_delay_ms`` is not something to hold
    a request for, so it becomes LIMITED (429, Retry-After) with retry_after_ms at most
    RETRY_NEVER."""
    code, retry = reply.code, reply.retry_after_ms
    if code == Code.QUEUED and retry > max_delay_ms:
        code, retry = Code.LIMITED, min(retry, RETRY_NEVER)
    return Reply(code, reply.limit, reply.remaining, reply.reset_ms, retry, c.service,
                 c.endpoint, False, reply.id, reply.op)


def server_error(e: ErrorReply) -> ServerError:
    return ServerError(e.code, e.message, e.id, e.owner)


def rep_name(rep: Decoded) -> str:
    """A reply as a ProtocolError names it: a Reply by the op it answers (an ADJUST's or a
    RELEASE's has a CHECK's shape), anything else by its type."""
    if isinstance(rep, Reply):
        try:
            return f"a {Op(rep.op).name} reply"
        except ValueError:
            return f"an op {rep.op} reply"
    return type(rep).__name__
