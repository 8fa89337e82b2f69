"""Python client for the ratelimiter cluster (wire protocol v1, docs/PROTOCOL.md)."""

from .aio import AsyncClient, connect_async
from .client import ClientPool, Client, connect
from .headers import PASS, ceil_s, headers, sf_string
from .policy import CLOSED, OPEN, FailurePolicy
from .tls import tls_context
from .protocol import (DEFAULT_MAX_QUEUE_DELAY, MAX_FRAME, MAX_HEADER_S, RETRY_NEVER,
                       AuthError, Check, Code, ErrorCode, Limited, ProtocolError,
                       RateLimiterError, Reply, ServerError, Timeout, Unavailable)
from .reserve import AsyncReservation, Reservation

__version__ = "0.1.0"

__all__ = [
    "AsyncClient", "AsyncReservation", "AuthError", "CLOSED", "Check", "Client", "ClientPool", "Code",
    "DEFAULT_MAX_QUEUE_DELAY", "ErrorCode", "FailurePolicy", "Limited", "MAX_FRAME", "MAX_HEADER_S", "OPEN", "PASS", "ProtocolError",
    "RETRY_NEVER", "RateLimiterError", "Reply", "Reservation", "ServerError", "Timeout", "Unavailable",
    "ceil_s", "connect", "connect_async", "headers", "sf_string", "tls_context",
]
