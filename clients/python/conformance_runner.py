#!/usr/bin/env python3
"""The conformance runner of heraldpush (clients/conformance/RUNNER.md): JSON commands on
stdin, JSON events on stdout, one per line. It drives the client and holds no scenario logic.

    python3 clients/python/conformance_runner.py
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

# The client of this tree, not an older installed copy (its dependencies come from the install).
sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))

import heraldpush  # noqa: E402
from heraldpush import Backoff, Client, ErrorEvent, HeraldError, Lost, Message, StateChanged  # noqa: E402


def out(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def log(*args: object) -> None:
    print("[py-runner]", *args, file=sys.stderr, flush=True)


class Runner:
    def __init__(self) -> None:
        self.client: Client | None = None
        self.token: str | None = None
        self.pump: asyncio.Task[None] | None = None
        self.commands: set[asyncio.Task[None]] = set()

    def _token(self) -> str:
        if self.token is None:
            raise RuntimeError("no token")
        return self.token

    async def start(self, c: dict[str, Any]) -> None:
        self.token = c.get("token")
        backoff = c.get("backoff_ms") or [100, 2000]
        heartbeat = c.get("heartbeat_ms")
        self.client = Client(
            list(c["urls"]),
            topics=list(c.get("topics", [])) + list(c.get("patterns", [])),
            transports=list(c.get("transports") or ["ws", "sse", "poll"]),
            fmt=c.get("format") or "json",
            token=self._token if self.token is not None else None,
            cursors=c.get("cursors") or {},
            backoff=Backoff(backoff[0] / 1000, backoff[1] / 1000),
            dead_timeout=heartbeat / 1000 if heartbeat else 45.0,
            open_timeout=(c.get("open_timeout_ms") or 3000) / 1000,
            stable_after=(c.get("stable_ms") or 1000) / 1000,
            upgrade_interval=(c.get("upgrade_ms") or 2000) / 1000,
            poll_timeout=(c.get("poll_timeout_ms") or 5000) / 1000,
            token_refresh_margin=(c.get("token_margin_ms") or 2000) / 1000,
            delta=c.get("delta"),
            batch=c.get("batch") is not False,
        )
        await self.client.connect()
        self.pump = asyncio.ensure_future(self._pump(self.client))

    async def _pump(self, client: Client) -> None:
        async for ev in client:
            if isinstance(ev, Message):
                out({"event": "message", "topic": ev.topic, "id": ev.id, "name": ev.event, "data": ev.data})
            elif isinstance(ev, Lost):
                out({"event": "lost", "topic": ev.topic, "reason": ev.reason})
            elif isinstance(ev, StateChanged):
                out({"event": "state", "state": ev.state.value, "transport": ev.transport})
            elif isinstance(ev, ErrorEvent):
                out({"event": "error", "code": ev.code, "reason": ev.reason})

    async def command(self, c: dict[str, Any]) -> None:
        cmd = c.get("cmd")
        ref = c.get("ref")
        client = self.client
        try:
            if cmd == "token":
                self.token = c["token"]
            elif client is None:
                raise RuntimeError(f"{cmd} before start")
            elif cmd == "publish":
                p = await client.publish(c["topic"], c.get("data"))
                out({"event": "published", "ref": ref, "id": p.id})
            elif cmd == "history":
                page = await client.history(c["topic"], limit=int(c.get("limit") or 100))
                out({"event": "history", "ref": ref,
                     "messages": [{"id": m.id, "data": m.data} for m in page.messages]})
            elif cmd == "cursors":
                out({"event": "cursors", "ref": ref, "cursors": client.cursors})
            elif cmd == "stats":
                s = client.stats
                out({"event": "stats", "ref": ref, "deltas": s.deltas, "delta_failures": s.delta_failures,
                     "batches": s.batches})
            else:
                raise RuntimeError(f"unknown command {cmd!r}")
        except HeraldError as e:
            out({"event": "error", "ref": ref, "code": e.code, "reason": e.reason})
        except Exception as e:  # reported, never fatal to the runner
            out({"event": "error", "ref": ref, "code": None, "reason": repr(e)})

    async def stop(self) -> None:
        if self.client is not None:
            await self.client.close()
        if self.pump is not None:
            try:
                await asyncio.wait_for(self.pump, 5)
            except asyncio.TimeoutError:
                log("the event pump did not end after close()")
        for t in self.commands:
            t.cancel()
        out({"event": "closed"})


async def main() -> int:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    runner = Runner()
    log("heraldpush", heraldpush.__version__)
    while True:
        line = await reader.readline()
        if not line:
            await runner.stop()
            return 0
        try:
            c = json.loads(line)
        except ValueError:
            out({"event": "error", "code": "bad_command", "reason": f"not JSON: {line[:80]!r}"})
            continue
        cmd = c.get("cmd")
        if cmd == "start":
            await runner.start(c)
        elif cmd == "stop":
            await runner.stop()
            return 0
        else:
            # Commands run beside each other: a slow history call does not hold a publish.
            task = asyncio.ensure_future(runner.command(c))
            runner.commands.add(task)
            task.add_done_callback(runner.commands.discard)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
