"""The three transports' I/O: one connection of one transport to one URL.

A connection reports what the wire says (``wire.py`` events) to the client through an async
``sink`` and returns, when it ends, how it ended (:class:`Closed`). It never raises for what
the server or the network does: a refusal, a dead peer, a malformed frame all end it with a
:class:`Closed` saying so. The client (``client.py``) decides what happens next.
"""

from __future__ import annotations

import asyncio
import codecs
import collections
import contextlib
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Union
from urllib.parse import quote, urlsplit, urlunsplit

import httpx
import websockets
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from . import wire
from .delta import Bases, DeltaError, json_array_texts, msgpack_array_items, poll_message_texts
from .errors import HeraldError, RefusedError

__all__ = ["Closed", "ConnContext", "Connection", "open_connection", "TransportName", "MAX_PENDING"]

TransportName = Literal["ws", "sse", "poll"]

#: WebSocket commands awaiting a reply at most; past it a publish is refused at once.
MAX_PENDING = 1024
#: WebSocket frames read ahead of the client at most (websockets' ``max_queue``).
WS_READ_AHEAD = 64
#: Largest WebSocket frame accepted (the gateway's own limit is 64 KiB of payload).
WS_MAX_FRAME = 4 << 20
#: The gateway's SSE heartbeat when a client asks for none (`sse.heartbeat`), in seconds.
SSE_DEFAULT_HEARTBEAT = 15
#: Largest poll answer or SSE event accepted, in characters.
MAX_EVENT = 4 << 20

_FATAL_CODES = {"forbidden", "bad_topic", "too_many_topics", "bad_cursor", "invalid_token",
                "pattern_not_allowed", "bad_delta", "delta_not_allowed"}


@dataclass
class Closed:
    """How a connection ended."""

    reason: str
    #: The node is draining (close 1012, ``herald.shutdown``): not the transport's fault.
    shutdown: bool = False
    #: Reconnect after this many seconds (``retry:``, ``retry_ms``, ``retry-after``).
    retry_after: float | None = None
    token_expired: bool = False
    #: A refusal not to retry (unless it is ``invalid_token`` and the token can be refreshed).
    fatal: HeraldError | None = None
    #: The server sent something unreadable.
    protocol_error: bool = False
    #: Not an end: SSE starts a new stream from the cursors (a delta that did not apply).
    restart: bool = False


@dataclass
class ConnContext:
    """What the client gives a connection; the callables are read at each (re)subscription."""

    url: str
    fmt: Literal["json", "msgpack"]
    #: Topics and patterns subscribed, with each topic's cursor (patterns: None).
    topics: Callable[[], dict[str, str | None]]
    #: Cursors of the topics the patterns delivered (resumed under them).
    pattern_cursors: Callable[[], dict[str, str]]
    token: Callable[[], str | None]
    http: httpx.AsyncClient
    open_timeout: float
    dead_timeout: float
    poll_timeout: float
    #: Whether the subscription of a topic (or pattern) asked for deltas.
    delta: Callable[[str], bool] = lambda _t: False
    #: WebSocket: ask for batch frames (``?batch=1``).
    batch: bool = True
    #: WebSocket: offer permessage-deflate (the gateway does not batch on such a connection).
    deflate: bool = False


Sink = Callable[["Connection", wire.WireEvent], Awaitable[None]]


def _http_refusal(status: int, body: bytes, headers: Mapping[str, str], what: str) -> Closed:
    code, reason = "http_error", f"HTTP {status}"
    try:
        o = json.loads(body)
        if isinstance(o, dict):
            code = str(o.get("code", code))
            reason = str(o.get("reason", reason))
    except ValueError:
        pass
    retry_after = None
    ra = headers.get("retry-after")
    if ra is not None and ra.strip().isdigit():
        retry_after = float(ra)
    err = HeraldError(code, reason, status)
    if status == 401 or (400 <= status < 500 and status not in (408, 429)):
        return Closed(f"{what}: {err}", fatal=RefusedError(code, reason, status), retry_after=retry_after)
    return Closed(f"{what}: {err}", retry_after=retry_after)


def _with_path(base: str, path: str, scheme: str | None = None) -> str:
    u = urlsplit(base)
    return urlunsplit((scheme or u.scheme, u.netloc, u.path.rstrip("/") + path, "", ""))


