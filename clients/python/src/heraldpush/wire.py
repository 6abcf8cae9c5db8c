"""Herald's wire protocol (docs/protocol.md), and nothing else.

Everything the client reads or writes on the wire lives here, apart from the connection
state machine (``client.py``) and the transports' I/O (``transports.py``):

- cursors ``<epoch>-<seq>`` and resume lists ``topic=cursor,...``;
- topic names and prefix patterns;
- the frames of every transport, parsed into the events below: WebSocket frames (JSON text or
  ``herald.msgpack`` binary, one frame or a batch of them), SSE blocks in the JSON form (``format=json``) and the gateway's
  ``herald.*`` blocks, long-poll answers;
- the loss signal (:class:`Lost`), the same object on every transport.

A frame that does not parse raises :class:`ProtocolError`; the client turns that into an
error event and a reconnect from its cursors, never a crash.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Union

import msgpack

__all__ = [
    "Cursor",
    "Message",
    "Lost",
    "Opened",
    "ServerSubscribed",
    "ServerUnsubscribed",
    "Published",
    "CommandError",
    "Ended",
    "Presence",
    "Ignored",
    "Batch",
    "WireEvent",
    "ProtocolError",
    "parse_cursor",
    "is_after",
    "parse_resume_list",
    "format_resume_list",
    "is_topic",
    "is_pattern",
    "pattern_error",
    "matches_pattern",
    "SseParser",
    "SseBlock",
    "decode_ws_frame",
    "load_ws_frame",
    "decode_object",
    "encode_ws_frame",
    "decode_sse_block",
    "decode_poll_answer",
    "PollAnswer",
    "MAX_PATTERN_TOPICS",
    "WS_SUBPROTOCOL_MSGPACK",
]

#: The subprotocol a MessagePack WebSocket offers.
WS_SUBPROTOCOL_MSGPACK = "herald.msgpack"
#: Topics a pattern's resume list names at most (docs/protocol.md, "Resume").
MAX_PATTERN_TOPICS = 32

_CURSOR = re.compile(r"^([0-9a-f]{1,16})-([0-9]{1,20})$")
_TOPIC = re.compile(r"^[A-Za-z0-9_.:@-]{1,128}$")


class ProtocolError(Exception):
    """The server sent something this client cannot read (a malformed frame or block)."""


# ---------------------------------------------------------------------------- cursors


@dataclass(frozen=True)
class Cursor:
    """A parsed ``<epoch>-<seq>``: the epoch in lower-case hex, the sequence number."""

    epoch: str
    seq: int


def parse_cursor(text: str) -> Cursor | None:
    """``<epoch>-<seq>`` parsed, or None when ``text`` is not a cursor."""
    key = _cursor_key(text)
    return None if key is None else Cursor(key[0], key[1])


#: The last text _cursor_key parsed, and its key: a stream's cursor is the id of its previous
#: message, so is_after parses each id once, not twice.
_last_key: tuple[str, tuple[str, int] | None] = ("", None)


def _cursor_key(text: str) -> tuple[str, int] | None:
    """:func:`parse_cursor` as a plain tuple (epoch, seq): the per-message path's form,
    without a dataclass built per call."""
    global _last_key
    last = _last_key
    if text == last[0]:
        return last[1]
    m = _CURSOR.match(text)
    key = None if m is None else (m.group(1).lstrip("0") or "0", int(m.group(2)))
    _last_key = (text, key)
    return key


def is_after(message_id: str, cursor: str | None) -> bool:
    """Whether a message at ``message_id`` is new to a subscriber at ``cursor``.

    Always when there is no cursor or the epochs differ (the gateway signals that loss),
    else only when its sequence number is higher. Ids that do not parse are delivered
    (never dropped silently).
    """
    if cursor is None:
        return True
    b = _cursor_key(cursor)  # first: most often the id parsed last
    a = _cursor_key(message_id)
    if a is None or b is None or a[0] != b[0]:
        return True
    return a[1] > b[1]


def parse_resume_list(text: str) -> dict[str, str]:
    """A resume list ``topic=cursor,...`` as a dict; malformed entries are skipped."""
    out: dict[str, str] = {}
    for entry in text.split(","):
        topic, eq, cursor = entry.partition("=")
        topic, cursor = topic.strip(), cursor.strip()
        if eq and is_topic(topic) and parse_cursor(cursor) is not None:
            out[topic] = cursor
    return out


def format_resume_list(cursors: Iterable[tuple[str, str | None]]) -> str:
    """The resume list of the topics that have a cursor."""
    return ",".join(f"{t}={c}" for t, c in cursors if c is not None)


# ---------------------------------------------------------------------------- topics


def is_topic(name: str) -> bool:
    """Whether ``name`` is a topic name (1-128 of ``A-Z a-z 0-9 _ . : @ -``)."""
    return _TOPIC.match(name) is not None


def is_pattern(name: str) -> bool:
    """Whether ``name`` is written as a prefix pattern (ends in ``*``)."""
    return name.endswith("*")


def pattern_error(name: str) -> str | None:
    """Why ``name`` is not a valid topic or prefix pattern, or None when it is."""
    if not is_pattern(name):
        return None if is_topic(name) else "not a topic name (1-128 of A-Z a-z 0-9 _ . : @ -)"
    prefix = name[:-1]
    if prefix == "":
        return "a bare * would match every topic: give a prefix"
    if not is_topic(prefix):
        return "* may only end a valid topic prefix"
    if prefix[-1] not in ".:":
        return "* must follow . or :"
    if prefix.startswith(("user:", "conn:")):
        return "personal topics cannot be matched by a pattern"
    return None


def _namespace(name: str) -> str:
    return name.split(":", 1)[0] if ":" in name else ""


def matches_pattern(pattern: str, topic: str) -> bool:
    """Whether prefix ``pattern`` (``orders.*``) matches ``topic``, within its namespace."""
    if not is_pattern(pattern) or is_pattern(topic):
        return False
    prefix = pattern[:-1]
    if not topic.startswith(prefix) or len(topic) == len(prefix):
        return False
    # A pattern never crosses into another namespace (`orders.*` does not match `orders.eu:x`).
    return _namespace(topic) == _namespace(prefix) if ":" in topic[len(prefix):] else True


# ---------------------------------------------------------------------------- events


@dataclass(frozen=True)
class Message:
    """A message: ``id`` is its position in its topic (``<epoch>-<seq>``)."""

    topic: str
    id: str
    data: Any
    event: str | None = None


@dataclass(frozen=True)
class DeltaMessage(Message):
    """A message that came as a delta (``"delta": true``): ``data`` is the delta (a ``str`` in
    JSON, ``bytes`` in MessagePack). The transport applies it and delivers a :class:`Message`;
    the application never sees one."""


@dataclass(frozen=True)
class DeltaResult:
    """A transport applied a delta of ``topic`` (``error`` None), or could not (``error``):
    then nothing of it was delivered, and the topic is subscribed again from its cursor."""

    topic: str
    error: str | None = None


@dataclass(frozen=True)
class Lost:
    """The loss signal: messages of ``topic`` (a topic or a pattern) could not be delivered.

    ``reason`` is the server's: ``expired``, ``epoch`` or ``lagged``. ``cursor``, when the
    server named it, is where delivery goes on from.
    """

    topic: str
    reason: str
    cursor: str | None = None


@dataclass(frozen=True)
class Opened:
    """A connection is subscribed: the starting position of each topic it names."""

    positions: Mapping[str, str]


@dataclass(frozen=True)
class ServerSubscribed:
    """The application subscribed the connection to topics (admin API)."""

    topics: tuple[str, ...]
    positions: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ServerUnsubscribed:
    topics: tuple[str, ...]


@dataclass(frozen=True)
class Published:
    """The answer to a WebSocket ``publish``."""

    topic: str
    id: str


@dataclass(frozen=True)
class CommandError:
    """A WebSocket ``error`` frame: the last command was refused, the connection stays."""

    code: str
    reason: str


@dataclass(frozen=True)
class Ended:
    """The server ends the connection (SSE ``herald.shutdown`` / ``herald.disconnect``, a poll
    answer's ``disconnect``). ``reconnect`` False: stay away (logged out, banned)."""

    reason: str
    reconnect: bool = True
    shutdown: bool = False
    token_expired: bool = False
    retry_ms: int | None = None


@dataclass(frozen=True)
class Presence:
    """A member joined or left one of the connection's topics (``kind``: ``join``/``leave``),
    in a namespace that announces them. ``member`` is the server's object (``conn``,
    ``node``, ``transport``, ``user``, ``info``)."""

    kind: str
    topic: str
    member: Mapping[str, Any]


@dataclass(frozen=True)
class Ignored:
    """A frame that needs no action (``pong``, ``authenticated``, join/leave, ...)."""

    kind: str


@dataclass(frozen=True)
class Batch:
    """A WebSocket batch frame came (``?batch=1``): ``size`` frames packed into one, each
    processed after this as if it had come alone. Counted (``Client.stats.batches``)."""

    size: int


WireEvent = Union[
    Message, Lost, Opened, ServerSubscribed, ServerUnsubscribed, Published, CommandError, Ended,
    Presence, Ignored, DeltaResult, Batch,
]


# ---------------------------------------------------------------------------- JSON objects


def _str(o: Mapping[str, Any], key: str) -> str:
    v = o.get(key)
    if not isinstance(v, str):
        raise ProtocolError(f"field {key!r} is not a string: {v!r:.80}")
    return v


def _strings(v: Any) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise ProtocolError(f"expected a list of strings, got {v!r:.80}")
    return tuple(v)


def _cursors(v: Any) -> dict[str, str]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ProtocolError(f"cursors is not an object: {v!r:.80}")
    out: dict[str, str] = {}
    for t, c in v.items():
        if not isinstance(t, str) or not isinstance(c, str) or parse_cursor(c) is None:
            raise ProtocolError(f"bad cursor {t!r}: {c!r:.80}")
        out[t] = c
    return out


def _message(o: Mapping[str, Any]) -> Message:
    event = o.get("event")
    if event is not None and not isinstance(event, str):
        raise ProtocolError("message event is not a string")
    mid = o.get("id")
    if not isinstance(mid, str):
        mid = _str(o, "id")  # raises
    if _CURSOR.match(mid) is None:
        raise ProtocolError(f"message id is not a cursor: {mid!r:.80}")
    if "data" not in o:
        raise ProtocolError("message without data")
    topic = o.get("topic")
    if not isinstance(topic, str):
        topic = _str(o, "topic")  # raises
    if o.get("delta") is True:
        return DeltaMessage(topic, mid, o["data"], event)
    return Message(topic, mid, o["data"], event)


def _object(o: Any) -> dict[str, Any]:
    if not isinstance(o, dict):
        raise ProtocolError(f"a frame is not an object: {o!r:.80}")
    return o


def decode_object(o: Any) -> WireEvent:
    """One WebSocket frame's object (JSON or MessagePack), as an event."""
    f = _object(o)
    kind = f.get("type")
    if kind == "message":
        return _message(f)
    if kind == "lost":
        return Lost(topic=_str(f, "topic"), reason=_str(f, "reason"))
    if kind == "subscribed":
        if f.get("by") == "server":
            return ServerSubscribed(_strings(f.get("topics")), _cursors(f.get("cursors")))
        _strings(f.get("topics"))
        return Opened(_cursors(f.get("cursors")))
    if kind == "unsubscribed":
        topics = _strings(f.get("topics"))
        return ServerUnsubscribed(topics) if f.get("by") == "server" else Ignored("unsubscribed")
    if kind == "published":
        return Published(topic=_str(f, "topic"), id=_str(f, "id"))
    if kind in ("join", "leave"):
        member = {k: v for k, v in f.items() if k != "type"}
        return Presence(str(kind), _str(f, "topic"), member)
    if kind == "error":
        code = f.get("code")
        return CommandError(code=str(code), reason=str(f.get("reason", "")))
    if isinstance(kind, str):
        return Ignored(kind)
    raise ProtocolError(f"a frame without a type: {f!r:.80}")


def _unpack(raw: bytes) -> Any:
    try:
        return msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except Exception as e:  # msgpack raises several unrelated types
        raise ProtocolError(f"not MessagePack: {e}") from e


def load_ws_frame(raw: str | bytes, fmt: Literal["json", "msgpack"]) -> Any:
    """A WebSocket frame's top-level value, parsed once: a text frame on a JSON connection, a
    binary one on a ``herald.msgpack`` connection; anything else is a :class:`ProtocolError`.
    A list is a batch frame (asked for with ``?batch=1``): its elements are frames, each for
    :func:`decode_object` in order; anything else is one frame."""
    if fmt == "json":
        if not isinstance(raw, str):
            raise ProtocolError("a binary frame on a JSON connection")
        try:
            return json.loads(raw)
        except json.JSONDecodeError as e:
            raise ProtocolError(f"not JSON: {e}") from e
    if not isinstance(raw, bytes):
        raise ProtocolError("a text frame on a herald.msgpack connection")
    return _unpack(raw)


def decode_ws_frame(raw: str | bytes, fmt: Literal["json", "msgpack"]) -> WireEvent:
    """A single (not batch) WebSocket frame as an event (:func:`load_ws_frame`,
    :func:`decode_object`); a batch is a :class:`ProtocolError` here."""
    return decode_object(load_ws_frame(raw, fmt))


def encode_ws_frame(frame: Mapping[str, Any], fmt: Literal["json", "msgpack"]) -> str | bytes:
    """A command frame for the wire."""
    if fmt == "json":
        return json.dumps(frame, separators=(",", ":"))
    packed: bytes = msgpack.packb(dict(frame), use_bin_type=True)
    return packed


def subscribe_frame(topics: list[str], cursors: Mapping[str, str], delta: bool = False) -> dict[str, Any]:
    frame: dict[str, Any] = {"type": "subscribe", "topics": topics, "cursors": dict(cursors)}
    if delta:
        frame["delta"] = "fossil"
    return frame


def publish_frame(topic: str, data: Any, event: str | None) -> dict[str, Any]:
    f: dict[str, Any] = {"type": "publish", "topic": topic, "data": data}
    if event is not None:
        f["event"] = event
    return f


def auth_frame(token: str) -> dict[str, Any]:
    return {"type": "auth", "token": token}


# ---------------------------------------------------------------------------- SSE


@dataclass
class SseBlock:
    """One dispatched event-stream block. ``event`` is ``message`` when it named none."""

    event: str
    data: str | None
    id: str | None
    retry: int | None


class SseParser:
    """An incremental text/event-stream parser (the WHATWG rules), fed with text chunks.

    ``max_line`` bounds a line and an event's data (characters): past it,
    :class:`ProtocolError`.
    """

    def __init__(self, max_line: int = 1 << 22) -> None:
        self._max = max_line
        self._buf = ""
        self._data: list[str] = []
        self._size = 0
        self._event = ""
        self._id: str | None = None
        self._retry: int | None = None
        self._saw_cr = False

    def feed(self, chunk: str) -> Iterator[SseBlock]:
        text = chunk
        if self._saw_cr and text.startswith("\n"):
            text = text[1:]
        self._saw_cr = False
        start = 0
        i = 0
        n = len(text)
        while i < n:
            c = text[i]
            if c == "\n" or c == "\r":
                block = self._line(self._buf + text[start:i])
                self._buf = ""
                if block is not None:
                    yield block
                if c == "\r":
                    if i + 1 < n:
                        if text[i + 1] == "\n":
                            i += 1
                    else:
                        self._saw_cr = True
                start = i + 1
            i += 1
        self._buf += text[start:]
        if len(self._buf) > self._max:
            raise ProtocolError(f"an event-stream line is longer than {self._max} characters")

    def _line(self, line: str) -> SseBlock | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._size += len(value) + 1
            if self._size > self._max:
                raise ProtocolError(f"an event is longer than {self._max} characters")
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._id = value
        elif name == "retry":
            if value.isdigit():
                self._retry = int(value)
        return None

    def _dispatch(self) -> SseBlock | None:
        data = "\n".join(self._data) if self._data else None
        block = SseBlock(self._event or "message", data, self._id, self._retry)
        self._data, self._size, self._event, self._id, self._retry = [], 0, "", None, None
        if data is None and block.id is None and block.retry is None:
            return None
        return block


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ProtocolError(f"not JSON: {e}: {text!r:.80}") from e


def decode_sse_block(block: SseBlock) -> list[WireEvent]:
    """One SSE block of a ``format=json`` stream, as events. A block carrying an ``id:``
    names every topic's position; it comes out as an :class:`Opened` (positions) after the
    block's own event."""
    out: list[WireEvent] = []
    positions = parse_resume_list(block.id) if block.id else {}
    if block.data is None:
        # The opening block (or a bare id): the starting positions. A `retry:` alone is a hint.
        if block.id is not None:
            out.append(Opened(positions))
        return out
    ev = block.event
    if ev == "message":
        m = _message(_object(_json(block.data)))
        out.append(m)
    elif ev == "herald.lost":
        o = _object(_json(block.data))
        topic = _str(o, "topic")
        out.append(Lost(topic=topic, reason=_str(o, "reason"), cursor=positions.get(topic)))
    elif ev == "herald.subscribed":
        o = _object(_json(block.data))
        out.append(ServerSubscribed(_strings(o.get("topics")), positions))
    elif ev == "herald.unsubscribed":
        o = _object(_json(block.data))
        out.append(ServerUnsubscribed(_strings(o.get("topics"))))
    elif ev in ("herald.join", "herald.leave"):
        o = _object(_json(block.data))
        out.append(Presence(ev[len("herald."):], _str(o, "topic"), o))
        return out
    elif ev == "herald.shutdown":
        o = _object(_json(block.data))
        retry = o.get("retry_ms")
        out.append(Ended("the node is draining", shutdown=True,
                         retry_ms=retry if isinstance(retry, int) else block.retry))
        return out
    elif ev == "herald.disconnect":
        o = _object(_json(block.data))
        reason = str(o.get("reason", "disconnected"))
        out.append(Ended(reason, reconnect=o.get("reconnect") is not False,
                         token_expired=reason == "token expired"))
        return out
    else:
        out.append(Ignored(ev))
    if block.id is not None and ev not in ("message",):
        out.append(Opened(positions))
    return out


# ---------------------------------------------------------------------------- long-poll


@dataclass(frozen=True)
class PollAnswer:
    messages: tuple[Message, ...]
    lost: tuple[Lost, ...]
    cursor: dict[str, str]
    more: bool
    ended: Ended | None


def decode_poll_answer(body: bytes) -> PollAnswer:
    """A ``GET /v1/poll`` answer."""
    try:
        o = _object(json.loads(body))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ProtocolError(f"a poll answer is not JSON: {e}") from e
    raw = o.get("messages") or []
    if not isinstance(raw, list):
        raise ProtocolError("messages is not a list")
    messages = tuple(_message(_object(m)) for m in raw)
    cursor_text = o.get("cursor")
    cursor = parse_resume_list(cursor_text) if isinstance(cursor_text, str) else {}
    lost_raw = o.get("lost") or []
    if not isinstance(lost_raw, list):
        raise ProtocolError("lost is not a list")
    with_messages = {m.topic for m in messages}
    lost = []
    for entry in lost_raw:
        lo = _object(entry)
        topic = _str(lo, "topic")
        # Delivery goes on from the batch's first message, or from the answer's cursor.
        lost.append(Lost(topic, _str(lo, "reason"), None if topic in with_messages else cursor.get(topic)))
    ended = None
    d = o.get("disconnect")
    if isinstance(d, dict):
        reason = d.get("reason")
        ended = Ended(reason if isinstance(reason, str) else "disconnected",
                      reconnect=d.get("reconnect") is not False)
    return PollAnswer(messages, tuple(lost), cursor, o.get("more") is True, ended)
