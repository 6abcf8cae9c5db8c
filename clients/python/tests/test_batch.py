"""WebSocket batch frames (``?batch=1``): several frames packed into one WebSocket frame, a JSON
array in a text frame or a MessagePack array in a binary one. The client against a scripted
gateway: each element processed exactly as if it had come alone, in order (cursors, loss
signals, deltas against the element before), batch frames counted, a malformed element a
malformed frame (an error event, a reconnect from the cursors); and what the client asks for in
its handshake (``batch=1`` unless turned off; no permessage-deflate unless turned on)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import msgpack
import pytest
from test_delta import corrupt, make_delta
from websockets.asyncio.server import ServerConnection, serve

from heraldpush import Backoff, Client, ErrorEvent, Lost, Message, wire
from heraldpush.delta import DeltaError, json_array_texts, msgpack_array_items

Send = Callable[[Any], Awaitable[None]]
#: What the gateway sends after its `subscribed` answer: (connection number, the subscribe
#: frame's cursors, send) -> None. ``send`` takes a frame (a dict) or a batch (a list).
Script = Callable[[int, dict[str, str], Send], Awaitable[None]]


def msg(n: int, data: Any = None, topic: str = "a") -> dict[str, Any]:
    return {"type": "message", "topic": topic, "id": f"e-{n}", "data": {"n": n} if data is None else data}


class Gateway:
    """A scripted gateway on a free port: records each handshake's path and headers and each
    command frame, answers ``unsubscribe``, and ``subscribe`` with ``subscribed`` (the cursors
    asked for, else ``e-0``), then plays the script."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.paths: list[str] = []
        self.extensions: list[str | None] = []
        self.frames: list[dict[str, Any]] = []
        self.url = ""

    async def handler(self, ws: ServerConnection) -> None:
        assert ws.request is not None
        self.paths.append(ws.request.path)
        self.extensions.append(ws.request.headers.get("sec-websocket-extensions"))
        conn = len(self.paths)
        mp = ws.subprotocol == "herald.msgpack"

        async def send(o: Any) -> None:
            await ws.send(msgpack.packb(o, use_bin_type=True) if mp else json.dumps(o, separators=(",", ":")))

        async for raw in ws:
            f = msgpack.unpackb(raw) if isinstance(raw, bytes) else json.loads(raw)
            self.frames.append(f)
            if f["type"] == "unsubscribe":
                await send({"type": "unsubscribed", "topics": f["topics"]})
            if f["type"] == "subscribe":
                cursors = dict(f.get("cursors") or {})
                await send({"type": "subscribed", "topics": f["topics"],
                            "cursors": {t: cursors.get(t, "e-0") for t in f["topics"]}})
                await self.script(conn, cursors, send)

    async def run(self, fmt: str, body: Callable[[Gateway], Awaitable[None]]) -> None:
        async with serve(self.handler, "127.0.0.1", 0,
                         subprotocols=["herald.msgpack"] if fmt == "msgpack" else None) as server:  # type: ignore[list-item]
            self.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
            await asyncio.wait_for(body(self), 10)


def client(url: str, fmt: str = "json", **kw: Any) -> Client:
    return Client(url, topics=kw.pop("topics", ["a"]), transports=["ws"], fmt=fmt,  # type: ignore[arg-type]
                  backoff=Backoff(0.01, 0.05), **kw)


async def read(c: Client, messages: int, errors: int = 0) -> list[Any]:
    """Events (messages, losses, errors) until ``messages`` messages and ``errors`` errors."""
    out: list[Any] = []
    async for ev in c:
        if isinstance(ev, (Message, Lost, ErrorEvent)):
            out.append(ev)
        if (sum(isinstance(e, Message) for e in out) >= messages
                and sum(isinstance(e, ErrorEvent) for e in out) >= errors):
            return out
    raise AssertionError(f"the client closed after {out}")


# ---------------------------------------------------------------------------- the element texts


