"""The connection state machine with scripted transports (no network): fallback order,
probing back up, cursors only moving forward across the overlap of two connections, and
resuming from the cursors after a cut."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import heraldpush.client as client_mod
from heraldpush import Backoff, RefusedError, Client, ErrorEvent, Lost, Message, StateChanged, wire
from heraldpush.transports import Closed, ConnContext, Connection, Sink, TransportName


class Scripted(Connection):
    """Plays a script: ("open", positions), ("msg", topic, id), ("lost", topic, reason,
    cursor), ("wait", seconds), ("close", reason), ("hang",)."""

    scripts: dict[str, list[list[tuple[Any, ...]]]] = {}
    seen_resume: list[tuple[str, dict[str, str | None]]] = []

    def __init__(self, transport: TransportName, ctx: ConnContext, sink: Sink) -> None:
        super().__init__(ctx, sink)
        self.transport = transport
        runs = self.scripts[transport]
        self.script = runs.pop(0) if len(runs) > 1 else runs[0]

    async def run(self) -> Closed:
        self.seen_resume.append((self.transport, dict(self.ctx.topics())))
        for step in self.script:
            kind = step[0]
            if kind == "open":
                await self._emit(wire.Opened(step[1]))
                self.opened.set()
            elif kind == "msg":
                await self._emit(wire.Message(step[1], step[2], {"id": step[2]}))
            elif kind == "lost":
                await self._emit(wire.Lost(step[1], step[2], step[3]))
            elif kind == "wait":
                await asyncio.sleep(step[1])
            elif kind == "close":
                return Closed(step[1])
            elif kind == "fatal":
                return Closed(step[2], fatal=RefusedError(step[1], step[2]))
            elif kind == "hang":
                await asyncio.sleep(3600)
        return Closed("script ended")


@pytest.fixture(autouse=True)
def scripted(monkeypatch: pytest.MonkeyPatch) -> None:
    Scripted.scripts = {}
    Scripted.seen_resume = []
    monkeypatch.setattr(client_mod, "open_connection", lambda t, ctx, sink: Scripted(t, ctx, sink))


async def collect(client: Client, until: Any, timeout: float = 5) -> list[Any]:
    seen: list[Any] = []

    async def read() -> list[Any]:
        async for ev in client:
            seen.append(ev)
            if until(seen):
                return seen
        return seen

    return await asyncio.wait_for(read(), timeout)


def messages(events: list[Any]) -> list[str]:
    return [e.id for e in events if isinstance(e, Message)]


def test_falls_back_then_probes_up_without_duplicates() -> None:
    Scripted.scripts = {
        "ws": [[("close", "refused")],                                    # first attempt fails
               [("open", {"a": "e-2"}), ("msg", "a", "e-2"), ("msg", "a", "e-3"), ("hang",)]],
        "sse": [[("open", {"a": "e-0"}), ("msg", "a", "e-1"), ("msg", "a", "e-2"), ("hang",)]],
        "poll": [[("hang",)]],
    }

    async def main() -> list[Any]:
        async with Client("http://x", topics=["a"], backoff=Backoff(0.01, 0.02), upgrade_interval=0.05) as c:
            return await collect(c, lambda s: len(messages(s)) >= 3)

    events = asyncio.run(main())
    assert messages(events) == ["e-1", "e-2", "e-3"], "e-2 came twice (the probe's overlap) and is delivered once"
    connected = [e.transport for e in events if isinstance(e, StateChanged) and e.state.value == "connected"]
    assert connected == ["sse", "ws"]
    # The probe subscribed from the cursor of the moment.
    assert Scripted.seen_resume[-1] == ("ws", {"a": "e-2"})


def test_resumes_from_cursors_after_a_cut_and_reports_the_loss() -> None:
    Scripted.scripts = {
        "ws": [[("open", {"a": "e-0"}), ("msg", "a", "e-1"), ("msg", "a", "e-2"), ("close", "cut")],
               [("open", {"a": "f-0"}), ("lost", "a", "epoch", "f-0"), ("msg", "a", "f-1"), ("hang",)]],
    }

    async def main() -> list[Any]:
        async with Client("http://x", topics=["a"], transports=["ws"], backoff=Backoff(0.01, 0.02)) as c:
            return await collect(c, lambda s: len(messages(s)) >= 3)

    events = asyncio.run(main())
    assert messages(events) == ["e-1", "e-2", "f-1"]
    assert Lost("a", "epoch") in events
    assert any(isinstance(e, ErrorEvent) and "cut" in e.reason for e in events)
    assert Scripted.seen_resume[1] == ("ws", {"a": "e-2"}), "the reconnect resumes from the last id"


def test_cursors_given_are_resumed_and_never_move_back() -> None:
    Scripted.scripts = {"ws": [[("open", {"a": "e-1"}), ("msg", "a", "e-4"), ("msg", "a", "e-5"), ("hang",)]]}

    async def main() -> tuple[list[Any], dict[str, str]]:
        async with Client("http://x", topics=["a"], transports=["ws"], cursors={"a": "e-4"}) as c:
            events = await collect(c, lambda s: len(messages(s)) >= 1)
            return events, c.cursors

    events, cursors = asyncio.run(main())
    assert Scripted.seen_resume[0] == ("ws", {"a": "e-4"})
    assert messages(events) == ["e-5"], "e-4 is at the cursor: not delivered again"
    assert cursors == {"a": "e-5"}


def test_bad_names_are_refused_before_connecting() -> None:
    with pytest.raises(ValueError):
        Client("http://x", topics=["orders*"])
    with pytest.raises(ValueError):
        Client("http://x", transports=["carrier-pigeon"])  # type: ignore[list-item]


def test_a_final_refusal_closes_the_client_with_a_fatal_error() -> None:
    Scripted.scripts = {"ws": [[("open", {"a": "e-0"}), ("msg", "a", "e-1"), ("fatal", "disconnected", "banned")]]}

    async def main() -> list[Any]:
        c = Client("http://x", topics=["a"], transports=["ws"], backoff=Backoff(0.01, 0.02))
        await c.connect()
        events = [ev async for ev in c]     # ends once the client closed itself
        assert c.state.value == "closed"
        return events

    events = asyncio.run(asyncio.wait_for(main(), 5))
    assert ErrorEvent("disconnected", "banned", fatal=True) in events
    states = [e.state.value for e in events if isinstance(e, StateChanged)]
    assert states == ["connected", "closed"], "no reconnect after a final refusal"
    assert len(Scripted.seen_resume) == 1


def test_close_ends_every_reader_waiting_on_an_empty_queue() -> None:
    # Readers wait on the event queue itself (no second task per wait): close() must wake
    # each of them, even when the queue is full of nothing and the state event wakes only one.
    Scripted.scripts = {"ws": [[("open", {"a": "e-0"}), ("hang",)]]}

    async def main(buffered: int) -> list[Any]:
        c = Client("http://x", topics=["a"], transports=["ws"], max_buffered=buffered)
        await c.connect()
        await collect(c, lambda s: any(isinstance(e, StateChanged) and e.state.value == "connected" for e in s))

        async def drain() -> list[Any]:
            return [ev async for ev in c]

        readers = [asyncio.ensure_future(drain()) for _ in range(3)]
        await asyncio.sleep(0.05)
        await c.close()
        got = await asyncio.wait_for(asyncio.gather(*readers), 2)
        assert await c.next_event() is None
        return [e for r in got for e in r]

    for buffered in (1000, 1):
        seen = asyncio.run(main(buffered))
        assert [e.state.value for e in seen if isinstance(e, StateChanged)] == ["closed"], "one reader got it"
