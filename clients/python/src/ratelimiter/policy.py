"""Client-side failure policy: what check() answers when the router itself cannot be
reached, the connection is lost, or the call times out."""

from __future__ import annotations

from typing import Mapping, Optional

from .protocol import Check, Code, Reply

OPEN = "open"
CLOSED = "closed"
LOCAL_RETRY_AFTER_MS = 1000  # a local FAIL_CLOSED says: try again in 1 s


class FailurePolicy:
    """Per service ``open`` or ``closed``, like the cluster's ``failure`` key.

    ``services`` maps a service name to "open" or "closed"; ``default`` applies to the
    others. A service with no entry and ``default=None`` has no policy: the error is
    raised. ``FailurePolicy()`` (no services, default None) always raises.
    """

    def __init__(self, services: Optional[Mapping[str, str]] = None,
                 default: Optional[str] = None) -> None:
        self.services = dict(services or {})
        for name, value in list(self.services.items()) + [("default", default)]:
            if value not in (OPEN, CLOSED) and not (name == "default" and value is None):
                raise ValueError(f"failure policy for {name!r} must be 'open' or 'closed'")
        self.default = default

    def policy(self, service: str) -> Optional[str]:
        return self.services.get(service, self.default)

    def decide(self, check: Check) -> Optional[Reply]:
        """The local decision for ``check``, or None when the error must be raised.

        open: Reply(FAIL_OPEN, 0, 0, 0, 0, local=True);
        closed: Reply(FAIL_CLOSED, 0, 0, 0, retry_after_ms=1000, local=True).
        """
        p = self.policy(check.service)
        if p is None:
            return None
        if p == OPEN:
            return Reply(Code.FAIL_OPEN, service=check.service, endpoint=check.endpoint,
                         local=True)
        return Reply(Code.FAIL_CLOSED, retry_after_ms=LOCAL_RETRY_AFTER_MS,
                     service=check.service, endpoint=check.endpoint, local=True)


def as_policy(failure: "Optional[Mapping[str, str] | FailurePolicy]",
              default: Optional[str]) -> FailurePolicy:
    if isinstance(failure, FailurePolicy):
        return failure
    return FailurePolicy(failure, default)