class Connection:
    """One connection; :meth:`run` until it ends."""

    transport: TransportName

    def __init__(self, ctx: ConnContext, sink: Sink) -> None:
        self.ctx = ctx
        self._sink = sink
        self.opened = asyncio.Event()

    async def run(self) -> Closed:
        raise NotImplementedError

    def update(self) -> None:
        """The topics changed: subscribe anew (WebSocket) or restart from the cursors."""

    def refresh_token(self, token: str) -> None:
        """A fresh token for this connection."""

    async def publish(self, topic: str, data: Any, event: str | None) -> wire.Published | None:
        """Publishes over this connection; None when the transport cannot."""
        return None

    async def _emit(self, ev: wire.WireEvent) -> None:
        await self._sink(self, ev)

    async def _opening(self, work: Awaitable[Closed], what: str) -> Closed:
        """Runs ``work``; fails it when it has not opened within ``open_timeout``."""
        task = asyncio.ensure_future(work)
        waiter = asyncio.ensure_future(self.opened.wait())
        try:
            done, _ = await asyncio.wait({task, waiter}, timeout=self.ctx.open_timeout,
                                         return_when=asyncio.FIRST_COMPLETED)
            if not done:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
                return Closed(f"{what}: not open after {self.ctx.open_timeout:g} s")
            return await task
        finally:
            waiter.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task


# ---------------------------------------------------------------------------- WebSocket