def test_the_raw_text_of_each_element() -> None:
    frames = [msg(1, {"s": 'x,]}"[{\\', "l": [1, {"b": []}]}), msg(2, 2.5), msg(3, None), {"type": "pong"}]
    text = json.dumps(frames, separators=(",", ":"))
    assert json_array_texts(text) == [json.dumps(f, separators=(",", ":")) for f in frames]
    assert json_array_texts(" [ 1 , \"a\\\"]\" ,{} ] ") == ["1", '"a\\"]"', "{}"]
    assert json_array_texts("[]") == []
    with pytest.raises(DeltaError):
        json_array_texts('{"type":"pong"}')
    with pytest.raises(DeltaError):
        json_array_texts('[{"a":1}')
    big = [msg(n, {"n": n, "s": "é" * n}) for n in range(20)]  # array 16 and past
    packed = msgpack.packb(big, use_bin_type=True)
    assert msgpack_array_items(packed) == [msgpack.packb(f, use_bin_type=True) for f in big]
    assert msgpack_array_items(msgpack.packb([])) == []
    with pytest.raises(DeltaError):
        msgpack_array_items(msgpack.packb({"type": "pong"}))
    with pytest.raises(DeltaError):
        msgpack_array_items(packed[:-2])


def test_load_ws_frame_tells_a_batch_from_a_frame() -> None:
    assert wire.load_ws_frame('[{"type":"pong"}]', "json") == [{"type": "pong"}]
    assert wire.load_ws_frame(msgpack.packb([{"type": "pong"}]), "msgpack") == [{"type": "pong"}]
    with pytest.raises(wire.ProtocolError):
        wire.decode_ws_frame("[]", "json")  # a batch is not one frame


# ---------------------------------------------------------------------------- the client


@pytest.mark.parametrize("fmt", ["json", "msgpack"])
def test_a_batch_is_delivered_as_its_frames_in_order(fmt: str) -> None:
    """Messages of two topics in one batch, an old one (before the cursor) dropped as it would
    be alone, a loss signal in the middle, an empty batch, then single frames: in order."""

    async def script(conn: int, cursors: dict[str, str], send: Send) -> None:
        await send([msg(1), msg(2), msg(1, topic="b"), msg(2), msg(3),
                    {"type": "lost", "topic": "b", "reason": "expired"}, msg(5, topic="b")])
        await send([])
        await send(msg(4))
        await send([msg(5), msg(6, {"deep": [1, {"x": None}], "s": "héllo ✓"})])

    async def body(gw: Gateway) -> None:
        async with client(gw.url, fmt, topics=["a", "b"]) as c:
            got = await read(c, 8)
            assert [(e.topic, e.id) if isinstance(e, Message) else (e.topic, e.reason) for e in got] == [
                ("a", "e-1"), ("a", "e-2"), ("b", "e-1"), ("a", "e-3"), ("b", "expired"), ("b", "e-5"),
                ("a", "e-4"), ("a", "e-5"), ("a", "e-6")]
            assert got[-1].data == {"deep": [1, {"x": None}], "s": "héllo ✓"}
            assert c.cursors == {"a": "e-6", "b": "e-5"}
            assert c.stats.batches == 3  # the empty one counted, and nothing else of it
        assert gw.paths == ["/v1/ws?batch=1"]

    asyncio.run(Gateway(script).run(fmt, body))


