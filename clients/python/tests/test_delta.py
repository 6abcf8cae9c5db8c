"""Delta compression (docs/protocol.md "Delta compression"): the Fossil decoder against a delta
made by Fossil's own encoder (the npm ``fossil-delta``) and crafted malformed deltas; the base
bytes of frames; and each transport against a scripted gateway: deltas applied transparently,
a delta that does not apply counted, never delivered, its topic subscribed again from the last
message delivered."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import httpx
import msgpack
import pytest
from websockets.asyncio.server import ServerConnection, serve

from heraldpush import Client, ErrorEvent, Message, wire
from heraldpush.delta import (
    MAX_DELTA_TARGET, Bases, DeltaError, apply_fossil, fossil_checksum, json_data_text, msgpack_data_bytes,
    poll_message_texts,
)
from heraldpush.transports import Closed, ConnContext, PollConnection, SseConnection, WsConnection

# Made by fossil-delta 2.0.0 (npm): createDelta(A, B).
A = ('{"match":"a","score":[1,0],"players":[' + ",".join(
    f'{{"id":{i},"name":"player-{i}","goals":{i % 3}}}' for i in range(12)) + "]}")
B = A.replace('"score":[1,0]', '"score":[2,0]').replace('"id":7,"name":"player-7","goals":1', '"id":7,"name":"player-7","goals":5')
D = "7c\nM@0,1:24p@N,1:52R@5C,2TTMke;"

_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz~"


def b64(v: int) -> str:
    s = ""
    while True:
        s = _DIGITS[v & 63] + s
        v >>= 6
        if v == 0:
            return s


def make_delta(a: bytes, b: bytes) -> bytes:
    """A valid Fossil delta (a test encoder): copy the common prefix and suffix, insert the rest."""
    p = 0
    while p < min(len(a), len(b)) and a[p] == b[p]:
        p += 1
    s = 0
    while s < min(len(a), len(b)) - p and a[-1 - s] == b[-1 - s]:
        s += 1
    out = b64(len(b)).encode() + b"\n"
    if p:
        out += f"{b64(p)}@0,".encode()
    mid = b[p:len(b) - s]
    if mid:
        out += f"{b64(len(mid))}:".encode() + mid
    if s:
        out += f"{b64(s)}@{b64(len(a) - s)},".encode()
    return out + f"{b64(fossil_checksum(b))};".encode()


def corrupt(d: bytes) -> bytes:
    """The checksum's last digit changed."""
    return d[:-2] + (b"1" if d[-2:-1] == b"0" else b"0") + b";"


def test_applies_a_delta_made_by_fossil() -> None:
    assert apply_fossil(A.encode(), D.encode()).decode() == B
    assert len(D) < len(B) / 10


def test_a_chain_of_deltas() -> None:
    rng = random.Random(1)
    state = {"players": [{"id": i, "score": 0} for i in range(30)], "bin": "x" * 50}
    base = json.dumps(state, separators=(",", ":")).encode()
    for n in range(50):
        state["players"][rng.randrange(30)]["score"] += n
        nxt = json.dumps(state, separators=(",", ":")).encode()
        assert apply_fossil(base, make_delta(base, nxt)) == nxt
        base = nxt
    raw = bytes(range(256))
    assert apply_fossil(raw, make_delta(raw, b"")) == b""


