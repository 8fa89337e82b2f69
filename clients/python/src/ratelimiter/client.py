"""Blocking client and a thread-safe pool of them."""

from __future__ import annotations

import contextlib
import queue
import select
import socket
import ssl as _ssl
import threading
import time
from typing import (Any, Callable, ContextManager, Dict, Iterator, List, Mapping, NoReturn,
                    Optional, Sequence, TypeVar, Union)

from .policy import FailurePolicy, as_policy
from .protocol import (DEFAULT_MAX_QUEUE_DELAY, U32_MAX, AuthError, Check, CheckLike,
                       Decoded, ErrorCode, ErrorReply, FrameReader, Named, Op, Pong,
                       ProtocolError, Reply, ServerError, Stats, Timeout, Unavailable,
                       as_check, attach, decode, encode_adjust, encode_auth, encode_check,
                       encode_release, encode_simple, max_queue_delay_ms, read_token_file,
                       rep_name, server_error)
from .reserve import Reservation
from .reserve import reserve as _reserve
from .reserve import slot as _slot
from .tls import describe as tls_describe

T = TypeVar("T")
BATCH = 4096  # check_many writes at most this many requests before reading their replies


def load_token(token: Optional[Union[bytes, str]], token_file: Optional[str]) -> Optional[bytes]:
    if token is not None and token_file is not None:
        raise ValueError("give token or token_file, not both")
    if token_file is not None:
        return read_token_file(token_file)
    if isinstance(token, str):
        return token.encode("utf-8")
    return token


def settle_many(out: List, checks: Sequence[Check], failure: FailurePolicy,
                error: Optional[Unavailable], return_exceptions: bool) -> List:
    """The end of check_many, sync or asyncio. After a lost connection (error), requests not
    answered get the failure policy's decision, or error is raised when one has none. Then,
    unless return_exceptions, the first ERROR reply is raised."""
    if error is not None:
        decisions = [failure.decide(checks[i]) if out[i] is None else out[i]
                     for i in range(len(checks))]
        if any(d is None for d in decisions):
            raise error
        out = decisions
    if not return_exceptions:
        for r in out:
            if isinstance(r, ServerError):
                raise r
    return out


