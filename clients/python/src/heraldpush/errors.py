"""The client's exceptions: the gateway's stable code and reason, as it sent them."""

from __future__ import annotations

__all__ = ["HeraldError", "RefusedError", "TransportError"]


class HeraldError(Exception):
    """A refusal from the gateway: ``code`` is its stable error code (``forbidden``,
    ``bad_topic``, ``invalid_token``, ...), ``reason`` its words, ``status`` the HTTP status
    (0 when the refusal came in a WebSocket frame)."""

    def __init__(self, code: str, reason: str, status: int = 0) -> None:
        super().__init__(f"{code}: {reason}" + (f" (HTTP {status})" if status else ""))
        self.code = code
        self.reason = reason
        self.status = status


class RefusedError(HeraldError):
    """A refusal that retrying cannot fix (a 4xx other than 408/429, ``forbidden``, a
    disconnect with ``reconnect: false``): the client closes."""


class TransportError(Exception):
    """A connection failed or ended (not a refusal): the client reconnects."""