def test_malformed_deltas_are_delta_errors() -> None:
    base, good = A.encode(), D.encode()
    with pytest.raises(DeltaError, match="checksum"):
        apply_fossil(base, corrupt(good))
    for n in range(len(good)):  # every truncation
        with pytest.raises(DeltaError):
            apply_fossil(base, good[:n])
    with pytest.raises(DeltaError, match="claims a result"):
        apply_fossil(base, b"3~~~~~\n0;")  # 2^32 - 1: refused before anything is allocated
    with pytest.raises(DeltaError, match="claims a result"):
        apply_fossil(base, b64(MAX_DELTA_TARGET + 1).encode() + b"\n0;")
    with pytest.raises(DeltaError, match="32 bits"):
        apply_fossil(base, b"~~~~~~~~~~\n")
    with pytest.raises(DeltaError, match="end of the base"):
        apply_fossil(base, b"A\nA@zz,0;")
    with pytest.raises(DeltaError, match="end of the delta"):
        apply_fossil(base, b"A\nA:abc")
    with pytest.raises(DeltaError, match="unknown command"):
        apply_fossil(base, b"3\n3!abc0;")
    with pytest.raises(DeltaError, match="2 bytes made, 3 claimed"):
        apply_fossil(base, b"3\n2:ab0;")
    with pytest.raises(DeltaError, match="past the claimed size"):
        apply_fossil(base, b"1\n2:ab0;")
    with pytest.raises(DeltaError, match="after the checksum"):
        apply_fossil(base, b"1\n1:a" + b64(fossil_checksum(b"a")).encode() + b";x")
    rng = random.Random(7)
    for i in range(3000):  # garbage: a DeltaError or a result, never another exception
        g = b"3\n" + bytes(rng.randrange(256) for _ in range(i % 40))
        try:
            apply_fossil(base, g)
        except DeltaError:
            pass


def test_base_bytes_of_frames() -> None:
    assert json_data_text('{"type":"message","topic":"a","id":"e-1","data":{"x":"}","y":[1]}}') == '{"x":"}","y":[1]}'
    answer = ('{"messages":[{"type":"message","topic":"a","id":"e-1","data":{"q":"]}\\"["}},'
              '{"type":"message","topic":"a","id":"e-2","delta":true,"data":"x"}],"cursor":"a=e-2"}')
    assert poll_message_texts(answer) == [
        '{"type":"message","topic":"a","id":"e-1","data":{"q":"]}\\"["}}',
        '{"type":"message","topic":"a","id":"e-2","delta":true,"data":"x"}',
    ]
    assert poll_message_texts('{"lost":[{"topic":"a","reason":"x"}],"messages":[],"cursor":"a=e-2"}') == []
    data = {"n": 1, "s": "x" * 40, "l": [1, 2, {"a": None}], "b": b"\x00\x01"}
    frame = msgpack.packb({"type": "message", "topic": "a", "id": "e-1", "data": data}, use_bin_type=True)
    assert msgpack_data_bytes(frame) == msgpack.packb(data, use_bin_type=True)
    with pytest.raises(DeltaError):
        msgpack_data_bytes(frame[:-3])


def test_bases_without_a_base_and_after_a_failure() -> None:
    bases = Bases(lambda t: t == "a")
    with pytest.raises(DeltaError, match="no base"):
        bases.delta_json("a", make_delta(b"1", b"2").decode())
    bases.full_json("a", lambda: '{"type":"message","topic":"a","id":"e-1","data":{"n":1}}')
    assert bases.delta_json("a", make_delta(b'{"n":1}', b'{"n":2}').decode()) == {"n": 2}
    with pytest.raises(DeltaError, match="checksum"):
        bases.delta_json("a", corrupt(make_delta(b'{"n":2}', b'{"n":3}')).decode())
    assert len(bases) == 0  # a failure drops the base
    bases.full_json("b", lambda: '{"data":1}')
    assert len(bases) == 0  # a topic that did not ask keeps none


# ---------------------------------------------------------------------------- transports


def state(n: int) -> dict[str, Any]:
    return {"match": "a", "score": [n, 0], "log": "x" * 60, "n": n}


def enc_json(v: Any) -> bytes:
    return json.dumps(v, separators=(",", ":")).encode()


def frame_text(n: int, delta: bool, bad: bool = False) -> str:
    if not delta:
        return json.dumps({"type": "message", "topic": "a", "id": f"e-{n}", "data": state(n)}, separators=(",", ":"))
    d = make_delta(enc_json(state(n - 1)), enc_json(state(n)))
    if bad:
        d = corrupt(d)
    return json.dumps({"type": "message", "topic": "a", "id": f"e-{n}", "delta": True, "data": d.decode()},
                      separators=(",", ":"))


