"""heraldpush: the asyncio Python client of the Herald push gateway.

WebSocket first, Server-Sent Events then long-poll when a transport fails, and back to the
preferred one when it works again; one cursor per topic kept across reconnects, transports
and nodes, so the application sees every message once and in order, or a :class:`Lost`
event with the gateway's reason.
"""

from .admin import AdminClient
from .backoff import Backoff, full_jitter
from .client import MAX_BUFFERED_EVENTS, Client, ErrorEvent, Event, HistoryPage, State, StateChanged, Stats, TokenSource
from .delta import MAX_DELTA_TARGET, DeltaError, apply_fossil
from .errors import HeraldError, RefusedError, TransportError
from .transports import MAX_PENDING, TransportName
from .wire import Lost, Message, Presence, Published

__all__ = [
    "AdminClient",
    "Backoff",
    "Client",
    "DeltaError",
    "MAX_DELTA_TARGET",
    "apply_fossil",
    "Stats",
    "ErrorEvent",
    "Event",
    "HeraldError",
    "HistoryPage",
    "Lost",
    "MAX_BUFFERED_EVENTS",
    "MAX_PENDING",
    "Message",
    "Presence",
    "Published",
    "RefusedError",
    "State",
    "StateChanged",
    "TokenSource",
    "TransportError",
    "TransportName",
    "full_jitter",
]
__version__ = "0.1.0"
