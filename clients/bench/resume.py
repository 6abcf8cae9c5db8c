#!/usr/bin/env python3
"""Resume under forced drops (docs/benchmarks/clients.md): each client, driven through its
conformance runner (clients/conformance/RUNNER.md), subscribes to one topic through Toxiproxy
in front of a real Herald node while this script publishes {"seq": n} to that topic at a fixed
rate through the admin API; every `--hold` seconds of delivery the connection is dropped at the
proxy, alternately a close (the proxy disabled and enabled again: FIN) and a reset (a
`reset_peer` toxic until the client saw the drop: RST); `--kinds stall` stops the data to the
client without closing anything (a `timeout` toxic) until the client gives the connection up
on its own (its dead-connection timeout, `--heartbeat-ms`). At the end every sequence number must
have arrived exactly once and in order, with no loss signal.

    python3 clients/bench/resume.py                      # python, go, js; 1,000 drops each; WebSocket
    python3 clients/bench/resume.py --clients go --drops 200 --transport sse

Resume time, per drop: from just before the proxy is told to drop to (a) the runner's next
`connected` (subscribed again) and (b) its first message after that (the replay of what was
published meanwhile); and (c) the first message published after the drop (the only measure
for long-poll, whose client holds no connection between polls and so often never sees a cut).
Times are taken when this script reads the runner's stdout line.
The clients are taken from a snapshot of `--commit` (default HEAD), not the working tree.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Herald, Toxiproxy, free_port, git_commit, machine, scratch, snapshot  # noqa: E402


def runner_cmd(name: str, tree: Path, tmp: Path) -> tuple[list[str], Path]:
    if name == "python":
        return [sys.executable, str(tree / "clients/python/conformance_runner.py")], tree
    if name == "js":
        return ["node", str(tree / "clients/conformance/runners/js/runner.mjs")], tree
    if name == "go":
        exe = tmp / "go-runner"
        subprocess.run(["go", "build", "-o", str(exe), "./cmd/conformance-runner"], cwd=tree / "clients/go",
                       check=True)
        return [str(exe)], tree / "clients/go"
    raise SystemExit(f"unknown client {name}")


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(p / 100 * len(s) + 0.5)) - 1))]


class Watch:
    """The runner's events as they arrive, checked against the published sequence."""

    def __init__(self) -> None:
        self.state = ""
        self.changed = asyncio.Event()
        self.expected = 1          # the next seq due
        self.received = 0
        self.gaps: list[tuple[int, int]] = []      # (expected, got)
        self.dups: list[tuple[int, int]] = []      # (expected, got): got < expected
        self.lost: list[dict[str, Any]] = []
        self.errors: list[dict[str, Any]] = []
        self.last_id: tuple[str, int] | None = None
        self.id_regressions = 0
        self.drop_at: float | None = None
        self.conn_at: float | None = None
        self.msg_at: float | None = None
        self.down_at: float | None = None
        self.after_seq = 0                 # the last seq published before the drop
        self.fresh_at: float | None = None  # first message published after the drop
        self.noticed = 0                   # drops the client reported (a state other than connected)
        self.transports: dict[str, int] = {}

    def on(self, ev: dict[str, Any], now: float) -> None:
        kind = ev.get("event")
        if kind == "message":
            seq = int(ev["data"]["seq"])
            self.received += 1
            if seq == self.expected:
                self.expected += 1
            elif seq > self.expected:
                self.gaps.append((self.expected, seq))
                self.expected = seq + 1
            else:
                self.dups.append((self.expected, seq))
            epoch, _, n = str(ev["id"]).rpartition("-")
            cur = (epoch, int(n))
            if self.last_id is not None and cur[0] == self.last_id[0] and cur[1] <= self.last_id[1]:
                self.id_regressions += 1
            self.last_id = cur
            if self.drop_at is not None and self.conn_at is not None and self.msg_at is None:
                self.msg_at = now
            if self.drop_at is not None and self.fresh_at is None and seq > self.after_seq:
                self.fresh_at = now
        elif kind == "state":
            self.state = ev["state"]
            if ev["state"] == "connected":
                self.transports[str(ev.get("transport"))] = self.transports.get(str(ev.get("transport")), 0) + 1
                if self.drop_at is not None and self.conn_at is None:
                    self.conn_at = now
            elif self.drop_at is not None and self.down_at is None:
                self.down_at = now
                self.noticed += 1
        elif kind == "lost":
            self.lost.append(ev)
        elif kind == "error":
            self.errors.append(ev)
        self.changed.set()

    async def until(self, cond: Any, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while not cond():
            left = end - time.monotonic()
            if left <= 0:
                return False
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), left)
            except asyncio.TimeoutError:
                return cond()
        return True