@pytest.mark.parametrize("fmt", ["json", "msgpack"])
def test_deltas_inside_a_batch_apply_against_the_element_before(fmt: str) -> None:
    """A full message then deltas in one batch (the first full message's base is its own data,
    taken from its element), deltas in the next batch and alone; a bad one in a batch: that
    topic subscribed again from its cursor, its later elements dropped, the other topic's not."""

    def state(n: int) -> dict[str, Any]:
        return {"n": n, "s": 'x,]}"[{\\ é', "l": [n, {"b": [n % 3]}], "pad": "p" * 40}

    def enc(v: Any) -> bytes:
        if fmt == "msgpack":
            return bytes(msgpack.packb(v, use_bin_type=True))
        return json.dumps(v, separators=(",", ":")).encode()

    def delta(n: int, topic: str = "a", bad: bool = False) -> dict[str, Any]:
        d = make_delta(enc(state(n - 1)), enc(state(n)))
        if bad:
            d = corrupt(d)
        return {"type": "message", "topic": topic, "id": f"e-{n}", "delta": True,
                "data": d if fmt == "msgpack" else d.decode()}

    async def script(conn: int, cursors: dict[str, str], send: Send) -> None:
        if "a" in cursors and cursors["a"] == "e-4":
            # The resubscribe after the bad delta: from the last delivered, full first.
            await send([msg(5, state(5)), delta(6)])
            return
        await send([msg(1, {"other": True}, topic="b"), msg(1, state(1)), delta(2), delta(3),
                    msg(2, {"other": 2}, topic="b")])
        await send([delta(4)])
        await send([delta(5, bad=True), delta(6), msg(3, {"other": 3}, topic="b")])

    async def body(gw: Gateway) -> None:
        async with client(gw.url, fmt, topics=["a", "b"], delta="fossil") as c:
            got = await read(c, 9, errors=1)
            a = [e for e in got if isinstance(e, Message) and e.topic == "a"]
            assert [m.id for m in a] == ["e-1", "e-2", "e-3", "e-4", "e-5", "e-6"]
            assert [m.data for m in a] == [state(n) for n in range(1, 7)]
            assert [m.id for m in got if isinstance(m, Message) and m.topic == "b"] == ["e-1", "e-2", "e-3"]
            assert [e.code for e in got if isinstance(e, ErrorEvent)] == ["bad_delta"]
            assert (c.stats.deltas, c.stats.delta_failures, c.stats.batches) == (4, 1, 4)
        subs = [f for f in gw.frames if f["type"] == "subscribe"]
        assert subs[-1] == {"type": "subscribe", "topics": ["a"], "cursors": {"a": "e-4"}, "delta": "fossil"}
        assert len(gw.paths) == 1, "a bad delta resubscribes the topic, the connection stays"

    asyncio.run(Gateway(script).run(fmt, body))


@pytest.mark.parametrize("fmt", ["json", "msgpack"])
@pytest.mark.parametrize("bad", [7, "x", None, [msg(9)]])
def test_a_batch_element_that_is_not_a_frame_is_a_malformed_frame(fmt: str, bad: Any) -> None:
    """The elements before it are delivered; then an error event and a reconnect from the
    cursors (the last message delivered), which then delivers the rest."""

    async def script(conn: int, cursors: dict[str, str], send: Send) -> None:
        if conn == 1:
            await send([msg(1), msg(2), bad, msg(3)])
        else:
            await send([msg(n) for n in range(int(cursors["a"].split("-")[1]) + 1, 5)])

    async def body(gw: Gateway) -> None:
        async with client(gw.url, fmt) as c:
            got = await read(c, 4, errors=1)
            assert [e.id if isinstance(e, Message) else e.code for e in got] == [
                "e-1", "e-2", "protocol_error", "e-3", "e-4"]
            assert c.stats.batches == 2
        subs = [f for f in gw.frames if f["type"] == "subscribe"]
        assert [s["cursors"] for s in subs] == [{}, {"a": "e-2"}]

    asyncio.run(Gateway(script).run(fmt, body))


def test_batch_off_and_deflate_on_are_options() -> None:
    """By default the handshake asks for batches and offers no permessage-deflate (the
    gateway does not batch on a deflate connection); each is an option."""

    async def script(conn: int, cursors: dict[str, str], send: Send) -> None:
        await send(msg(conn))

    async def body(gw: Gateway) -> None:
        options: list[dict[str, Any]] = [{}, {"batch": False}, {"deflate": True}, {"batch": False, "token": "t.k.n"}]
        for n, kw in enumerate(options, 1):
            async with client(gw.url, cursors={"a": f"e-{n - 1}"}, **kw) as c:
                got = await read(c, 1)
                assert [e.id for e in got] == [f"e-{n}"]
                assert c.stats.batches == 0
        assert gw.paths == ["/v1/ws?batch=1", "/v1/ws", "/v1/ws?batch=1", "/v1/ws?token=t.k.n"]
        assert gw.extensions[0] is None and gw.extensions[1] is None and gw.extensions[3] is None
        assert "permessage-deflate" in (gw.extensions[2] or "")

    asyncio.run(Gateway(script).run("json", body))


def test_token_beside_batch() -> None:
    async def script(conn: int, cursors: dict[str, str], send: Send) -> None:
        await send([msg(1)])

    async def body(gw: Gateway) -> None:
        async with client(gw.url, token="a.b/c") as c:
            await read(c, 1)
        assert gw.paths == ["/v1/ws?batch=1&token=a.b%2Fc"]

    asyncio.run(Gateway(script).run("json", body))