class WsConnection(Connection):
    transport: TransportName = "ws"

    def __init__(self, ctx: ConnContext, sink: Sink) -> None:
        super().__init__(ctx, sink)
        self._ws: ClientConnection | None = None
        self._requested: set[str] = set()
        self._pending: collections.deque[tuple[str, asyncio.Future[Any] | None]] = collections.deque()
        self._failure: Closed | None = None
        #: The base of each topic that asked for deltas: its last message's data here.
        self._bases = Bases(ctx.delta)
        #: Topics whose delta did not apply, unsubscribed and subscribed again from their
        #: cursors: what comes for them before the ``unsubscribed`` reply is dropped.
        self._resyncing: set[str] = set()

    def _url(self) -> str:
        base = _with_path(self.ctx.url, "/v1/ws", "wss" if self.ctx.url.startswith("https") else "ws")
        query = ["batch=1"] if self.ctx.batch else []
        token = self.ctx.token()
        if token:
            query.append(f"token={quote(token, safe='')}")
        return base + ("?" + "&".join(query) if query else "")

    async def run(self) -> Closed:
        return await self._opening(self._run(), "ws")

    async def _run(self) -> Closed:
        ping = max(self.ctx.dead_timeout / 2, 0.5)
        try:
            ws = await connect(
                self._url(),
                subprotocols=[websockets.Subprotocol(wire.WS_SUBPROTOCOL_MSGPACK)] if self.ctx.fmt == "msgpack" else None,
                open_timeout=self.ctx.open_timeout, ping_interval=ping, ping_timeout=ping,
                close_timeout=1, max_size=WS_MAX_FRAME, max_queue=WS_READ_AHEAD, proxy=None,
                # permessage-deflate is offered only when asked for: inflating cost this client
                # ~11 % and the node ~35 % CPU per message at 10k msg/s, and the gateway does
                # not batch on a deflate connection.
                compression="deflate" if self.ctx.deflate else None,
            )
        except InvalidStatus as e:
            r = e.response
            return _http_refusal(r.status_code, bytes(r.body or b""), {k.lower(): v for k, v in r.headers.raw_items()}, "ws")
        except (OSError, InvalidHandshake, TimeoutError, asyncio.TimeoutError) as e:
            return Closed(f"ws: cannot connect: {e!r}")
        self._ws = ws
        try:
            if self.ctx.fmt == "msgpack" and ws.subprotocol != wire.WS_SUBPROTOCOL_MSGPACK:
                return Closed("ws: the server did not accept herald.msgpack", protocol_error=True)
            if not self.ctx.topics():
                # Nothing to subscribe yet (the application may subscribe it): open as it is.
                await self._emit(wire.Opened({}))
                self.opened.set()
            else:
                await self._subscribe()
            async for raw in ws:
                try:
                    value = wire.load_ws_frame(raw, self.ctx.fmt)
                    if type(value) is list:
                        done = await self._batch(value, raw)
                    else:
                        ev = wire.decode_object(value)
                        if isinstance(ev, wire.Message):
                            done = await self._message(ev, raw)
                        else:
                            done = await self._frame(ev)
                except wire.ProtocolError as e:
                    return Closed(f"ws: malformed frame: {e}", protocol_error=True)
                if done is not None:
                    return done
            return self._closed_info(ws)
        except ConnectionClosed:
            return self._closed_info(ws)
        except OSError as e:
            return Closed(f"ws: {e!r}")
        finally:
            self._fail_pending("the connection ended")
            self._ws = None
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ws.close(), 1)

    def _closed_info(self, ws: ClientConnection) -> Closed:
        code, reason = ws.close_code, ws.close_reason or ""
        if code is None or code == 1006 or "keepalive" in reason:
            return Closed(f"ws: the connection dropped ({code} {reason}: no close frame, or no pong in time)")
        info = Closed(f"ws: closed {code} {reason}".rstrip())
        if code == 1012:
            info.shutdown = True
        elif code == 1008 and reason == "token expired":
            info.token_expired = True
        elif code == 4001:
            info.fatal = RefusedError("disconnected", reason or "disconnected")
        return info

    async def _batch(self, frames: list[Any], raw: str | bytes) -> Closed | None:
        """A batch frame: each element processed in order exactly as if it had come alone
        (cursors, deltas against the element before, loss signals). An element that is not a
        frame is a malformed frame (ProtocolError): those before it stay processed."""
        await self._emit(wire.Batch(len(frames)))
        # The raw text (bytes) of the elements, split only when a full message's data must be
        # kept as a delta base, and then once per batch.
        items: list[str] | list[bytes] | None = None

        def element(k: int) -> Any:
            nonlocal items
            if items is None:
                items = json_array_texts(raw) if isinstance(raw, str) else msgpack_array_items(raw)
            if k >= len(items):
                raise DeltaError("a batch frame's element not found in its text")
            return items[k]

        for k, value in enumerate(frames):
            ev = wire.decode_object(value)
            if isinstance(ev, wire.Message):
                done = await self._message(ev, raw, lambda k=k: element(k))  # type: ignore[misc]
            else:
                done = await self._frame(ev)
            if done is not None:
                return done
        return None

    async def _message(self, m: wire.Message, raw: str | bytes,
                       element: Callable[[], Any] | None = None) -> Closed | None:
        """A message: a delta applied (docs/protocol.md "Delta compression"), the base kept.
        ``raw`` is the frame it came in; ``element``, for an element of a batch frame, gives
        that element's own raw text (bytes), of which the data is the base."""
        if m.topic in self._resyncing:
            return None
        try:
            if isinstance(m, wire.DeltaMessage):
                if isinstance(raw, str):
                    data = self._bases.delta_json(m.topic, m.data)
                else:
                    data = self._bases.delta_msgpack(m.topic, m.data)
                m = wire.Message(m.topic, m.id, data, m.event)
                await self._emit(wire.DeltaResult(m.topic))
            elif isinstance(raw, str):
                self._bases.full_json(m.topic, element or (lambda: raw))
            else:
                self._bases.full_msgpack(m.topic, element or raw)
        except DeltaError as e:
            return await self._resubscribe(m.topic, e)
        await self._emit(m)
        return None

    async def _resubscribe(self, topic: str, error: DeltaError) -> Closed | None:
        """A delta of ``topic`` did not apply: nothing of it is delivered; the topic is
        unsubscribed and subscribed again from its cursor (the last message delivered), so the
        message comes again in full."""
        await self._emit(wire.DeltaResult(topic, str(error)))
        self._bases.drop(topic)
        cursor = self.ctx.topics().get(topic)
        if topic not in self._requested or cursor is None or len(self._pending) + 2 > MAX_PENDING:
            # Not a topic asked for by name here, or no cursor: reconnect from the cursors.
            return Closed(f"ws: a delta of {topic} did not apply: {error}", protocol_error=True)
        self._resyncing.add(topic)
        await self._send({"type": "unsubscribe", "topics": [topic]}, "resync:" + topic)
        await self._send(wire.subscribe_frame([topic], {topic: cursor}, delta=True), "subscribe")
        return None

    async def _frame(self, ev: wire.WireEvent) -> Closed | None:
        if isinstance(ev, wire.Opened):
            self._pop()
            await self._emit(ev)
            self.opened.set()
        elif isinstance(ev, wire.Published):
            fut = self._pop()
            if fut is not None and not fut.done():
                fut.set_result(ev)
        elif isinstance(ev, wire.CommandError):
            kind, fut = self._pending.popleft() if self._pending else ("", None)
            if kind == "publish" and fut is not None and not fut.done():
                fut.set_exception(HeraldError(ev.code, ev.reason))
            elif kind in ("subscribe", "auth"):
                if ev.code in _FATAL_CODES or kind == "auth":
                    return Closed(f"ws: {ev.code}: {ev.reason}", fatal=RefusedError(ev.code, ev.reason))
                return Closed(f"ws: {ev.code}: {ev.reason}", retry_after=1.0)
        elif isinstance(ev, wire.Ignored):
            if ev.kind in ("unsubscribed", "authenticated", "pong", "heartbeat") and self._pending:
                kind, _ = self._pending.popleft()
                if kind.startswith("resync:"):
                    self._resyncing.discard(kind[len("resync:"):])
        elif isinstance(ev, wire.Lost):
            self._bases.drop(ev.topic)
            await self._emit(ev)
        elif isinstance(ev, wire.ServerUnsubscribed):
            for t in ev.topics:
                self._requested.discard(t)
                self._bases.drop(t)
            await self._emit(ev)
            self.update()
        else:
            await self._emit(ev)
        return None

    def _pop(self) -> asyncio.Future[Any] | None:
        return self._pending.popleft()[1] if self._pending else None

    def _fail_pending(self, reason: str) -> None:
        while self._pending:
            _, fut = self._pending.popleft()
            if fut is not None and not fut.done():
                fut.set_exception(ConnectionError(reason))

    async def _send(self, frame: dict[str, Any], kind: str, fut: asyncio.Future[Any] | None = None) -> None:
        ws = self._ws
        if ws is None:
            raise ConnectionError("the WebSocket is not open")
        self._pending.append((kind, fut))
        await ws.send(wire.encode_ws_frame(frame, self.ctx.fmt))

    async def _subscribe(self) -> None:
        wanted = self.ctx.topics()
        new = [t for t in wanted if t not in self._requested]
        gone = [t for t in self._requested if t not in wanted]
        # One frame for the topics that ask for deltas, one for the others.
        for delta in (False, True):
            group = [t for t in new if self.ctx.delta(t) == delta]
            if not group:
                continue
            cursors = {t: c for t in group if (c := wanted[t]) is not None}
            # Topics the patterns delivered resume under them (a cursor no topic or pattern of
            # the frame names is refused as bad_cursor).
            patterns = [p for p in group if wire.is_pattern(p)]
            for t, c in self.ctx.pattern_cursors().items():
                if any(wire.matches_pattern(p, t) for p in patterns):
                    cursors[t] = c
            self._requested.update(group)
            for t in group:
                self._bases.drop(t)
            await self._send(wire.subscribe_frame(group, cursors, delta), "subscribe")
        if gone:
            self._requested.difference_update(gone)
            for t in gone:
                self._bases.drop(t)
            await self._send({"type": "unsubscribe", "topics": gone}, "unsubscribe")

    def update(self) -> None:
        if self._ws is not None:
            asyncio.ensure_future(self._safe(self._subscribe()))

    def refresh_token(self, token: str) -> None:
        if self._ws is not None:
            asyncio.ensure_future(self._safe(self._send(wire.auth_frame(token), "auth")))

    @staticmethod
    async def _safe(work: Awaitable[None]) -> None:
        with contextlib.suppress(ConnectionError, ConnectionClosed, OSError):
            await work

    async def publish(self, topic: str, data: Any, event: str | None) -> wire.Published | None:
        if self._ws is None or not self.opened.is_set():
            return None
        if len(self._pending) >= MAX_PENDING:
            raise HeraldError("too_many_pending", f"more than {MAX_PENDING} commands await a reply")
        fut: asyncio.Future[wire.Published] = asyncio.get_running_loop().create_future()
        try:
            await self._send(wire.publish_frame(topic, data, event), "publish", fut)
        except ConnectionClosed:
            return None
        return await asyncio.wait_for(fut, self.ctx.open_timeout)


