"""Costs settled after the work, and slots of work in flight, over any client.

``Reservation`` is what ``reserve()`` returns: a CHECK of an estimated cost taken, to be
settled with ``settle(actual)`` (an ADJUST by actual - estimate: a charge past the limit
too, or a refund). ``slot()`` is the context manager that takes concurrency slots with a
CHECK and gives them back with a RELEASE when its block ends, by an exception too
(docs/PROTOCOL.md, "ADJUST" and "RELEASE"). Not for the wire (protocol.py) nor the
connections (client.py, aio.py), whose ``adjust``/``release`` these call.
"""

from __future__ import annotations

import contextlib
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator, List, Optional

from .protocol import DELTA_MAX, Code, Limited, Reply

# The codes after which the CHECK took something the node counts (and so ADJUST or RELEASE
# has something to settle): a decision that allowed. FAIL_OPEN allowed without a decision
# (nothing was counted); NO_RULE: no rule, nothing to count.
_TAKEN = (Code.ALLOWED, Code.QUEUED)


def _refused(reply: Reply) -> bool:
    return not reply.allowed


def deltas(delta: int) -> List[int]:
    """delta split into ADJUSTs of at most DELTA_MAX each (one, unless it is larger)."""
    out: List[int] = []
    while delta > DELTA_MAX or delta < -DELTA_MAX:
        step = DELTA_MAX if delta > 0 else -DELTA_MAX
        out.append(step)
        delta -= step
    if delta != 0:
        out.append(delta)
    return out


class Reservation:
    """An estimated cost taken by ``reserve()``; ``settle(actual)`` once the work is done.

    ``reply`` is the CHECK's answer. Settling sends ADJUST(actual - estimate) when the
    estimate was counted (ALLOWED, QUEUED); after FAIL_OPEN (allowed without a decision,
    nothing counted) it charges ``actual`` whole; after NO_RULE it sends nothing. A
    reservation is settled once: a second ``settle`` raises RuntimeError. ADJUST is not
    idempotent, so a settlement whose reply was lost (Unavailable with ``in_doubt``) is
    not re-sent: it is lost rather than counted twice.
    """

    def __init__(self, adjust: Callable[..., Reply], service: str, user: str, estimate: int,
                 endpoint: Optional[str], limit: Optional[Any], reply: Reply) -> None:
        self._adjust = adjust
        self.service, self.user, self.endpoint, self.limit = service, user, endpoint, limit
        self.estimate = estimate
        self.reply = reply
        self.settled = False
        self.actual: Optional[int] = None

    def delta(self, actual: int) -> int:
        """What settle(actual) ADJUSTs by (0: nothing is sent)."""
        if self.reply.code in _TAKEN:
            return actual - self.estimate
        if self.reply.code == Code.FAIL_OPEN:
            return actual
        return 0

    def settle(self, actual: int, timeout: Optional[float] = None) -> Optional[Reply]:
        """Settle at ``actual`` (an int >= 0): the last ADJUST's reply, None if none was
        needed."""
        if type(actual) is not int or actual < 0:
            raise ValueError("actual must be an int >= 0")
        if self.settled:
            raise RuntimeError("this reservation is settled already")
        self.settled, self.actual = True, actual
        last: Optional[Reply] = None
        for d in deltas(self.delta(actual)):
            last = self._adjust(self.service, self.user, d, endpoint=self.endpoint,
                                timeout=timeout, limit=self.limit)
        return last

    def __repr__(self) -> str:
        return (f"Reservation({self.service!r}, {self.user!r}, estimate={self.estimate}, "
                f"code={self.reply.code.name}, settled={self.settled})")


def reserve(check: Callable[..., Reply], adjust: Callable[..., Reply], service: str, user: str,
            estimate: int, endpoint: Optional[str], limit: Optional[Any],
            timeout: Optional[float]) -> Reservation:
    reply = check(service, user, endpoint, estimate, timeout, limit=limit)
    if _refused(reply):
        raise Limited(reply, f"reserve({service!r}, {user!r}, {estimate})")
    return Reservation(adjust, service, user, estimate, endpoint, limit, reply)


@contextlib.contextmanager
def slot(check: Callable[..., Reply], release: Callable[..., Reply], service: str, user: str,
         endpoint: Optional[str], count: int, timeout: Optional[float]) -> Iterator[Reply]:
    """Take ``count`` slots (a CHECK of that cost), yield its reply, give them back (RELEASE)
    when the block ends, however it ends. Refused: Limited, and nothing to give back. Slots
    are given back only when the CHECK counted them (ALLOWED, QUEUED). When the RELEASE
    itself fails, the block's own exception wins; otherwise its error is raised (the
    node frees the slots when their lease ends in any case)."""
    reply = check(service, user, endpoint, count, timeout)
    if _refused(reply):
        raise Limited(reply, f"slot({service!r}, {user!r})")
    if reply.code not in _TAKEN:
        yield reply
        return
    ok = False
    try:
        yield reply
        ok = True
    finally:
        if ok:
            release(service, user, count, endpoint=endpoint, timeout=timeout)
        else:
            with contextlib.suppress(Exception):
                release(service, user, count, endpoint=endpoint, timeout=timeout)


class AsyncReservation(Reservation):
    """Reservation of AsyncClient.reserve: ``await r.settle(actual)``."""

    async def settle(self, actual: int,  # type: ignore[override]
                     timeout: Optional[float] = None) -> Optional[Reply]:
        if type(actual) is not int or actual < 0:
            raise ValueError("actual must be an int >= 0")
        if self.settled:
            raise RuntimeError("this reservation is settled already")
        self.settled, self.actual = True, actual
        last: Optional[Reply] = None
        for d in deltas(self.delta(actual)):
            last = await self._adjust(self.service, self.user, d, endpoint=self.endpoint,
                                      timeout=timeout, limit=self.limit)
        return last


async def reserve_async(check: Callable[..., Awaitable[Reply]],
                        adjust: Callable[..., Awaitable[Reply]], service: str, user: str,
                        estimate: int, endpoint: Optional[str], limit: Optional[Any],
                        timeout: Optional[float]) -> AsyncReservation:
    reply = await check(service, user, endpoint, estimate, timeout, limit=limit)
    if _refused(reply):
        raise Limited(reply, f"reserve({service!r}, {user!r}, {estimate})")
    return AsyncReservation(adjust, service, user, estimate, endpoint, limit, reply)


@contextlib.asynccontextmanager
async def slot_async(check: Callable[..., Awaitable[Reply]],
                     release: Callable[..., Awaitable[Reply]], service: str, user: str,
                     endpoint: Optional[str], count: int,
                     timeout: Optional[float]) -> AsyncIterator[Reply]:
    """slot() for AsyncClient: ``async with client.slot(service, user):``, the same rules
    (a cancelled block gives its slots back too)."""
    reply = await check(service, user, endpoint, count, timeout)
    if _refused(reply):
        raise Limited(reply, f"slot({service!r}, {user!r})")
    if reply.code not in _TAKEN:
        yield reply
        return
    ok = False
    try:
        yield reply
        ok = True
    finally:
        if ok:
            await release(service, user, count, endpoint=endpoint, timeout=timeout)
        else:
            with contextlib.suppress(Exception):
                await release(service, user, count, endpoint=endpoint, timeout=timeout)