class Harness:
    """A client's side of one connection: cursors, what was delivered, the delta results."""

    def __init__(self, delta: bool = True) -> None:
        self.cursor: str | None = None
        self.got: list[Message] = []
        self.results: list[wire.DeltaResult] = []
        self.delta = delta

    def ctx(self, url: str, fmt: str = "json", http: httpx.AsyncClient | None = None) -> ConnContext:
        return ConnContext(url=url, fmt=fmt, topics=lambda: {"a": self.cursor}, pattern_cursors=dict,  # type: ignore[arg-type]
                           token=lambda: None, http=http or httpx.AsyncClient(), open_timeout=3,
                           dead_timeout=10, poll_timeout=5, delta=lambda t: self.delta)

    async def sink(self, _conn: Any, ev: wire.WireEvent) -> None:
        if isinstance(ev, wire.DeltaResult):
            self.results.append(ev)
        elif isinstance(ev, Message):
            assert not isinstance(ev, wire.DeltaMessage), "a delta reached the client"
            self.got.append(ev)
            self.cursor = ev.id


@pytest.mark.parametrize("fmt", ["json", "msgpack"])
def test_websocket_applies_deltas_and_resubscribes_after_a_bad_one(fmt: str) -> None:
    frames: list[dict[str, Any]] = []

    async def handler(ws: ServerConnection) -> None:
        mp = ws.subprotocol == "herald.msgpack"
        corrupted = False

        async def send(o: dict[str, Any]) -> None:
            await ws.send(msgpack.packb(o, use_bin_type=True) if mp else json.dumps(o, separators=(",", ":")))

        def data(n: int) -> bytes:
            return msgpack.packb(state(n), use_bin_type=True) if mp else enc_json(state(n))

        async for raw in ws:
            f = msgpack.unpackb(raw) if isinstance(raw, bytes) else json.loads(raw)
            frames.append(f)
            if f["type"] == "unsubscribe":
                await send({"type": "unsubscribed", "topics": f["topics"]})
            if f["type"] != "subscribe":
                continue
            start = int(f["cursors"].get("a", "e-0").split("-")[1])
            await send({"type": "subscribed", "topics": f["topics"], "cursors": {"a": f"e-{start}"}})
            for n in range(start + 1, 5):
                if n == start + 1:
                    await send({"type": "message", "topic": "a", "id": f"e-{n}", "data": state(n)})
                    continue
                d = make_delta(data(n - 1), data(n))
                if n == 3 and not corrupted:
                    corrupted, d = True, corrupt(d)
                await send({"type": "message", "topic": "a", "id": f"e-{n}", "delta": True,
                            "data": d if mp else d.decode()})

    async def main() -> None:
        async with serve(handler, "127.0.0.1", 0, subprotocols=["herald.msgpack"] if fmt == "msgpack" else None) as server:  # type: ignore[list-item]
            port = server.sockets[0].getsockname()[1]
            h = Harness()
            conn = WsConnection(h.ctx(f"http://127.0.0.1:{port}", fmt), h.sink)
            task = asyncio.ensure_future(conn.run())
            for _ in range(300):
                if len(h.got) >= 4:
                    break
                await asyncio.sleep(0.01)
            task.cancel()
            assert [m.data for m in h.got] == [state(n) for n in range(1, 5)]
            assert [m.id for m in h.got] == ["e-1", "e-2", "e-3", "e-4"]
            assert [r.error is None for r in h.results] == [True, False, True]
            subs = [f for f in frames if f["type"] == "subscribe"]
            assert subs[0]["delta"] == "fossil"
            assert [f["topics"] for f in frames if f["type"] == "unsubscribe"] == [["a"]]
            assert subs[1] == {"type": "subscribe", "topics": ["a"], "cursors": {"a": "e-2"}, "delta": "fossil"}

    asyncio.run(main())