class Client:
    """One connection to a router (or node), used by one thread at a time.

    Connects on first use. After a timeout, a lost connection or a protocol error the
    connection is closed, the call raises (or the failure policy answers a CHECK), and the
    next call opens a new one: a reply still in flight can never be taken for another
    request's. A CHECK is never re-sent: if it was written and no reply came, Unavailable
    (``in_doubt=True``) is raised, or the failure policy answers. Only an idle connection
    the server has visibly closed (EOF before anything was sent) is replaced silently.

    ``max_queue_delay`` (seconds, default 10) bounds what a QUEUED reply may ask the caller
    to hold a request for: a QUEUED reply with a longer ``retry_after_ms`` is returned as
    LIMITED (``retry_after_ms`` at most RETRY_NEVER), so ``delay_s`` never exceeds it.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 7400, timeout: float = 1.0, *,
                 token: Optional[Union[bytes, str]] = None, token_file: Optional[str] = None,
                 failure: Optional[Union[Mapping[str, str], FailurePolicy]] = None,
                 failure_default: Optional[str] = None,
                 connect_timeout: Optional[float] = None,
                 max_queue_delay: float = DEFAULT_MAX_QUEUE_DELAY,
                 ssl: Optional[_ssl.SSLContext] = None) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self.ssl = ssl  # TLS (ratelimiter.tls_context), None: plain TCP
        self._max_delay_ms = max_queue_delay_ms(max_queue_delay)
        self.max_queue_delay = max_queue_delay
        self.connect_timeout = connect_timeout if connect_timeout is not None else timeout
        self.token = load_token(token, token_file)
        self.failure = as_policy(failure, failure_default)
        self.principal: Optional[str] = None  # the AUTH answer
        self._sock: Optional[socket.socket] = None
        self._reader = FrameReader()
        self._next_id = 0

    # -- connection ---------------------------------------------------------------------

    def connect(self) -> "Client":
        """Open the connection now (and AUTH when a token is set)."""
        self.close()
        try:
            s = socket.create_connection((self.host, self.port), self.connect_timeout)
        except socket.timeout:
            raise Timeout(f"connect to {self.host}:{self.port} timed out") from None
        except OSError as e:
            raise Unavailable(f"cannot connect to {self.host}:{self.port}: {e}") from None
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.ssl is not None:
            try:
                s = self.ssl.wrap_socket(
                    s, server_hostname=self.host if self.ssl.check_hostname else None)
            except socket.timeout:
                s.close()
                raise Timeout(f"TLS with {self.host}:{self.port} timed out") from None
            except (_ssl.SSLError, OSError) as e:
                s.close()
                raise Unavailable(f"TLS with {self.host}:{self.port} failed: "
                                  f"{tls_describe(e)}") from None
        self._sock = s
        self._reader.clear()
        if self.token is not None:
            rid = self._id()
            rep = self._roundtrip(encode_auth(rid, self.token), rid, self.connect_timeout)
            if isinstance(rep, ErrorReply):
                self.close()
                raise AuthError(rep.code, rep.message, rid)
            if not isinstance(rep, Named) or rep.op != Op.AUTH:
                self._fail(ProtocolError("AUTH answered with another reply"))
            self.principal = rep.name
        return self

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _ensure(self) -> socket.socket:
        if self._sock is not None and self._peer_closed(self._sock):
            self.close()
        if self._sock is None:
            self.connect()
        assert self._sock is not None
        return self._sock

    @staticmethod
    def _peer_closed(s: socket.socket) -> bool:
        """True if the idle connection has been closed by the server (or reset)."""
        try:
            if isinstance(s, _ssl.SSLSocket) and s.pending() > 0:
                return False
            r, _, _ = select.select([s], [], [], 0)
            if not r:
                return False
            # the raw socket's bytes (an SSLSocket takes no recv flags)
            return socket.socket.recv(s, 1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _id(self) -> int:
        self._next_id = self._next_id % U32_MAX + 1  # 1..2^32-1; id 0 is connection-level
        return self._next_id

    def _fail(self, exc: Exception) -> NoReturn:
        self.close()
        raise exc

    # -- I/O ----------------------------------------------------------------------------

    def _send(self, data: bytes, deadline: float) -> None:
        assert self._sock is not None
        try:
            self._sock.settimeout(max(deadline - time.monotonic(), 0.001))
            self._sock.sendall(data)
        except socket.timeout:
            self._fail(Timeout("timed out sending", in_doubt=True))
        except OSError as e:
            self._fail(Unavailable(f"connection lost: {e}", in_doubt=True))

    def _recv_frames(self, deadline: float) -> List[Decoded]:
        assert self._sock is not None
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self._fail(Timeout("no reply within the timeout", in_doubt=True))
            try:
                self._sock.settimeout(left)
                data = self._sock.recv(65536)
            except socket.timeout:
                self._fail(Timeout("no reply within the timeout", in_doubt=True))
            except _ssl.SSLError as e:
                self._fail(Unavailable(f"connection lost: TLS: {tls_describe(e)}",
                                       in_doubt=True))
            except OSError as e:
                self._fail(Unavailable(f"connection lost: {e}", in_doubt=True))
            if not data:
                self._fail(Unavailable("connection closed by the server", in_doubt=True))
            try:
                frames = [decode(p) for p in self._reader.feed(data)]
            except ProtocolError as e:
                self._fail(e)
            if frames:
                return frames

    def _collect(self, ids: Dict[int, int], deadline: float,
                 on_reply: Callable[[int, Decoded], None]) -> None:
        """Read until every id in ``ids`` is answered; on_reply(index, reply)."""
        while ids:
            for rep in self._recv_frames(deadline):
                idx = ids.pop(rep.id, None)
                if idx is None:
                    if isinstance(rep, ErrorReply) and rep.id == 0:
                        # connection-level: MALFORMED, OVERLOADED (too many connections),
                        # UNAUTHORIZED (AUTH wanted); the server closes after it.
                        exc = server_error(rep)
                        if rep.code == ErrorCode.UNAUTHORIZED:
                            self._fail(AuthError(rep.code, rep.message))
                        self._fail(Unavailable(f"server closed the connection: {exc}",
                                               in_doubt=True))
                    self._fail(ProtocolError(f"reply to unknown id {rep.id}"))
                on_reply(idx, rep)

    def _roundtrip(self, data: bytes, rid: int, timeout: float) -> Decoded:
        deadline = time.monotonic() + timeout
        self._send(data, deadline)
        got: List[Decoded] = []
        self._collect({rid: 0}, deadline, lambda _i, r: got.append(r))
        return got[0]

    def _timeout(self, timeout: Optional[float]) -> float:
        return self.timeout if timeout is None else timeout

    # -- API ----------------------------------------------------------------------------

    def check(self, service: str, user: str, endpoint: Optional[str] = None, cost: int = 1,
              timeout: Optional[float] = None, limit: Optional[Any] = None) -> Reply:
        """One CHECK. Raises ServerError on an ERROR reply, Unavailable/Timeout when the
        router cannot be reached or does not answer in time, unless the failure policy has
        an answer for the service (a Reply with ``local=True``). ``limit`` sends an inline
        limit (Check.limit): ``("gcra", 10, 1000, 5)`` or ``"gcra 10 per 1s burst 5"``."""
        c = as_check((service, user, endpoint, cost, limit))
        return self.check_many([c], timeout=timeout)[0]  # type: ignore[return-value]

    def check_many(self, requests: Sequence[CheckLike], timeout: Optional[float] = None,
                   return_exceptions: bool = False) -> List[Union[Reply, ServerError]]:
        """Pipelined CHECKs: all frames in one write (per BATCH of 4096), replies matched by
        id in whatever order they come; returns them in request order. ``timeout`` covers
        the whole call. An ERROR reply raises ServerError after every reply was read,
        unless ``return_exceptions`` puts it in the list. On Unavailable, with a failure
        policy for every unanswered request's service, those get local decisions and the
        answered ones keep their replies; otherwise Unavailable is raised."""
        checks = [as_check(r) for r in requests]
        out: List[Optional[Union[Reply, ServerError]]] = [None] * len(checks)
        deadline = time.monotonic() + self._timeout(timeout)

        def on_reply(i: int, rep: Decoded) -> None:
            if isinstance(rep, Reply) and rep.op == Op.CHECK:
                out[i] = attach(rep, checks[i], self._max_delay_ms)
            elif isinstance(rep, ErrorReply):
                out[i] = server_error(rep)
            else:  # another op's reply (an ADJUST's has a CHECK's shape) is never a decision
                self._fail(ProtocolError(f"CHECK answered with {rep_name(rep)}"))

        try:
            self._ensure()
            for start in range(0, len(checks), BATCH):
                ids: Dict[int, int] = {}
                parts = []
                for i in range(start, min(start + BATCH, len(checks))):
                    rid = self._id()
                    ids[rid] = i
                    parts.append(encode_check(rid, checks[i]))
                self._send(b"".join(parts), deadline)
                self._collect(ids, deadline, on_reply)
        except Unavailable as e:
            return settle_many(out, checks, self.failure, e, return_exceptions)
        return settle_many(out, checks, self.failure, None, return_exceptions)

    def _settle_op(self, op: Op, data: Callable[[int], bytes], service: str,
                   endpoint: Optional[str], timeout: Optional[float]) -> Reply:
        """One ADJUST or RELEASE: never re-sent (neither is idempotent): a lost reply
        raises Unavailable with ``in_doubt``; an ERROR reply raises ServerError."""
        self._ensure()
        rid = self._id()
        rep = self._roundtrip(data(rid), rid, self._timeout(timeout))
        if isinstance(rep, ErrorReply):
            raise server_error(rep)
        if not isinstance(rep, Reply) or rep.op != op:
            self._fail(ProtocolError(f"{op.name} answered with another reply"))
        return Reply(rep.code, rep.limit, rep.remaining, rep.reset_ms, rep.retry_after_ms,
                     service, endpoint, False, rep.id, rep.op)

    def adjust(self, service: str, user: str, delta: int, endpoint: Optional[str] = None,
               timeout: Optional[float] = None, limit: Optional[Any] = None) -> Reply:
        """ADJUST (docs/PROTOCOL.md): charge (delta > 0, past the limit too) or refund
        (delta < 0) a cost known after the work; |delta| <= 1000000. ``limit``: the inline
        limit the key was CHECKed with. Reply: ALLOWED (applied) or NO_RULE, or the failure
        policy's code when the owner cannot be reached (not applied)."""
        return self._settle_op(
            Op.ADJUST, lambda rid: encode_adjust(rid, service, user, endpoint, delta, limit),
            service, endpoint, timeout)

    def release(self, service: str, user: str, count: int = 1, endpoint: Optional[str] = None,
                timeout: Optional[float] = None) -> Reply:
        """RELEASE: give back ``count`` slots of the rule's ``concurrency`` tiers."""
        return self._settle_op(
            Op.RELEASE, lambda rid: encode_release(rid, service, user, endpoint, count),
            service, endpoint, timeout)

    def reserve(self, service: str, user: str, estimate: int, endpoint: Optional[str] = None,
                timeout: Optional[float] = None, limit: Optional[Any] = None) -> Reservation:
        """CHECK ``estimate`` now, settle the real cost later: ``r.settle(actual)``
        ADJUSTs by actual - estimate. Raises Limited when refused."""
        return _reserve(self.check, self.adjust, service, user, estimate, endpoint, limit,
                        timeout)

    def slot(self, service: str, user: str, endpoint: Optional[str] = None, count: int = 1,
             timeout: Optional[float] = None) -> ContextManager[Reply]:
        """``with client.slot(service, user):`` holds ``count`` slots of a ``concurrency``
        rule for the block (CHECK), gives them back when it ends, exceptions included
        (RELEASE). Raises Limited when refused."""
        return _slot(self.check, self.release, service, user, endpoint, count, timeout)

    def _simple(self, op: Op, timeout: Optional[float]) -> Decoded:
        """PING/STATS: idempotent, so a connection lost before any reply is retried once."""
        for attempt in (0, 1):
            self._ensure()
            rid = self._id()
            try:
                rep = self._roundtrip(encode_simple(op, rid), rid, self._timeout(timeout))
            except Timeout:
                raise
            except Unavailable:
                if attempt:
                    raise
                continue
            if isinstance(rep, ErrorReply):
                raise server_error(rep)
            return rep
        raise AssertionError("unreachable")

    def ping(self, timeout: Optional[float] = None) -> str:
        """The name of the process that answered."""
        rep = self._simple(Op.PING, timeout)
        if not isinstance(rep, Pong):
            self._fail(ProtocolError("PING answered with another reply"))
        return rep.name

    def stats(self, timeout: Optional[float] = None) -> Dict[str, int]:
        rep = self._simple(Op.STATS, timeout)
        if not isinstance(rep, Stats):
            self._fail(ProtocolError("STATS answered with another reply"))
        return rep.values