# ---------------------------------------------------------------------------- HTTP


def _headers(ctx: ConnContext, extra: dict[str, str]) -> dict[str, str]:
    h = dict(extra)
    token = ctx.token()
    if token:
        h["authorization"] = f"Bearer {token}"
    return h


Params = list[tuple[str, Union[str, int, float, bool, None]]]


def _topic_params(ctx: ConnContext, topics: Mapping[str, str | None]) -> Params:
    params: Params = [("topic", t) for t in topics]
    # Deltas are asked for per request: only while every topic and pattern asks for them (a
    # topic that did not ask may be in a namespace that refuses them).
    if topics and all(ctx.delta(t) for t in topics):
        params.append(("delta", "fossil"))
    return params


class _Restartable(Connection):
    """SSE and long-poll: a request (or a series) restarted from the cursors when the topics
    or the token change; the connection itself goes on."""

    def __init__(self, ctx: ConnContext, sink: Sink) -> None:
        super().__init__(ctx, sink)
        self._task: asyncio.Task[Closed] | None = None
        self._restart = False

    async def _once(self) -> Closed:
        raise NotImplementedError

    async def run(self) -> Closed:
        first = True
        while True:
            self._restart = False
            work = self._once()
            if first:
                self._task = asyncio.ensure_future(self._opening(work, self.transport))
                first = False
            else:
                self._task = asyncio.ensure_future(work)
            try:
                await asyncio.wait({self._task})
            except asyncio.CancelledError:
                self._task.cancel()
                raise
            if self._task.cancelled():
                if self._restart:
                    continue
                return Closed(f"{self.transport}: cancelled")
            info = self._task.result()
            if info.restart:
                continue
            return info

    def update(self) -> None:
        self._restart_now()

    def refresh_token(self, token: str) -> None:
        self._restart_now()

    def _restart_now(self) -> None:
        if self._task is not None and not self._task.done():
            self._restart = True
            self._task.cancel()