def test_poll_deltas_within_an_answer_and_the_next_poll_from_the_last_delivered() -> None:
    requests: list[httpx.Request] = []

    async def handler(req: httpx.Request) -> httpx.Response:
        requests.append(req)
        if len(requests) > 2:
            await asyncio.sleep(3600)  # held
        if len(requests) == 1:
            msgs = [frame_text(1, False), frame_text(2, True), frame_text(3, True, bad=True), frame_text(4, True)]
        elif len(requests) == 2:
            msgs = [frame_text(3, False), frame_text(4, True)]
        return httpx.Response(200, text='{"messages":[' + ",".join(msgs) + '],"cursor":"a=e-4"}')

    async def main() -> None:
        h = Harness()
        http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
        conn = PollConnection(h.ctx("http://gw", http=http), h.sink)
        task = asyncio.ensure_future(conn.run())
        for _ in range(300):
            if len(h.got) >= 4:
                break
            await asyncio.sleep(0.01)
        task.cancel()
        assert [m.data for m in h.got] == [state(n) for n in range(1, 5)]
        assert [r.error is None for r in h.results] == [True, False, True]
        assert requests[0].url.params["delta"] == "fossil"
        assert requests[1].url.params["cursor"] == "a=e-2"

    asyncio.run(main())


def test_sse_deltas_and_a_new_stream_from_the_last_delivered_after_a_bad_one() -> None:
    requests: list[httpx.Request] = []

    async def handler(req: httpx.Request) -> httpx.Response:
        requests.append(req)
        if len(requests) > 2:
            await asyncio.sleep(3600)  # held
        if len(requests) == 1:
            opening, msgs = "a=e-0", [frame_text(1, False), frame_text(2, True), frame_text(3, True, bad=True),
                                      frame_text(4, True)]
        else:
            opening, msgs = "a=e-2", [frame_text(3, False), frame_text(4, True)]
        body = f"retry: 1000\nid: {opening}\n\n" + "".join(f"id: a={json.loads(m)['id']}\ndata: {m}\n\n" for m in msgs)
        return httpx.Response(200, stream=httpx.ByteStream(body.encode()), headers={"content-type": "text/event-stream"})

    async def main() -> None:
        h = Harness()
        http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
        conn = SseConnection(h.ctx("http://gw", http=http), h.sink)
        task = asyncio.ensure_future(conn.run())
        for _ in range(300):
            if len(h.got) >= 4:
                break
            await asyncio.sleep(0.01)
        task.cancel()
        assert [m.data for m in h.got] == [state(n) for n in range(1, 5)]
        assert [r.error is None for r in h.results] == [True, False, True]
        assert requests[0].url.params["delta"] == "fossil"
        assert requests[0].url.params["format"] == "json"
        assert requests[1].headers["last-event-id"] == "a=e-2"

    asyncio.run(main())


def test_no_delta_asked_without_the_option() -> None:
    requests: list[httpx.Request] = []

    async def handler(req: httpx.Request) -> httpx.Response:
        requests.append(req)
        if len(requests) > 1:
            await asyncio.sleep(3600)  # held
        return httpx.Response(200, text='{"messages":[],"cursor":"a=e-0"}')

    async def main() -> None:
        h = Harness(delta=False)
        conn = PollConnection(h.ctx("http://gw", http=httpx.AsyncClient(transport=httpx.MockTransport(handler))), h.sink)
        task = asyncio.ensure_future(conn.run())
        await asyncio.sleep(0.05)
        task.cancel()
        assert "delta" not in requests[0].url.params

    asyncio.run(main())
    with pytest.raises(ValueError, match="unknown delta"):
        Client("http://gw", topics=["a"], delta="zstd")  # type: ignore[arg-type]


def test_the_client_counts_deltas_and_reports_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    import heraldpush.client as client_mod
    from heraldpush.transports import Connection

    class Fake(Connection):
        transport = "ws"

        async def run(self) -> Closed:
            assert self.ctx.delta("a") and not self.ctx.delta("b")
            await self._emit(wire.Opened({"a": "e-0"}))
            self.opened.set()
            await self._emit(wire.DeltaResult("a"))
            await self._emit(wire.DeltaResult("a", "delta: bad checksum"))
            await asyncio.sleep(3600)
            return Closed("never")

    monkeypatch.setattr(client_mod, "open_connection", lambda t, ctx, sink: Fake(ctx, sink))

    async def main() -> None:
        async with Client("http://gw", topics=["a"], delta="fossil", transports=["ws"]) as c:
            c.subscribe("b")
            async for ev in c:
                if isinstance(ev, ErrorEvent):
                    assert ev.code == "bad_delta"
                    break
            assert (c.stats.deltas, c.stats.delta_failures) == (1, 1)

    asyncio.run(asyncio.wait_for(main(), 5))
