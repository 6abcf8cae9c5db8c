#!/usr/bin/env python3
"""Idle SSE connections over TLS: the server's RSS per connection (BENCHMARKS.md, "TLS").

herald-loadgen speaks plain TCP only, so this holds N TLS (HTTP/1.1) SSE streams with
Python's ssl module and reads the server's VmRSS before and after. Loopback only.

    herald --listen 127.0.0.1:41443 --admin-listen 127.0.0.1:41444 --sse-heartbeat 60s \
      --tls-cert crates/gateway/tests/fixtures/tls/server-a.pem \
      --tls-key crates/gateway/tests/fixtures/tls/server-a.key &
    deploy/tls-idle-rss.py --port 41443 --pid $! --conns 4000

With --plain it does the same over plain TCP (start herald without the --tls-* flags).
"""

import argparse
import asyncio
import ssl
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CA = ROOT / "crates/gateway/tests/fixtures/tls/ca.pem"


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


async def hold(port: int, ctx: ssl.SSLContext | None, topic: str, opened: list, stop: asyncio.Event):
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="localhost" if ctx else None)
    writer.write(f"GET /v1/sse?topic={topic} HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n\r\n".encode())
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(head.split(b"\r\n")[0].decode(errors="replace"))
    opened.append(1)
    await stop.wait()
    writer.close()


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pid", type=int, required=True, help="the server's pid")
    ap.add_argument("--conns", type=int, default=4000)
    ap.add_argument("--hold", type=float, default=5.0, help="seconds to hold once all are open")
    ap.add_argument("--plain", action="store_true", help="plain TCP, for the same figure without TLS")
    a = ap.parse_args()
    ctx = None
    if not a.plain:
        ctx = ssl.create_default_context(cafile=str(CA))
        ctx.set_alpn_protocols(["http/1.1"])
    before = rss_kib(a.pid)
    opened: list = []
    stop = asyncio.Event()
    tasks = []
    started = time.monotonic()
    for i in range(a.conns):
        tasks.append(asyncio.create_task(hold(a.port, ctx, f"idle-{i % 16}", opened, stop)))
        if i % 200 == 199:
            await asyncio.sleep(0.05)
    deadline = started + 120
    while len(opened) < a.conns and time.monotonic() < deadline:
        failed = [t for t in tasks if t.done() and t.exception()]
        if failed:
            print(f"connection failed: {failed[0].exception()}", file=sys.stderr)
            stop.set()
            return 1
        await asyncio.sleep(0.2)
    await asyncio.sleep(a.hold)
    after = rss_kib(a.pid)
    n = len(opened)
    print(f"connections {n}/{a.conns}  rss {before} KiB -> {after} KiB  "
          f"per connection {(after - before) * 1024 / max(n, 1):.0f} bytes")
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    return 0 if n == a.conns else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