class SseConnection(_Restartable):
    transport: TransportName = "sse"

    def __init__(self, ctx: ConnContext, sink: Sink) -> None:
        super().__init__(ctx, sink)
        self._asked: set[str] = set()
        self._heartbeat_ok = True

    def update(self) -> None:
        # A new stream is a new connection on the gateway: only for another set of topics.
        if set(self.ctx.topics()) != self._asked:
            self._restart_now()

    async def _once(self) -> Closed:
        info = await self._stream(ask_heartbeat=self._heartbeat_ok)
        if info.fatal is not None and info.fatal.code == "bad_heartbeat":
            # The gateway's bounds do not allow the interval asked for: take its default, and
            # wait long enough for it.
            self._heartbeat_ok = False
            info = await self._stream(ask_heartbeat=False)
        return info

    async def _stream(self, ask_heartbeat: bool) -> Closed:
        topics = self.ctx.topics()
        self._asked = set(topics)
        heartbeat = max(1, int(self.ctx.dead_timeout / 2))
        params = _topic_params(self.ctx, topics) + [("format", "json")]
        if ask_heartbeat:
            params.append(("heartbeat", str(heartbeat)))
        resume = wire.format_resume_list([*topics.items(), *self.ctx.pattern_cursors().items()])
        headers = _headers(self.ctx, {"accept": "text/event-stream", "cache-control": "no-cache"})
        if resume:
            headers["last-event-id"] = resume
        dead = self.ctx.dead_timeout if ask_heartbeat else max(self.ctx.dead_timeout, 2 * SSE_DEFAULT_HEARTBEAT + 5)
        timeout = httpx.Timeout(dead, connect=self.ctx.open_timeout)
        ending: wire.Ended | None = None
        retry_ms: int | None = None
        try:
            async with self.ctx.http.stream("GET", _with_path(self.ctx.url, "/v1/sse"), params=params,
                                            headers=headers, timeout=timeout) as res:
                if res.status_code != 200:
                    body = await res.aread()
                    return _http_refusal(res.status_code, body, res.headers, "sse")
                parser = wire.SseParser(MAX_EVENT)
                decoder = codecs.getincrementaldecoder("utf-8")("replace")
                # The delta bases of this stream (a new stream starts every topic full).
                bases = Bases(self.ctx.delta)
                async for chunk in res.aiter_raw():
                    for block in parser.feed(decoder.decode(chunk)):
                        if block.retry is not None and self.opened.is_set():
                            retry_ms = block.retry
                        for ev in wire.decode_sse_block(block):
                            if isinstance(ev, wire.Ended):
                                ending = ev
                                continue
                            if isinstance(ev, wire.Message):
                                text = block.data or ""
                                try:
                                    if isinstance(ev, wire.DeltaMessage):
                                        ev = wire.Message(ev.topic, ev.id, bases.delta_json(ev.topic, ev.data), ev.event)
                                        await self._emit(wire.DeltaResult(ev.topic))
                                    else:
                                        bases.full_json(ev.topic, lambda: text)
                                except DeltaError as e:
                                    # Nothing of it is delivered: a new stream resumes every
                                    # topic from its cursor, so the message comes again in full.
                                    await self._emit(wire.DeltaResult(ev.topic, str(e)))
                                    return Closed(f"sse: a delta of {ev.topic} did not apply: {e}", restart=True)
                            elif isinstance(ev, wire.Lost):
                                bases.drop(ev.topic)
                            await self._emit(ev)
                            if isinstance(ev, wire.Opened):
                                self.opened.set()
                    if ending is not None:
                        break
        except wire.ProtocolError as e:
            return Closed(f"sse: malformed event: {e}", protocol_error=True)
        except httpx.ReadTimeout:
            return Closed(f"sse: nothing received for {dead:g} s (no heartbeat)")
        except httpx.HTTPError as e:
            return Closed(f"sse: {e!r}")
        return _ended(ending, "sse", retry_ms)


