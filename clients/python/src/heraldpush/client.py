"""The client: one connection at a time, its life (connect, fall back, reconnect, probe back
up), the subscriptions and their cursors, and the events the application reads.

The wire itself is ``wire.py``; the transports' I/O is ``transports.py``.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import enum
import inspect
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Union

import httpx

from . import wire
from .backoff import Backoff, Reconnects, full_jitter
from .errors import HeraldError, RefusedError
from .transports import Closed, ConnContext, Connection, TransportName, open_connection

__all__ = ["Client", "State", "StateChanged", "ErrorEvent", "Event", "TokenSource", "HistoryPage",
           "MAX_BUFFERED_EVENTS"]

#: Events the client holds for the application by default; past it the connection waits (it
#: stops reading, and the gateway applies its lag policy: a loss signal or a disconnect).
MAX_BUFFERED_EVENTS = 1000

TokenSource = Union[str, Callable[[], Union[str, Awaitable[str]]]]


class State(str, enum.Enum):
    CONNECTING = "connecting"
    CONNECTED = "connected"
    DISCONNECTED = "disconnected"
    CLOSED = "closed"


@dataclass(frozen=True)
class StateChanged:
    """The connection's state changed (or, while connected, its transport)."""

    state: State
    transport: TransportName | None


@dataclass(frozen=True)
class ErrorEvent:
    """A failed attempt, a dropped or malformed connection (the client reconnects), or, with
    ``fatal``, the refusal that closed the client. ``code`` is the gateway's when it gave one."""

    code: str | None
    reason: str
    fatal: bool = False


Event = Union[wire.Message, wire.Lost, wire.Presence, StateChanged, ErrorEvent]


@dataclass
class Stats:
    """The client's counters (:attr:`Client.stats`)."""

    #: Deltas applied.
    deltas: int = 0
    #: Deltas that could not be applied (each also an :class:`ErrorEvent` ``bad_delta``):
    #: never delivered; their topics were subscribed again from their cursors.
    delta_failures: int = 0
    #: WebSocket batch frames received (several frames packed into one; ``batch=True``).
    batches: int = 0


def _delta_flag(delta: str | None) -> bool:
    if delta is None:
        return False
    if delta != "fossil":
        raise ValueError(f"unknown delta {delta!r} (only 'fossil')")
    return True


@dataclass(frozen=True)
class HistoryPage:
    topic: str
    messages: tuple[wire.Message, ...]
    lost: str | None
    more: bool
    next: str | None


def _claims(token: str) -> dict[str, Any]:
    try:
        part = token.split(".")[1]
        c = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
        return c if isinstance(c, dict) else {}
    except (IndexError, ValueError):
        return {}


