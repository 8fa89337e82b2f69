"""asyncio client: one multiplexed connection, many requests in flight, matched by id."""

from __future__ import annotations

import asyncio
import contextlib
import ssl as _ssl
from typing import (Any, AsyncContextManager, Callable, Dict, List, Mapping, Optional, Sequence,
                    Union)

from .client import load_token, settle_many
from .policy import FailurePolicy, as_policy
from .protocol import (DEFAULT_MAX_QUEUE_DELAY, MAX_FRAME, U32_MAX, AuthError, Check,
                       CheckLike, Decoded, ErrorCode, ErrorReply, Named, Op, Pong,
                       ProtocolError, Reply, ServerError, Stats, Timeout, Unavailable,
                       as_check, attach, decode, encode_adjust, encode_auth, encode_check,
                       encode_release, encode_simple, max_queue_delay_ms, rep_name, server_error)
from .reserve import AsyncReservation, reserve_async, slot_async
from .tls import describe as tls_describe

_ABANDONED_MAX = 1 << 16  # ids of timed-out calls remembered, so their late replies are dropped


class _Slots:
    """Counts requests in flight; acquire(k) takes k at once (or waits), so batches
    never deadlock holding part of what they need."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._waiters: List["asyncio.Future[None]"] = []

    async def acquire(self, k: int) -> None:
        while self.used and self.used + k > self.limit:
            fut = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            try:
                await fut
            finally:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(fut)
        self.used += k

    def release(self, k: int) -> None:
        self.used -= k
        waiters, self._waiters = self._waiters, []
        for f in waiters:
            if not f.done():
                f.set_result(None)


class _Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.pending: Dict[int, "asyncio.Future[Decoded]"] = {}
        self.abandoned: Dict[int, None] = {}
        self.closed = False
        self.late = 0  # replies that came after their call timed out
        self.task: Optional["asyncio.Task[None]"] = None

    def abandon(self, rid: int) -> None:
        if self.pending.pop(rid, None) is not None:
            self.abandoned[rid] = None
            if len(self.abandoned) > _ABANDONED_MAX:
                del self.abandoned[next(iter(self.abandoned))]

    async def read_loop(self) -> None:
        exc: BaseException = Unavailable("connection closed", in_doubt=True)
        try:
            while True:
                n = int.from_bytes(await self.reader.readexactly(4), "big")
                if not 1 <= n <= MAX_FRAME:
                    raise ProtocolError(f"frame length {n} outside 1..{MAX_FRAME}")
                rep = decode(await self.reader.readexactly(n))
                fut = self.pending.pop(rep.id, None)
                if fut is not None:
                    if not fut.done():
                        fut.set_result(rep)
                elif rep.id in self.abandoned:
                    del self.abandoned[rep.id]
                    self.late += 1
                elif isinstance(rep, ErrorReply) and rep.id == 0:
                    if rep.code == ErrorCode.UNAUTHORIZED:
                        raise AuthError(rep.code, rep.message)
                    raise Unavailable(f"server closed the connection: {server_error(rep)}",
                                      in_doubt=True)
                else:
                    raise ProtocolError(f"reply to unknown id {rep.id}")
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as e:
            exc = Unavailable(f"connection lost: {e!r}", in_doubt=True)
        except (ProtocolError, Unavailable, AuthError) as e:
            exc = e
        except asyncio.CancelledError:
            exc = Unavailable("client closed", in_doubt=True)
            raise
        finally:
            self.closed = True
            for fut in self.pending.values():
                if not fut.done():
                    fut.set_exception(exc)
            self.pending.clear()
            self.writer.close()


class AsyncClient:
    """The asyncio client: one TCP connection multiplexing up to ``max_in_flight``
    requests (a reader task resolves each request's future by id).

    Each call has its own timeout: a call that times out fails alone (its late reply is
    dropped) and the connection stays for the others. A lost connection fails every call
    in flight on it; the next call opens a new one. As with Client, a CHECK is never
    re-sent; the failure policy answers it or Unavailable is raised; and a QUEUED delay
    over ``max_queue_delay`` (seconds, default 10) is returned as LIMITED.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 7400, timeout: float = 1.0, *,
                 token: Optional[Union[bytes, str]] = None, token_file: Optional[str] = None,
                 failure: Optional[Union[Mapping[str, str], FailurePolicy]] = None,
                 failure_default: Optional[str] = None, max_in_flight: int = 1024,
                 connect_timeout: Optional[float] = None,
                 max_queue_delay: float = DEFAULT_MAX_QUEUE_DELAY,
                 ssl: Optional[_ssl.SSLContext] = None) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        self.host, self.port, self.timeout = host, port, timeout
        self.ssl = ssl  # TLS (ratelimiter.tls_context), None: plain TCP
        self._max_delay_ms = max_queue_delay_ms(max_queue_delay)
        self.max_queue_delay = max_queue_delay
        self.connect_timeout = connect_timeout if connect_timeout is not None else timeout
        self.token = load_token(token, token_file)
        self.failure = as_policy(failure, failure_default)
        self.max_in_flight = max_in_flight
        self.principal: Optional[str] = None
        self._conn: Optional[_Conn] = None
        self._lock: Optional[asyncio.Lock] = None
        self._slots = _Slots(max_in_flight)
        self._next_id = 0

    # -- connection ---------------------------------------------------------------------

    def _id(self) -> int:
        self._next_id = self._next_id % U32_MAX + 1
        return self._next_id

    @property
    def in_flight(self) -> int:
        return self._slots.used

    async def connect(self) -> "AsyncClient":
        await self._ensure()
        return self

    async def _ensure(self) -> _Conn:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._conn is not None and not self._conn.closed:
                return self._conn
            try:
                if self.ssl is not None:
                    opened = asyncio.open_connection(
                        self.host, self.port, ssl=self.ssl,
                        server_hostname=self.host if self.ssl.check_hostname else "")
                else:
                    opened = asyncio.open_connection(self.host, self.port)
                r, w = await asyncio.wait_for(opened, self.connect_timeout)
            except asyncio.TimeoutError:
                raise Timeout(f"connect to {self.host}:{self.port} timed out") from None
            except _ssl.SSLError as e:
                raise Unavailable(f"TLS with {self.host}:{self.port} failed: "
                                  f"{tls_describe(e)}") from None
            except OSError as e:
                raise Unavailable(f"cannot connect to {self.host}:{self.port}: {e}") from None
            conn = _Conn(r, w)
            conn.task = asyncio.ensure_future(conn.read_loop())
            if self.token is not None:
                rid = self._id()
                try:
                    rep = await self._call(conn, [(rid, encode_auth(rid, self.token))],
                                           self.connect_timeout)
                except BaseException:
                    await self._close_conn(conn)
                    raise
                a = rep[0]
                if isinstance(a, ErrorReply):
                    await self._close_conn(conn)
                    raise AuthError(a.code, a.message, rid)
                if not isinstance(a, Named) or a.op != Op.AUTH:
                    await self._close_conn(conn)
                    raise ProtocolError("AUTH answered with another reply")
                self.principal = a.name
            self._conn = conn
            return conn

    @staticmethod
    async def _close_conn(conn: _Conn) -> None:
        if conn.task is not None:
            conn.task.cancel()
            with contextlib.suppress(BaseException):
                await conn.task
        conn.writer.close()
        with contextlib.suppress(Exception):
            await conn.writer.wait_closed()

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await self._close_conn(conn)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- calls --------------------------------------------------------------------------

    async def _call(self, conn: _Conn, frames: List["tuple[int, bytes]"],
                    timeout: float) -> List[Decoded]:
        """Write frames in one write; wait for every reply within timeout."""
        loop = asyncio.get_running_loop()
        futs = []
        for rid, _ in frames:
            fut: "asyncio.Future[Decoded]" = loop.create_future()
            conn.pending[rid] = fut
            futs.append(fut)
        try:
            conn.writer.write(b"".join(f for _, f in frames))
            if conn.writer.transport.get_write_buffer_size() > 65536:  # backpressure
                await asyncio.wait_for(conn.writer.drain(), timeout)
            if len(futs) == 1:  # the common case, without asyncio.wait's overhead
                return [await asyncio.wait_for(futs[0], timeout)]
            done, pending = await asyncio.wait(futs, timeout=timeout)
        except asyncio.TimeoutError:
            raise Timeout("no reply within the timeout", in_doubt=True) from None
        except (ConnectionError, OSError) as e:
            raise Unavailable(f"connection lost: {e!r}", in_doubt=True) from None
        finally:
            for rid, _ in frames:
                conn.abandon(rid)
        # every failed future's error retrieved (asyncio would log the ones left), the first raised
        errors = [e for e in (f.exception() for f in done if not f.cancelled()) if e is not None]
        if pending:
            raise Timeout("no reply within the timeout", in_doubt=True)
        if errors:
            raise errors[0]  # the connection's error: it failed
        return [f.result() for f in futs]

    async def check(self, service: str, user: str, endpoint: Optional[str] = None,
                    cost: int = 1, timeout: Optional[float] = None,
                    limit: Optional[Any] = None) -> Reply:
        """As Client.check: a Reply, ServerError, or Unavailable/Timeout unless the
        failure policy answers (``local=True``); ``limit`` an inline limit."""
        c = as_check((service, user, endpoint, cost, limit))
        return (await self.check_many([c], timeout))[0]  # type: ignore[return-value]

    async def check_many(self, requests: Sequence[CheckLike], timeout: Optional[float] = None,
                         return_exceptions: bool = False) -> List[Union[Reply, ServerError]]:
        """As Client.check_many, on the shared connection: batches of at most
        max_in_flight requests, each batch in one write; ``timeout`` covers the call."""
        checks = [as_check(r) for r in requests]
        out: List[Optional[Union[Reply, ServerError]]] = [None] * len(checks)
        t = self.timeout if timeout is None else timeout
        loop = asyncio.get_running_loop()
        deadline = loop.time() + t
        try:
            for start in range(0, len(checks), self.max_in_flight):
                chunk = range(start, min(start + self.max_in_flight, len(checks)))
                try:
                    await asyncio.wait_for(self._slots.acquire(len(chunk)),
                                           max(deadline - loop.time(), 0))
                except asyncio.TimeoutError:
                    raise Timeout("too many requests in flight (max_in_flight)") from None
                try:
                    try:
                        conn = await asyncio.wait_for(self._ensure(),
                                                      max(deadline - loop.time(), 0))
                    except asyncio.TimeoutError:
                        raise Timeout("connect timed out") from None
                    frames = []
                    for i in chunk:
                        rid = self._id()
                        frames.append((rid, encode_check(rid, checks[i])))
                    reps = await self._call(conn, frames, max(deadline - loop.time(), 0))
                finally:
                    self._slots.release(len(chunk))
                for i, rep in zip(chunk, reps):
                    if isinstance(rep, Reply) and rep.op == Op.CHECK:
                        out[i] = attach(rep, checks[i], self._max_delay_ms)
                    elif isinstance(rep, ErrorReply):
                        out[i] = server_error(rep)
                    else:  # another op's reply (an ADJUST's has a CHECK's shape)
                        raise ProtocolError(f"CHECK answered with {rep_name(rep)}")
        except Unavailable as e:
            return settle_many(out, checks, self.failure, e, return_exceptions)
        return settle_many(out, checks, self.failure, None, return_exceptions)

    async def _settle_op(self, op: Op, data: Callable[[int], bytes], service: str,
                         endpoint: Optional[str], timeout: Optional[float]) -> Reply:
        """One ADJUST or RELEASE, never re-sent (as Client's)."""
        t = self.timeout if timeout is None else timeout
        try:
            conn = await asyncio.wait_for(self._ensure(), t)
        except asyncio.TimeoutError:
            raise Timeout("connect timed out") from None
        rid = self._id()
        frame = data(rid)
        await self._slots.acquire(1)
        try:
            rep = (await self._call(conn, [(rid, frame)], t))[0]
        finally:
            self._slots.release(1)
        if isinstance(rep, ErrorReply):
            raise server_error(rep)
        if not isinstance(rep, Reply) or rep.op != op:
            raise ProtocolError(f"{op.name} answered with another reply")
        return Reply(rep.code, rep.limit, rep.remaining, rep.reset_ms, rep.retry_after_ms,
                     service, endpoint, False, rep.id, rep.op)

    async def adjust(self, service: str, user: str, delta: int, endpoint: Optional[str] = None,
                     timeout: Optional[float] = None, limit: Optional[Any] = None) -> Reply:
        """As Client.adjust."""
        return await self._settle_op(
            Op.ADJUST, lambda rid: encode_adjust(rid, service, user, endpoint, delta, limit),
            service, endpoint, timeout)

    async def release(self, service: str, user: str, count: int = 1,
                      endpoint: Optional[str] = None, timeout: Optional[float] = None) -> Reply:
        """As Client.release."""
        return await self._settle_op(
            Op.RELEASE, lambda rid: encode_release(rid, service, user, endpoint, count),
            service, endpoint, timeout)

    async def reserve(self, service: str, user: str, estimate: int,
                      endpoint: Optional[str] = None, timeout: Optional[float] = None,
                      limit: Optional[Any] = None) -> AsyncReservation:
        """As Client.reserve: ``r = await c.reserve(...)``, ``await r.settle(actual)``."""
        return await reserve_async(self.check, self.adjust, service, user, estimate, endpoint,
                                   limit, timeout)

    def slot(self, service: str, user: str, endpoint: Optional[str] = None, count: int = 1,
             timeout: Optional[float] = None) -> AsyncContextManager[Reply]:
        """As Client.slot: ``async with c.slot(service, user):``."""
        return slot_async(self.check, self.release, service, user, endpoint, count, timeout)

    async def _simple(self, op: Op, timeout: Optional[float]) -> Decoded:
        t = self.timeout if timeout is None else timeout
        for attempt in (0, 1):
            try:
                conn = await asyncio.wait_for(self._ensure(), t)
            except asyncio.TimeoutError:
                raise Timeout("connect timed out") from None
            rid = self._id()
            await self._slots.acquire(1)
            try:
                rep = (await self._call(conn, [(rid, encode_simple(op, rid))], t))[0]
            except Timeout:
                raise
            except Unavailable:
                if attempt:
                    raise
                continue
            finally:
                self._slots.release(1)
            if isinstance(rep, ErrorReply):
                raise server_error(rep)
            return rep
        raise AssertionError("unreachable")

    async def ping(self, timeout: Optional[float] = None) -> str:
        rep = await self._simple(Op.PING, timeout)
        if not isinstance(rep, Pong):
            raise ProtocolError("PING answered with another reply")
        return rep.name

    async def stats(self, timeout: Optional[float] = None) -> Dict[str, int]:
        rep = await self._simple(Op.STATS, timeout)
        if not isinstance(rep, Stats):
            raise ProtocolError("STATS answered with another reply")
        return rep.values


async def connect_async(host: str = "127.0.0.1", port: int = 7400, timeout: float = 1.0,
                        **kwargs: object) -> AsyncClient:
    """A connected AsyncClient (see AsyncClient for the keyword arguments)."""
    return await AsyncClient(host, port, timeout, **kwargs).connect()  # type: ignore[arg-type]