def _ended(ending: wire.Ended | None, what: str, retry_ms: int | None = None) -> Closed:
    if ending is None:
        return Closed(f"{what}: the stream ended",
                      retry_after=retry_ms / 1000 if retry_ms is not None else None)
    info = Closed(f"{what}: {ending.reason}", shutdown=ending.shutdown, token_expired=ending.token_expired)
    ms = ending.retry_ms if ending.retry_ms is not None else retry_ms
    if ms is not None:
        info.retry_after = ms / 1000
    if not ending.reconnect:
        info.fatal = RefusedError("disconnected", ending.reason)
    return info


class PollConnection(_Restartable):
    transport: TransportName = "poll"

    async def _once(self) -> Closed:
        first = True
        while True:
            topics = self.ctx.topics()
            cursors = dict(topics)
            for t, c in self.ctx.pattern_cursors().items():
                cursors.setdefault(t, c)
            hold = 0 if first else max(0, int(self.ctx.poll_timeout))
            params = _topic_params(self.ctx, topics) + [("timeout", str(hold))]
            resume = wire.format_resume_list(cursors.items())
            if resume:
                params.append(("cursor", resume))
            timeout = httpx.Timeout(hold + self.ctx.dead_timeout, connect=self.ctx.open_timeout)
            try:
                res = await self.ctx.http.get(_with_path(self.ctx.url, "/v1/poll"), params=params,
                                              headers=_headers(self.ctx, {"accept": "application/json"}),
                                              timeout=timeout)
            except httpx.TimeoutException:
                return Closed(f"poll: no answer within {hold + self.ctx.dead_timeout:g} s")
            except httpx.HTTPError as e:
                return Closed(f"poll: {e!r}")
            if res.status_code != 200:
                return _http_refusal(res.status_code, res.content, res.headers, "poll")
            if len(res.content) > MAX_EVENT * 2:
                return Closed("poll: an answer larger than the client's bound", protocol_error=True)
            try:
                answer = wire.decode_poll_answer(res.content)
            except wire.ProtocolError as e:
                return Closed(f"poll: malformed answer: {e}", protocol_error=True)
            for lost in answer.lost:
                await self._emit(lost)
            # Deltas apply within an answer (every poll is a resume: the first message of each
            # topic is full). A topic whose delta does not apply gets nothing more from this
            # answer, and its cursor stays at the last message delivered: the next poll resumes
            # it from there.
            bases = Bases(self.ctx.delta)
            failed: set[str] = set()
            texts: list[str] | None = None

            def text_of(k: int) -> str:
                nonlocal texts
                if texts is None:
                    texts = poll_message_texts(res.content.decode("utf-8", "replace"))
                return texts[k] if k < len(texts) else ""

            for k, m in enumerate(answer.messages):
                if m.topic in failed:
                    continue
                try:
                    if isinstance(m, wire.DeltaMessage):
                        m = wire.Message(m.topic, m.id, bases.delta_json(m.topic, m.data), m.event)
                        await self._emit(wire.DeltaResult(m.topic))
                    else:
                        bases.full_json(m.topic, lambda k=k: text_of(k))  # type: ignore[misc]
                except DeltaError as e:
                    failed.add(m.topic)
                    await self._emit(wire.DeltaResult(m.topic, str(e)))
                    continue
                await self._emit(m)
            positions = {t: c for t, c in answer.cursor.items() if t not in failed}
            await self._emit(wire.Opened(positions))
            self.opened.set()
            first = False
            if answer.ended is not None:
                return _ended(answer.ended, "poll")


def open_connection(transport: TransportName, ctx: ConnContext, sink: Sink) -> Connection:
    if transport == "ws":
        return WsConnection(ctx, sink)
    if transport == "sse":
        return SseConnection(ctx, sink)
    return PollConnection(ctx, sink)
