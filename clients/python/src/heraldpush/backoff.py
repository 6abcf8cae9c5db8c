"""Reconnect delays (exponential backoff with full jitter) and which URL and transport the
next attempt uses."""

from __future__ import annotations

import random as _random
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Backoff", "full_jitter", "Reconnects"]


@dataclass(frozen=True)
class Backoff:
    """Delays in seconds: attempt ``n`` waits a random time in ``[0, min(max, base * 2**n)]``."""

    base: float = 0.5
    max: float = 30.0


def full_jitter(attempt: int, backoff: Backoff, rand: Callable[[], float] = _random.random) -> float:
    bound = min(backoff.max, backoff.base * 2 ** min(max(attempt, 0), 30))
    return float(rand() * bound)


class Reconnects:
    """Where and when to reconnect. An attempt that fails (cannot connect, or is cut off
    before it was stable) moves on to the next URL, and once every URL failed on this
    transport, to the next transport; the delays grow with the failures in a row."""

    def __init__(self, urls: int, transports: int, backoff: Backoff,
                 rand: Callable[[], float] = _random.random) -> None:
        self.transport = 0
        self.url = 0
        self._urls = urls
        self._transports = transports
        self._backoff = backoff
        self._rand = rand
        self._fails_here = 0
        self._failures = 0

    def upgraded(self, transport: int) -> None:
        """A preferred transport opened and took over."""
        self.transport = transport
        self._fails_here = 0

    def closed(self, transport: int, stable: bool, shutdown: bool, retry_after: float | None) -> float:
        """The delay after a connection of ``transport`` ended, not refused."""
        if shutdown:
            # The node drains: not the transport's fault; its hint is spread per client.
            return retry_after if retry_after is not None else full_jitter(3, self._backoff, self._rand)
        if stable:
            self._failures = 0
            self._fails_here = 0
            return retry_after if retry_after is not None else full_jitter(0, self._backoff, self._rand)
        self.url = (self.url + 1) % self._urls
        self._fails_here += 1
        if self._fails_here >= self._urls and transport == self.transport:
            self._fails_here = 0
            self.transport = (self.transport + 1) % self._transports
        delay = full_jitter(self._failures, self._backoff, self._rand)
        self._failures += 1
        return max(retry_after or 0.0, delay)