async def run_client(name: str, args: argparse.Namespace, tree: Path, tmp: Path, herald: Herald,
                     toxi: Toxiproxy) -> dict[str, Any]:
    cmd, cwd = runner_cmd(name, tree, tmp)
    http = httpx.AsyncClient(trust_env=False, timeout=10)
    pname = f"resume-{name}"
    pport = free_port()
    await http.post(f"{toxi.api}/proxies", json={"name": pname, "listen": f"127.0.0.1:{pport}",
                                                 "upstream": f"127.0.0.1:{herald.port}", "enabled": True})
    topic = f"bench.resume.{name}.{args.transport}.{int(time.time())}"
    err = open(tmp / f"{name}.stderr", "wb")
    proc = await asyncio.create_subprocess_exec(*cmd, cwd=cwd, stdin=asyncio.subprocess.PIPE,
                                                stdout=asyncio.subprocess.PIPE, stderr=err, limit=1 << 24)
    assert proc.stdin is not None and proc.stdout is not None
    w = Watch()
    raw = open(tmp / f"{name}.events.jsonl", "w")

    async def read() -> None:
        assert proc.stdout is not None
        while True:
            line = await proc.stdout.readline()
            if not line:
                return
            now = time.monotonic()
            raw.write(f"{now:.6f} {line.decode().rstrip()}\n")
            try:
                w.on(json.loads(line), now)
            except (ValueError, KeyError, TypeError) as e:
                w.errors.append({"event": "bad_line", "reason": repr(e), "line": line[:200].decode("latin-1")})

    reader = asyncio.ensure_future(read())
    proc.stdin.write((json.dumps({
        "cmd": "start", "urls": [f"http://127.0.0.1:{pport}"], "topics": [topic], "patterns": [],
        "transports": [args.transport], "format": "json", "token": None, "cursors": {},
        "heartbeat_ms": args.heartbeat_ms, "backoff_ms": [args.backoff_min_ms, args.backoff_max_ms],
        "stable_ms": args.stable_ms, "open_timeout_ms": 3000, "poll_timeout_ms": 5000}) + "\n").encode())
    await proc.stdin.drain()
    if not await w.until(lambda: w.state == "connected", 30):
        raise RuntimeError(f"{name}: never connected")

    published = 0
    stop_pub = asyncio.Event()

    async def publish() -> None:
        nonlocal published
        t0 = time.monotonic()
        async with httpx.AsyncClient(trust_env=False, timeout=10) as pub:
            while not stop_pub.is_set():
                n = published + 1
                r = await pub.post(f"{herald.admin_url}/v1/publish", json={"topic": topic, "data": {"seq": n}})
                if r.status_code >= 300:
                    raise RuntimeError(f"publish: {r.status_code} {r.text}")
                published = n
                delay = t0 + published / args.rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)

    publisher = asyncio.ensure_future(publish())
    to_conn: list[float] = []
    to_msg: list[float] = []
    to_fresh: list[float] = []
    # A long-poll client holds no connection between polls: a cut there is not even seen (its
    # HTTP pool opens a new connection for the next poll), so for poll the resume measure is
    # the first message published after the drop, seen or not.
    poll = args.transport == "poll"
    timeouts: list[int] = []
    kinds = args.kinds.split(",")
    started = time.monotonic()
    for i in range(args.drops):
        ok = await w.until(lambda: w.state == "connected" and (
            w.drop_at is None or (w.fresh_at is not None and (poll or w.msg_at is not None))), 30)
        if not ok:
            raise RuntimeError(f"{name}: not delivering again 30 s after drop {i}")
        await asyncio.sleep(args.hold)
        kind = kinds[i % len(kinds)]
        w.conn_at = w.msg_at = w.down_at = w.fresh_at = None
        w.after_seq = published
        w.drop_at = time.monotonic()
        if kind == "close":
            await http.post(f"{toxi.api}/proxies/{pname}", json={"enabled": False})
            await http.post(f"{toxi.api}/proxies/{pname}", json={"enabled": True})
        elif kind == "reset":
            await http.post(f"{toxi.api}/proxies/{pname}/toxics",
                            json={"name": "rst", "type": "reset_peer", "stream": "downstream",
                                  "attributes": {"timeout": 0}})
            await w.until(lambda: w.down_at is not None, 10)
            await http.delete(f"{toxi.api}/proxies/{pname}/toxics/rst")
        elif kind == "stall":
            # Nothing flows to the client any more, and nothing closes: it must notice by itself.
            await http.post(f"{toxi.api}/proxies/{pname}/toxics",
                            json={"name": "stall", "type": "timeout", "stream": "downstream",
                                  "attributes": {"timeout": 0}})
            await w.until(lambda: w.down_at is not None, 3 * args.heartbeat_ms / 1000 + 10)
            await http.delete(f"{toxi.api}/proxies/{pname}/toxics/stall")
        else:
            raise SystemExit(f"unknown drop kind {kind}")
        if await w.until(lambda: w.fresh_at is not None and w.state == "connected" and (
                poll or w.msg_at is not None), 30):
            assert w.fresh_at is not None
            to_fresh.append(w.fresh_at - w.drop_at)
            if w.conn_at is not None and w.msg_at is not None:
                to_conn.append(w.conn_at - w.drop_at)
                to_msg.append(w.msg_at - w.drop_at)
        else:
            timeouts.append(i)
        if args.progress and (i + 1) % 100 == 0:
            print(f"  {name}: {i + 1} drops, {w.received} messages", file=sys.stderr, flush=True)
    elapsed = time.monotonic() - started
    stop_pub.set()
    await publisher
    drained = await w.until(lambda: w.expected > published, 30)
    proc.stdin.write(b'{"cmd":"stop"}\n')
    await proc.stdin.drain()
    try:
        await asyncio.wait_for(proc.wait(), 10)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
    await reader
    raw.close()
    err.close()
    await http.delete(f"{toxi.api}/proxies/{pname}")
    await http.aclose()
    ms = lambda xs, p: round(pct(xs, p) * 1000, 1) if xs else None  # noqa: E731
    return {
        "client": name, "transport": args.transport, "drops": args.drops, "kinds": kinds,
        "published": published, "received": w.received, "all_received": drained,
        "missing_at_end": max(0, published - (w.expected - 1)),
        "gaps": w.gaps[:20], "gap_count": len(w.gaps), "dups": w.dups[:20], "dup_count": len(w.dups),
        "id_regressions": w.id_regressions, "lost_events": w.lost[:20], "lost_count": len(w.lost),
        "error_events": len(w.errors), "error_sample": w.errors[:5], "drops_without_resume": timeouts,
        "connected_by_transport": w.transports, "seconds": round(elapsed, 1), "drops_noticed": w.noticed,
        "resubscribed_ms": {"p50": ms(to_conn, 50), "p90": ms(to_conn, 90), "p99": ms(to_conn, 99),
                            "max": ms(to_conn, 100), "mean": round(statistics.mean(to_conn) * 1000, 1) if to_conn else None},
        "first_message_ms": {"p50": ms(to_msg, 50), "p90": ms(to_msg, 90), "p99": ms(to_msg, 99),
                             "max": ms(to_msg, 100), "mean": round(statistics.mean(to_msg) * 1000, 1) if to_msg else None},
        "first_fresh_message_ms": {"p50": ms(to_fresh, 50), "p90": ms(to_fresh, 90), "p99": ms(to_fresh, 99),
                                   "max": ms(to_fresh, 100),
                                   "mean": round(statistics.mean(to_fresh) * 1000, 1) if to_fresh else None},
    }


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", default="python,go,js")
    ap.add_argument("--transport", default="ws", choices=["ws", "sse", "poll"])
    ap.add_argument("--drops", type=int, default=1000)
    ap.add_argument("--kinds", default="close,reset", help="drop kinds, used in turn: close, reset, stall")
    ap.add_argument("--rate", type=float, default=100.0, help="messages published per second")
    ap.add_argument("--hold", type=float, default=0.25, help="seconds of delivery between a resume and the next drop")
    ap.add_argument("--backoff-min-ms", type=int, default=20)
    ap.add_argument("--backoff-max-ms", type=int, default=1000)
    ap.add_argument("--stable-ms", type=int, default=100)
    ap.add_argument("--heartbeat-ms", type=int, default=5000)
    ap.add_argument("--commit", default=None, help="the clients of this commit (default HEAD)")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    ap.add_argument("--progress", action="store_true")
    args = ap.parse_args()
    commit = args.commit or git_commit()
    tmp = scratch("herald-bench-resume-")
    tree = snapshot(commit, tmp / "tree")
    herald = Herald(tmp / "node", {"topics": {"history_len": 10000}})
    toxi = Toxiproxy(tmp / "toxi")
    herald.start()
    toxi.start()
    results = []
    try:
        for name in args.clients.split(","):
            res = await run_client(name, args, tree, tmp, herald, toxi)
            results.append(res)
            print(json.dumps(res), flush=True)
    finally:
        toxi.stop()
        herald.stop()
    doc = {"commit": commit, "machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "args": vars(args), "scratch": str(tmp), "results": results}
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1))
    bad = any(r["gap_count"] or r["dup_count"] or r["lost_count"] or r["missing_at_end"] or r["id_regressions"]
              for r in results)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