class Client:
    """A Herald client. Use it as an async context manager and iterate its events::

        async with Client("https://push.example.com", topics=["news"]) as herald:
            async for ev in herald:
                if isinstance(ev, Message):
                    print(ev.topic, ev.id, ev.data)

    ``urls``: the gateway's base URL, or the nodes of a cluster (tried in turn on failures;
    cursors are the cluster's, so resuming on another node is exact). ``transports``: the
    order to try. ``fmt``: ``"msgpack"`` speaks the ``herald.msgpack`` WebSocket subprotocol.
    ``token``: a JWT, or a function (sync or async) called for the first token, again
    ``token_refresh_margin`` seconds before it expires, and once when the gateway refuses
    one. ``cursors``: where to resume topics from (``{topic: "<epoch>-<seq>"}``).
    ``dead_timeout``: a connection that receives nothing (heartbeats included) this long is
    dead. ``max_buffered``: events held for the application (:data:`MAX_BUFFERED_EVENTS`).
    ``delta``: ``"fossil"`` asks for Fossil deltas (docs/protocol.md "Delta compression") on the
    ``topics`` given here; :meth:`subscribe` takes its own. The client applies them: a
    :class:`Message` always holds the full data. :attr:`stats` counts them.
    ``batch``: the WebSocket asks the gateway to pack the messages it has ready into one frame
    (``?batch=1``; each is delivered as if it had come alone; :attr:`stats` counts the batch
    frames); False asks for one frame per message. ``deflate``: offer permessage-deflate on
    the WebSocket. Off by default: at 10k msg/s inflating cost this client ~11 % and the
    gateway node ~35 % CPU per message, and the gateway does not batch on a deflate
    connection; turn it on for large, compressible messages on a slow link.
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        topics: Iterable[str] = (),
        transports: Sequence[TransportName] = ("ws", "sse", "poll"),
        fmt: Literal["json", "msgpack"] = "json",
        token: TokenSource | None = None,
        cursors: Mapping[str, str] | None = None,
        api_key: str | None = None,
        backoff: Backoff = Backoff(),
        dead_timeout: float = 45.0,
        open_timeout: float = 10.0,
        stable_after: float = 5.0,
        upgrade_interval: float = 30.0,
        poll_timeout: float = 25.0,
        token_refresh_margin: float = 30.0,
        max_topics: int = 64,
        max_buffered: int = MAX_BUFFERED_EVENTS,
        delta: Literal["fossil"] | None = None,
        batch: bool = True,
        deflate: bool = False,
    ) -> None:
        self._urls = [urls] if isinstance(urls, str) else list(urls)
        if not self._urls:
            raise ValueError("give at least one gateway URL")
        for t in transports:
            if t not in ("ws", "sse", "poll"):
                raise ValueError(f"unknown transport {t!r}")
        self._transports: list[TransportName] = list(transports)
        if not self._transports:
            raise ValueError("give at least one transport")
        if fmt not in ("json", "msgpack"):
            raise ValueError(f"unknown format {fmt!r}")
        self._fmt = fmt
        self._batch = batch
        self._deflate = deflate
        self._token_source = token
        self._token: str | None = token if isinstance(token, str) else None
        self._api_key = api_key
        self._dead_timeout = dead_timeout
        self._open_timeout = open_timeout
        self._stable_after = stable_after
        self._upgrade_interval = upgrade_interval
        self._poll_timeout = poll_timeout
        self._margin = token_refresh_margin
        self._max_topics = max_topics
        self._backoff = backoff
        self._retry = Reconnects(len(self._urls), len(self._transports), backoff)
        # Subscriptions and cursors.
        #: Topics and patterns subscribed -> whether they asked for deltas.
        self._subs: dict[str, bool] = {}
        self._stats = Stats()
        self._cursors: dict[str, str] = dict(cursors or {})
        self._recent: collections.OrderedDict[str, None] = collections.OrderedDict()
        for name in list(topics):
            self._add_topic(name, _delta_flag(delta))
        for name in self._cursors:
            if name not in self._subs and self._pattern_of(name) is not None:
                self._recent[name] = None
        # The connection's life.
        #: Events for the application; None only wakes a reader at close() (next_event).
        self._events: asyncio.Queue[Event | None] = asyncio.Queue(max_buffered)
        self._readers = 0
        self._ctl: asyncio.Queue[tuple[str, Connection, Closed | None]] = asyncio.Queue()
        self._state = State.CONNECTING
        self._transport: TransportName | None = None
        self._conn: Connection | None = None
        self._conn_ti = 0
        self._conn_opened_at: float | None = None
        self._probe: Connection | None = None
        self._tasks: dict[Connection, asyncio.Task[None]] = {}
        self._open_acks: dict[Connection, asyncio.Event] = {}
        self._supervisor: asyncio.Task[None] | None = None
        self._token_task: asyncio.Task[None] | None = None
        self._token_retried = False
        self._http: httpx.AsyncClient | None = None
        self._closed = False
        self._closed_event: asyncio.Event | None = None

    # ------------------------------------------------------------------ public API

    async def __aenter__(self) -> Client:
        await self.connect()
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Event]:
        while True:
            ev = await self.next_event()
            if ev is None:
                return
            yield ev

    async def next_event(self) -> Event | None:
        """The next event; None once the client is closed and every event was read."""
        assert self._closed_event is not None, "connect() first"
        if not self._events.empty():
            # One queued already: no tasks to race (two per event cost a fifth of the CPU of
            # a busy subscriber; clients/bench/cpu.py). None: a wake-up from close().
            ev = self._events.get_nowait()
        elif self._closed_event.is_set():
            ev = None
        else:
            # Wait on the queue itself, so no second task has to watch the closed flag. Once
            # the client is closed, whoever empties the queue while readers still wait here
            # (counted in _readers) wakes the next of them with a None (_wake_next).
            self._readers += 1
            try:
                ev = await self._events.get()
            finally:
                self._readers -= 1
        self._wake_next()
        return ev

    def _wake_next(self) -> None:
        """After close(): a None for a reader still waiting in next_event on an empty queue
        (it fits: the queue is empty)."""
        if self._readers and self._events.empty() and self._closed_event is not None and self._closed_event.is_set():
            self._events.put_nowait(None)

    @property
    def state(self) -> State:
        return self._state

    @property
    def transport(self) -> TransportName | None:
        return self._transport

    def cursor(self, topic: str) -> str | None:
        """A topic's cursor: the id of the last message delivered, or its starting position."""
        return self._cursors.get(topic)

    @property
    def cursors(self) -> dict[str, str]:
        """Every cursor the client holds (topics subscribed, and those its patterns delivered)."""
        return dict(self._cursors)

    async def connect(self) -> None:
        """Starts connecting (``async with`` does it); returns at once."""
        if self._supervisor is not None:
            return
        self._closed_event = asyncio.Event()
        self._http = httpx.AsyncClient(trust_env=False, timeout=self._open_timeout)
        await self._emit_state(State.CONNECTING, None)
        self._supervisor = asyncio.ensure_future(self._supervise())

    def subscribe(self, topic: str, *, delta: Literal["fossil"] | None = None) -> None:
        """Subscribes to a topic or a prefix pattern (``orders.*``) on the live connection.

        ``delta="fossil"`` asks for Fossil deltas on it (its namespace must allow them, else the
        gateway refuses it: ``delta_not_allowed``). A WebSocket asks per topic; SSE and
        long-poll ask per connection, so only while every topic and pattern subscribed asks.
        A delta that does not apply is counted (:attr:`stats`, an :class:`ErrorEvent` with
        code ``bad_delta``), never delivered, and its topic is subscribed again from its
        cursor, so the message comes again in full."""
        if self._add_topic(topic, _delta_flag(delta)):
            self._changed()

    def unsubscribe(self, topic: str) -> None:
        if topic in self._subs:
            del self._subs[topic]
            if not wire.is_pattern(topic):
                self._cursors.pop(topic, None)
            self._changed()

    async def publish(self, topic: str, data: Any, *, event: str | None = None) -> wire.Published:
        """Publishes: over the WebSocket when it is open (the token's ``publish`` claim must allow
        the topic), else ``POST /v1/publish`` on the gateway's public listener (a token allowed
        to publish, or ``api_key``). A refusal raises :class:`HeraldError`."""
        if not wire.is_topic(topic):
            raise ValueError(f"bad topic name {topic!r}")
        conn = self._conn
        if conn is not None and self._state is State.CONNECTED:
            done = await conn.publish(topic, data, event)
            if done is not None:
                return done
        body: dict[str, Any] = {"topic": topic, "data": data}
        if event is not None:
            body["event"] = event
        res = await self._http_client().post(self._url("/v1/publish"), json=body, headers=self._auth())
        o = self._answer(res)
        return wire.Published(topic=str(o.get("topic", topic)), id=str(o["id"]))

    async def history(self, topic: str, *, since: str | None = None, limit: int = 100) -> HistoryPage:
        """A page of a topic's history (``GET /v1/topics/{topic}/history``), oldest first."""
        params: dict[str, str | int] = {"limit": limit}
        if since is not None:
            params["since"] = since
        res = await self._http_client().get(self._url(f"/v1/topics/{topic}/history"), params=params,
                                            headers=self._auth())
        o = self._answer(res)
        raw = o.get("messages") or []
        messages = tuple(wire.decode_object(m) for m in raw)
        return HistoryPage(topic, tuple(m for m in messages if isinstance(m, wire.Message)),
                           o.get("lost") if isinstance(o.get("lost"), str) else None,
                           o.get("more") is True, o.get("next") if isinstance(o.get("next"), str) else None)

    async def close(self) -> None:
        """Closes the client: every task ends before this returns."""
        if self._closed:
            return
        self._closed = True
        tasks = [t for t in (self._supervisor, self._token_task, *self._tasks.values()) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks.clear()
        self._conn = self._probe = None
        if self._http is not None:
            await self._http.aclose()
        self._set_state_nowait(State.CLOSED, None)
        if self._closed_event is not None:
            self._closed_event.set()
        self._wake_next()  # readers waiting in next_event, and no state event queued to wake one

    # ------------------------------------------------------------------ subscriptions

    @property
    def stats(self) -> Stats:
        """Counters: deltas applied, deltas that could not be, batch frames received."""
        return Stats(self._stats.deltas, self._stats.delta_failures, self._stats.batches)

    def _add_topic(self, topic: str, delta: bool = False) -> bool:
        err = wire.pattern_error(topic)
        if err is not None:
            raise ValueError(f"bad topic or pattern {topic!r}: {err}")
        if topic in self._subs:
            return False
        if len(self._subs) >= self._max_topics:
            raise ValueError(f"at most {self._max_topics} topics per connection")
        self._subs[topic] = delta
        self._recent.pop(topic, None)
        return True

    def _pattern_of(self, topic: str) -> str | None:
        for p in self._subs:
            if wire.matches_pattern(p, topic):
                return p
        return None

    def _resume(self) -> dict[str, str | None]:
        return {t: (None if wire.is_pattern(t) else self._cursors.get(t)) for t in self._subs}

    def _pattern_cursors(self) -> dict[str, str]:
        return {t: c for t in self._recent if (c := self._cursors.get(t)) is not None and t not in self._subs}

    def _touch(self, topic: str) -> None:
        """A topic a pattern delivered, now the most recent: past MAX_PATTERN_TOPICS the least
        recent is forgotten (as the gateway does)."""
        if topic in self._subs:
            return
        self._recent.pop(topic, None)
        if self._pattern_of(topic) is None:
            return
        self._recent[topic] = None
        while len(self._recent) > wire.MAX_PATTERN_TOPICS:
            oldest, _ = self._recent.popitem(last=False)
            self._cursors.pop(oldest, None)

    def _changed(self) -> None:
        for c in (self._conn, self._probe):
            if c is not None:
                c.update()

    # ------------------------------------------------------------------ what connections report

    async def _sink(self, conn: Connection, ev: wire.WireEvent) -> None:
        if conn is not self._conn and conn is not self._probe:
            return
        if type(ev) is wire.Message:
            # The hot path (every message): the same as the Message branch below, without
            # a coroutine for the put while there is room (the buffer stays bounded: a full
            # one still waits in put()).
            if not wire.is_after(ev.id, self._cursors.get(ev.topic)):
                return
            self._cursors[ev.topic] = ev.id
            if ev.topic not in self._subs:
                self._touch(ev.topic)
            if self._events.full():
                await self._events.put(ev)
            else:
                self._events.put_nowait(ev)
        elif isinstance(ev, wire.DeltaResult):
            if ev.error is None:
                self._stats.deltas += 1
            else:
                self._stats.delta_failures += 1
                await self._events.put(ErrorEvent(
                    "bad_delta", f"{conn.transport}: a delta of {ev.topic} did not apply ({ev.error}): "
                    "subscribed again from its cursor"))
        elif isinstance(ev, wire.Batch):
            self._stats.batches += 1
        elif isinstance(ev, wire.Message):
            # Cursors only move forward: the overlap of two connections never shows twice.
            if not wire.is_after(ev.id, self._cursors.get(ev.topic)):
                return
            self._cursors[ev.topic] = ev.id
            self._touch(ev.topic)
            await self._events.put(ev)
        elif isinstance(ev, wire.Lost):
            if not wire.is_pattern(ev.topic):
                if ev.cursor is not None:
                    self._cursors[ev.topic] = ev.cursor
                else:
                    self._cursors.pop(ev.topic, None)
            await self._events.put(wire.Lost(ev.topic, ev.reason))
        elif isinstance(ev, (wire.Opened, wire.ServerSubscribed)):
            for t, c in ev.positions.items():
                self._position(t, c)
            if isinstance(ev, wire.Opened) and not conn.opened.is_set():
                # The state event (and a probe's promotion) comes before this connection's
                # first message.
                ack = self._open_acks.setdefault(conn, asyncio.Event())
                self._ctl.put_nowait(("open", conn, None))
                await ack.wait()
        elif isinstance(ev, wire.Presence):
            await self._events.put(ev)

    def _position(self, topic: str, cursor: str) -> None:
        if wire.is_pattern(topic) or wire.parse_cursor(cursor) is None:
            return
        current = self._cursors.get(topic)
        if current is None:
            if topic in self._subs or self._pattern_of(topic) is not None:
                self._cursors[topic] = cursor
                self._touch(topic)
            return
        a, b = wire.parse_cursor(current), wire.parse_cursor(cursor)
        # Another epoch: the gateway's loss signal decides where delivery goes on.
        if a is not None and b is not None and a.epoch == b.epoch and b.seq > a.seq:
            self._cursors[topic] = cursor

    # ------------------------------------------------------------------ the connection's life

    def _ctx(self, url: str) -> ConnContext:
        return ConnContext(url=url, fmt=self._fmt, topics=self._resume, pattern_cursors=self._pattern_cursors,
                           token=lambda: self._token, http=self._http_client(),
                           open_timeout=self._open_timeout, dead_timeout=self._dead_timeout,
                           poll_timeout=self._poll_timeout, delta=lambda t: self._subs.get(t, False),
                           batch=self._batch, deflate=self._deflate)

    def _spawn(self, ti: int) -> Connection:
        conn = open_connection(self._transports[ti], self._ctx(self._urls[self._retry.url]), self._sink)

        async def drive() -> None:
            try:
                info = await conn.run()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a bug in a transport must not take the client down
                info = Closed(f"{conn.transport}: {e!r}", protocol_error=True)
            self._ctl.put_nowait(("closed", conn, info))

        self._tasks[conn] = asyncio.ensure_future(drive())
        return conn

    async def _drop(self, conn: Connection | None) -> None:
        if conn is None:
            return
        task = self._tasks.pop(conn, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _supervise(self) -> None:
        delay = 0.0
        token_failures = 0
        probe_at: float | None = None
        probe_ti = 0
        while not self._closed:
            if self._conn is None:
                if delay > 0:
                    await asyncio.sleep(delay)
                if self._token_source is not None and self._token is None:
                    try:
                        await self._refresh_token()
                    except Exception as e:
                        # Not the transport's fault: the same URL and transport, after a backoff.
                        await self._emit(ErrorEvent("token", f"the token function failed: {e!r}"))
                        token_failures += 1
                        delay = full_jitter(token_failures, self._backoff)
                        continue
                    token_failures = 0
                if self._state is not State.CONNECTING:
                    await self._emit_state(State.CONNECTING, None)
                self._conn_ti = self._retry.transport
                self._conn = self._spawn(self._conn_ti)
                self._conn_opened_at = None
                probe_at = None
            wait = None if probe_at is None else max(0.0, probe_at - time.monotonic())
            try:
                kind, conn, info = await asyncio.wait_for(self._ctl.get(), wait)
            except asyncio.TimeoutError:
                # Time to try the preferred transports again.
                probe_at = None
                if self._conn is not None and self._probe is None and probe_ti < self._conn_ti:
                    self._probe = self._spawn(probe_ti)
                continue
            if kind == "open":
                ack = self._open_acks.pop(conn, None)
                try:
                    await self._opened(conn)
                finally:
                    if ack is not None:
                        ack.set()
                if self._conn is conn and self._conn_ti > 0:
                    probe_ti, probe_at = 0, time.monotonic() + self._upgrade_interval
                continue
            assert info is not None
            self._tasks.pop(conn, None)
            if conn is self._probe:
                # Still failing: the next preferred one, or the next round.
                self._probe = None
                probe_ti += 1
                if probe_ti < self._conn_ti:
                    probe_at = time.monotonic()
                else:
                    probe_ti, probe_at = 0, time.monotonic() + self._upgrade_interval
                continue
            if conn is not self._conn:
                continue
            await self._drop(self._probe)
            self._conn, self._probe, probe_at = None, None, None
            delay = await self._on_closed(conn, info)

    async def _opened(self, conn: Connection) -> None:
        """A connection opened: the probe takes over, or the connection is connected."""
        if conn is self._probe:
            old, self._conn, self._probe = self._conn, conn, None
            self._conn_ti = self._transports.index(conn.transport)
            self._retry.upgraded(self._conn_ti)
            await self._drop(old)
        elif conn is not self._conn:
            return
        self._conn_opened_at = time.monotonic()
        self._token_retried = False
        self._start_token_timer()
        await self._emit_state(State.CONNECTED, conn.transport)

    async def _on_closed(self, conn: Connection, info: Closed) -> float:
        opened_at, self._conn_opened_at = self._conn_opened_at, None
        if info.fatal is not None:
            if info.fatal.code == "invalid_token" or info.fatal.status == 401:
                if callable(self._token_source) and not self._token_retried:
                    # One fresh token, then the same refusal is final.
                    self._token_retried = True
                    self._token = None
                    await self._emit(ErrorEvent(info.fatal.code, info.reason))
                    await self._emit_state(State.DISCONNECTED, None)
                    return 0.0
            await self._emit(ErrorEvent(info.fatal.code, info.reason, fatal=True))
            # close() cancels this task: wait for it.
            asyncio.ensure_future(self.close())
            return 3600.0
        code = "protocol_error" if info.protocol_error else None
        await self._emit(ErrorEvent(code, info.reason))
        if info.token_expired:
            self._token = None if callable(self._token_source) else self._token
        stable = opened_at is not None and time.monotonic() - opened_at >= self._stable_after
        delay = self._retry.closed(self._conn_ti, stable, info.shutdown, info.retry_after)
        await self._emit_state(State.DISCONNECTED, None)
        return delay

    # ------------------------------------------------------------------ tokens

    async def _refresh_token(self) -> None:
        src = self._token_source
        if src is None or isinstance(src, str):
            return
        got = src()
        token = await got if inspect.isawaitable(got) else got
        if not isinstance(token, str) or not token:
            raise ValueError("the token function gave no token")
        self._token = token

    def _start_token_timer(self) -> None:
        if self._token_task is not None or not callable(self._token_source):
            return
        self._token_task = asyncio.ensure_future(self._token_loop())

    async def _token_loop(self) -> None:
        while not self._closed:
            exp = _claims(self._token or "").get("exp")
            if not isinstance(exp, (int, float)):
                await asyncio.sleep(60)
                continue
            # At least a second between refreshes, however close the expiry.
            await asyncio.sleep(max(1.0, exp - time.time() - self._margin))
            try:
                await self._refresh_token()
            except Exception as e:
                await self._emit(ErrorEvent("token", f"refreshing the token failed: {e!r}"))
                continue
            if self._conn is not None and self._token is not None:
                self._conn.refresh_token(self._token)

    # ------------------------------------------------------------------ helpers

    async def _emit(self, ev: Event) -> None:
        await self._events.put(ev)

    async def _emit_state(self, state: State, transport: TransportName | None) -> None:
        if state is self._state and transport == self._transport:
            return
        self._state = state
        if transport is not None or state is not State.CONNECTED:
            self._transport = transport if state is State.CONNECTED else self._transport
        await self._emit(StateChanged(state, transport))

    def _set_state_nowait(self, state: State, transport: TransportName | None) -> None:
        self._state = state
        with contextlib.suppress(asyncio.QueueFull):
            self._events.put_nowait(StateChanged(state, transport))

    def _http_client(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(trust_env=False, timeout=self._open_timeout)
        return self._http

    def _url(self, path: str) -> str:
        base = self._urls[self._retry.url]
        return base.rstrip("/") + path

    def _auth(self) -> dict[str, str]:
        h: dict[str, str] = {}
        if self._token:
            h["authorization"] = f"Bearer {self._token}"
        if self._api_key:
            h["x-api-key"] = self._api_key
        return h

    @staticmethod
    def _answer(res: httpx.Response) -> dict[str, Any]:
        try:
            o = res.json()
        except ValueError:
            o = {}
        if res.status_code != 200 or not isinstance(o, dict):
            code = str(o.get("code", "http_error")) if isinstance(o, dict) else "http_error"
            reason = str(o.get("reason", f"HTTP {res.status_code}")) if isinstance(o, dict) else res.text[:200]
            raise HeraldError(code, reason, res.status_code)
        return o


_ = RefusedError  # re-exported by the package