def connect(host: str = "127.0.0.1", port: int = 7400, timeout: float = 1.0,
            **kwargs: object) -> Client:
    """A connected Client (see Client for the keyword arguments)."""
    return Client(host, port, timeout, **kwargs).connect()  # type: ignore[arg-type]


class ClientPool:
    """A thread-safe pool of at most ``size`` Clients (each one connection).

    ``with pool.client() as c:`` lends one to the calling thread; ``pool.check()``,
    ``check_many()``, ``ping()`` and ``stats()`` do that for one call. A thread waits up to
    ``acquire_timeout`` for a free client, then gets Timeout. Clients are created lazily
    with the same arguments; a client whose connection failed reconnects on its next use.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 7400, size: int = 8,
                 timeout: float = 1.0, acquire_timeout: Optional[float] = None,
                 **client_kwargs: object) -> None:
        if size < 1:
            raise ValueError("size must be at least 1")
        self._make = lambda: Client(host, port, timeout, **client_kwargs)  # type: ignore[arg-type]
        self._idle: "queue.LifoQueue[Client]" = queue.LifoQueue()
        self._lock = threading.Lock()
        self._created = 0
        self._all: List[Client] = []
        self.size = size
        self.acquire_timeout = timeout if acquire_timeout is None else acquire_timeout
        self._closed = False

    @contextlib.contextmanager
    def client(self) -> Iterator[Client]:
        c = self._acquire()
        try:
            yield c
        finally:
            if self._closed:
                c.close()
            else:
                self._idle.put(c)

    def _acquire(self) -> Client:
        if self._closed:
            raise RuntimeError("pool is closed")
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        with self._lock:
            if self._created < self.size:
                self._created += 1
                c = self._make()
                self._all.append(c)
                return c
        try:
            return self._idle.get(timeout=self.acquire_timeout)
        except queue.Empty:
            raise Timeout("no free client in the pool") from None

    def check(self, service: str, user: str, endpoint: Optional[str] = None, cost: int = 1,
              timeout: Optional[float] = None, limit: Optional[Any] = None) -> Reply:
        with self.client() as c:
            return c.check(service, user, endpoint, cost, timeout, limit=limit)

    def check_many(self, requests: Sequence[CheckLike], timeout: Optional[float] = None,
                   return_exceptions: bool = False) -> List[Union[Reply, ServerError]]:
        with self.client() as c:
            return c.check_many(requests, timeout, return_exceptions)

    def adjust(self, service: str, user: str, delta: int, endpoint: Optional[str] = None,
               timeout: Optional[float] = None, limit: Optional[Any] = None) -> Reply:
        with self.client() as c:
            return c.adjust(service, user, delta, endpoint, timeout, limit)

    def release(self, service: str, user: str, count: int = 1, endpoint: Optional[str] = None,
                timeout: Optional[float] = None) -> Reply:
        with self.client() as c:
            return c.release(service, user, count, endpoint, timeout)

    def reserve(self, service: str, user: str, estimate: int, endpoint: Optional[str] = None,
                timeout: Optional[float] = None, limit: Optional[Any] = None) -> Reservation:
        """As Client.reserve; the settlement borrows a client of the pool again."""
        return _reserve(self.check, self.adjust, service, user, estimate, endpoint, limit,
                        timeout)

    def slot(self, service: str, user: str, endpoint: Optional[str] = None, count: int = 1,
             timeout: Optional[float] = None) -> ContextManager[Reply]:
        """As Client.slot; no client of the pool is held while the block runs."""
        return _slot(self.check, self.release, service, user, endpoint, count, timeout)

    def ping(self, timeout: Optional[float] = None) -> str:
        with self.client() as c:
            return c.ping(timeout)

    def stats(self, timeout: Optional[float] = None) -> Dict[str, int]:
        with self.client() as c:
            return c.stats(timeout)

    def close(self) -> None:
        self._closed = True
        with self._lock:
            for c in self._all:
                c.close()

    def __enter__(self) -> "ClientPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
