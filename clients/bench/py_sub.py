#!/usr/bin/env python3
"""The Python subscriber of clients/bench/cpu.py (docs/benchmarks/clients.md): Herald's
`heraldpush` or `centrifuge-python`, N subscriptions on one WebSocket, in this one process.
It prints {"ready": true} once every subscription is live, then counts deliveries (checking
that every channel's seq goes up by one) until EXPECT arrived or TIMEOUT_S passed, and
prints its own CPU time (getrusage: user + system) over that span.

    py_sub.py herald     URL N EXPECT TIMEOUT_S [CLIENT_SRC]
    py_sub.py centrifuge URL N EXPECT TIMEOUT_S TOKEN

Binary: `herald-msgpack` (heraldpush with fmt="msgpack": the herald.msgpack subprotocol; the
client decodes each payload into Python objects) and `centrifuge-protobuf` (centrifuge-python
with use_protobuf=True: it hands the payload over as the publisher's JSON bytes, undecoded, so
this script reads "ch" and "seq" out of those bytes with a regex, and the JSON decode an
application would do is not counted against centrifuge-python).

Variants of `herald`, patched here (never in the client) to show where its CPU goes:
`herald-nodeflate` opens the WebSocket without offering permessage-deflate (heraldpush
offers it, the `websockets` default, and Herald accepts: a zlib inflate per message;
Centrifugo's WebSocket compression is off by default); `herald-nodeflate-fastpath` also
returns an event already queued without the two tasks and the asyncio.wait that
Client.next_event makes for every event.
"""

from __future__ import annotations

import asyncio
import json
import re
import resource
import sys
import time
from typing import Any


_SEQ = re.compile(rb'"ch":(\d+),"seq":(\d+)')


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def out(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class Check:
    def __init__(self, n: int, expect: int) -> None:
        self.next = [1] * n
        self.received = self.gaps = self.dups = self.bad = 0
        self.expect = expect
        self.done = asyncio.Event()

    def on(self, data: Any) -> None:
        if isinstance(data, (bytes, bytearray)):
            m = _SEQ.search(data)
            data = {"ch": int(m.group(1)), "seq": int(m.group(2))} if m else None
        try:
            ch, seq = data["ch"], data["seq"]
            nxt = self.next[ch]
        except (TypeError, KeyError, IndexError):
            self.bad += 1
        else:
            if seq == nxt:
                self.next[ch] = nxt + 1
            elif seq > nxt:
                self.gaps += 1
                self.next[ch] = seq + 1
            else:
                self.dups += 1
        self.received += 1
        if self.received >= self.expect:
            self.done.set()


def patch(variant: str) -> None:
    import functools

    import heraldpush
    from heraldpush import transports

    if "nodeflate" in variant:
        transports.connect = functools.partial(transports.connect, compression=None)  # type: ignore[assignment]
    if "fastpath" in variant:
        slow = heraldpush.Client.next_event

        async def next_event(self: Any) -> Any:
            if not self._events.empty():
                return self._events.get_nowait()
            return await slow(self)

        heraldpush.Client.next_event = next_event  # type: ignore[method-assign]


async def herald(url: str, n: int, chk: Check, msgpack: bool = False) -> Any:
    import heraldpush

    client = heraldpush.Client(url, topics=[f"bench.{i}" for i in range(n)], transports=["ws"], max_topics=max(64, n),
                               fmt="msgpack" if msgpack else "json")
    await client.connect()
    connected = asyncio.Event()

    async def pump() -> None:
        async for ev in client:
            if isinstance(ev, heraldpush.Message):
                chk.on(ev.data)
            elif isinstance(ev, heraldpush.StateChanged):
                if ev.state.value == "connected":
                    connected.set()
            elif isinstance(ev, heraldpush.Lost):
                print("lost:", ev, file=sys.stderr)

    task = asyncio.ensure_future(pump())
    await asyncio.wait_for(connected.wait(), 20)

    async def close() -> None:
        await client.close()
        task.cancel()

    return close


async def centrifuge_client(url: str, n: int, chk: Check, token: str, protobuf: bool = False) -> Any:
    from centrifuge import Client, PublicationContext, SubscriptionEventHandler

    class Handler(SubscriptionEventHandler):
        async def on_publication(self, ctx: PublicationContext) -> None:
            chk.on(ctx.pub.data)

    client = Client(url, token=token, proxy=None, use_protobuf=protobuf)
    subs = [client.new_subscription(f"bench:{i}", events=Handler()) for i in range(n)]
    await client.connect()
    for s in subs:
        await s.subscribe()
    for s in subs:
        await s.ready(timeout=20)
    return client.disconnect


async def main() -> int:
    kind, url, n, expect, timeout = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    chk = Check(n, expect)
    if kind.startswith("herald"):
        if len(sys.argv) > 6:
            sys.path.insert(0, sys.argv[6])
        patch(kind)
        close = await herald(url, n, chk, msgpack="msgpack" in kind)
    elif kind in ("centrifuge", "centrifuge-protobuf"):
        close = await centrifuge_client(url, n, chk, sys.argv[6], protobuf=kind == "centrifuge-protobuf")
    else:
        raise SystemExit(f"unknown client {kind}")
    await asyncio.sleep(0.3)
    c0, t0 = cpu_s(), time.monotonic()
    out({"ready": True})
    timed_out = False
    try:
        await asyncio.wait_for(chk.done.wait(), timeout)
    except asyncio.TimeoutError:
        timed_out = True
    c1, t1 = cpu_s(), time.monotonic()
    await asyncio.sleep(0.2)  # anything past the expected count (duplicates)
    out({"received": chk.received, "cpu_s": c1 - c0, "wall_s": t1 - t0, "gaps": chk.gaps, "dups": chk.dups,
         "bad": chk.bad, "timed_out": timed_out})
    await close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
