"""What a scenario runs against: Herald nodes (the debug binary), Redis when nodes are joined,
one Toxiproxy for the session with a proxy in front of each node, and an HTTP-aware gate in
front of each proxy (it can refuse a transport, as a proxy that blocks WebSocket upgrades
does, and inject a malformed frame into a live stream). Everything listens on 127.0.0.1.

    runner -> gate (HTTP: block ws/sse/poll, inject) -> Toxiproxy (TCP: cut, slow, blackhole) -> node
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[3]
CACHE = Path(os.environ.get("HERALD_ENGINES_CACHE", Path.home() / ".cache" / "herald-engines"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def herald_binary() -> Path:
    return Path(os.environ.get("HERALD_BIN", REPO / "target" / "debug" / "herald"))


def toxiproxy_binary() -> Path | None:
    """Toxiproxy's server, installed as deploy/chaos.sh installs it (go install, cached)."""
    explicit = os.environ.get("HERALD_TOXIPROXY")
    if explicit:
        return Path(explicit)
    cached = CACHE / "toxiproxy" / "bin" / "server"
    if cached.exists():
        return cached
    found = shutil.which("toxiproxy-server")
    return Path(found) if found else None


def install_toxiproxy() -> Path:
    """``go install`` Toxiproxy's server into the engines' cache, as deploy/chaos.sh does."""
    path = toxiproxy_binary()
    if path is not None:
        return path
    if shutil.which("go") is None:
        raise RuntimeError("Toxiproxy is not installed and there is no Go to install it (deploy/chaos.sh)")
    bin_dir = CACHE / "toxiproxy" / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, GOBIN=str(bin_dir))
    import subprocess

    subprocess.run(["go", "install", "github.com/Shopify/toxiproxy/v2/cmd/server@latest"], env=env,
                   check=True, cwd="/tmp")
    return bin_dir / "server"


async def _wait_http(url: str, deadline_s: float, proc: asyncio.subprocess.Process | None = None) -> None:
    end = time.monotonic() + deadline_s
    async with httpx.AsyncClient(trust_env=False, timeout=1) as http:
        while time.monotonic() < end:
            if proc is not None and proc.returncode is not None:
                raise RuntimeError(f"exited with {proc.returncode} before {url} answered")
            with contextlib.suppress(httpx.HTTPError):
                r = await http.get(url)
                if r.status_code < 500:
                    return
            await asyncio.sleep(0.05)
    raise RuntimeError(f"{url} did not answer within {deadline_s} s")


# ---------------------------------------------------------------------------- Redis


class Redis:
    """A Redis for the nodes of multi-node scenarios: the one deploy/engines.sh started
    (HERALD_TEST_REDIS_URL), else a redis-server of our own on a free port."""

    def __init__(self, workdir: Path) -> None:
        self.url = os.environ.get("HERALD_TEST_REDIS_URL", "")
        self._proc: asyncio.subprocess.Process | None = None
        self._workdir = workdir

    @staticmethod
    def available() -> bool:
        return bool(os.environ.get("HERALD_TEST_REDIS_URL")) or shutil.which("redis-server") is not None

    async def start(self) -> None:
        if self.url:
            return
        port = free_port()
        self._workdir.mkdir(parents=True, exist_ok=True)
        self._proc = await asyncio.create_subprocess_exec(
            "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--dir", str(self._workdir), stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        self.url = f"redis://127.0.0.1:{port}"
        for _ in range(200):
            with contextlib.suppress(OSError):
                _, w = await asyncio.open_connection("127.0.0.1", port)
                w.close()
                return
            await asyncio.sleep(0.025)
        raise RuntimeError("redis-server did not start")

    async def stop(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            self._proc.kill()
            await self._proc.wait()


# ---------------------------------------------------------------------------- Herald


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise TypeError(f"no TOML for {value!r}")


def config_toml(config: dict[str, Any]) -> str:
    """A config dict ({"topics": {"history_len": 5}, "dev": true}) as TOML; a table in a table
    is a section of its own ({"namespaces": {"score": {"delta": "fossil"}}}: [namespaces.score])."""
    top = [f"{k} = {_toml(v)}" for k, v in config.items() if not isinstance(v, dict)]
    sections: list[str] = []

    def section(name: str, table: dict[str, Any]) -> None:
        sections.append(f"[{name}]\n" + "\n".join(f"{k} = {_toml(v)}" for k, v in table.items()
                                                   if not isinstance(v, dict)))
        for k, v in table.items():
            if isinstance(v, dict):
                section(f"{name}.{k}", v)

    for k, v in config.items():
        if isinstance(v, dict):
            section(k, v)
    return "\n".join(top) + "\n\n" + "\n\n".join(sections) + "\n"


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


@dataclass
class Node:
    name: str
    config: dict[str, Any]
    workdir: Path
    port: int = field(default_factory=free_port)
    admin_port: int = field(default_factory=free_port)
    proc: asyncio.subprocess.Process | None = None

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    async def start(self) -> None:
        cfg = merge(self.config, {"listen": f"127.0.0.1:{self.port}", "admin_listen": f"127.0.0.1:{self.admin_port}"})
        self.workdir.mkdir(parents=True, exist_ok=True)
        path = self.workdir / f"{self.name}.toml"
        path.write_text(config_toml(cfg))
        log = open(self.workdir / f"{self.name}.log", "ab")
        self.proc = await asyncio.create_subprocess_exec(
            str(herald_binary()), "--config", str(path), stdout=log, stderr=log,
            env={k: v for k, v in os.environ.items() if not k.startswith("HERALD_")} | {"RUST_BACKTRACE": "1"})
        log.close()
        await _wait_http(f"{self.admin_url}/readyz", 20, self.proc)

    async def kill(self, graceful: bool = False) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM if graceful else signal.SIGKILL)
            try:
                await asyncio.wait_for(self.proc.wait(), 15)
            except asyncio.TimeoutError:
                self.proc.kill()
                await self.proc.wait()


# ---------------------------------------------------------------------------- Toxiproxy


class Toxiproxy:
    """One toxiproxy-server for the session; proxies and toxics through its HTTP API."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self._proc: asyncio.subprocess.Process | None = None
        self._workdir = workdir
        self.api = f"http://127.0.0.1:{self.port}"
        self._http: httpx.AsyncClient | None = None

    async def start(self) -> None:
        binary = install_toxiproxy()
        self._workdir.mkdir(parents=True, exist_ok=True)
        log = open(self._workdir / "toxiproxy.log", "ab")
        self._proc = await asyncio.create_subprocess_exec(str(binary), "-host", "127.0.0.1", "-port", str(self.port),
                                                          stdout=log, stderr=log)
        log.close()
        await _wait_http(f"{self.api}/version", 20, self._proc)
        self._http = httpx.AsyncClient(base_url=self.api, trust_env=False, timeout=30)

    async def stop(self) -> None:
        if self._http is not None:
            await self._http.aclose()
        if self._proc is not None and self._proc.returncode is None:
            self._proc.terminate()
            await self._proc.wait()

    async def _call(self, method: str, path: str, body: Any = None) -> Any:
        assert self._http is not None
        r = await self._http.request(method, path, json=body)
        if r.status_code >= 300:
            raise RuntimeError(f"toxiproxy {method} {path}: {r.status_code} {r.text}")
        return r.json() if r.content else None

    async def proxy(self, name: str, upstream_port: int) -> int:
        port = free_port()
        await self._call("POST", "/proxies", {"name": name, "listen": f"127.0.0.1:{port}",
                                              "upstream": f"127.0.0.1:{upstream_port}", "enabled": True})
        return port

    async def delete(self, name: str) -> None:
        with contextlib.suppress(RuntimeError):
            await self._call("DELETE", f"/proxies/{name}")

    async def enable(self, name: str, enabled: bool) -> None:
        await self._call("POST", f"/proxies/{name}", {"enabled": enabled})

    async def add_toxic(self, proxy: str, toxic: dict[str, Any]) -> None:
        await self._call("POST", f"/proxies/{proxy}/toxics", toxic)

    async def remove_toxic(self, proxy: str, name: str) -> None:
        await self._call("DELETE", f"/proxies/{proxy}/toxics/{name}")


# ---------------------------------------------------------------------------- the gate


@dataclass(eq=False)
class _Link:
    kind: str
    writer: asyncio.StreamWriter
    chunked: bool = False
    head_seen: bool = False


class Gate:
    """An HTTP/1.1-aware TCP proxy: reads each request's head to see what it is (a WebSocket
    upgrade, an SSE stream, a poll, anything else) and refuses the blocked kinds with 502
    (what a proxy that forbids them answers); everything else is copied byte for byte.
    ``inject`` writes a malformed frame into the live WebSocket and SSE streams."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.blocked: set[str] = set()
        self.port = 0
        self._server: asyncio.AbstractServer | None = None
        self._links: set[_Link] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        #: Cleared: the gate stops reading from the node (a client that stops reading).
        self.flowing = asyncio.Event()
        self.flowing.set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, limit=1 << 20)
        self.port = self._server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self.cut()
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(BaseException):
                await t

    def cut(self, kinds: Iterable[str] | None = None) -> None:
        """Drops the live connections (of these kinds)."""
        for link in list(self._links):
            if kinds is None or link.kind in kinds:
                with contextlib.suppress(Exception):
                    link.writer.transport.abort()

    def inject(self, kinds: Iterable[str]) -> int:
        """Writes a malformed frame into each live stream of these kinds; how many got one."""
        n = 0
        for link in list(self._links):
            if link.kind == "ws" and "ws" in kinds:
                payload = b'{"type":"message","topic":'
                link.writer.write(bytes([0x81, len(payload)]) + payload)
                n += 1
            elif link.kind == "sse" and "sse" in kinds:
                payload = b'data: {"type":"message","topic":\n\n'
                link.writer.write(b"%x\r\n%s\r\n" % (len(payload), payload) if link.chunked else payload)
                n += 1
        return n

    async def _handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        link = _Link("other", cwriter)
        try:
            try:
                ureader, uwriter = await asyncio.open_connection("127.0.0.1", self.upstream_port, limit=1 << 20)
            except OSError:
                cwriter.transport.abort()
                return
            self._links.add(link)
            down = asyncio.ensure_future(self._down(ureader, cwriter, link))
            try:
                await self._up(creader, uwriter, cwriter, link)
            finally:
                down.cancel()
                uwriter.transport.abort()
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            self._links.discard(link)
            cwriter.transport.abort()
            self._tasks.discard(task)

    async def _up(self, creader: asyncio.StreamReader, uwriter: asyncio.StreamWriter,
                  cwriter: asyncio.StreamWriter, link: _Link) -> None:
        while True:
            try:
                head = await creader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return
            lines = head.decode("latin-1").split("\r\n")
            path = lines[0].split(" ")[1] if len(lines[0].split(" ")) > 1 else ""
            headers = {}
            for line in lines[1:]:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
            upgrade = headers.get("upgrade", "").lower() == "websocket"
            kind = "ws" if upgrade else "sse" if path.startswith("/v1/sse") else "poll" if path.startswith("/v1/poll") else "other"
            if kind in self.blocked:
                cwriter.write(b"HTTP/1.1 502 Bad Gateway\r\ncontent-type: application/json\r\n"
                              b"content-length: 54\r\nconnection: close\r\n\r\n"
                              b'{"code":"blocked","reason":"blocked by the test proxy"}')
                await cwriter.drain()
                return
            link.kind = kind
            uwriter.write(head)
            length = int(headers.get("content-length", "0") or 0)
            if length:
                uwriter.write(await creader.readexactly(length))
            await uwriter.drain()
            if upgrade or kind == "sse" or headers.get("transfer-encoding"):
                # From here on a stream: copied as it is.
                while True:
                    data = await creader.read(65536)
                    if not data:
                        return
                    uwriter.write(data)
                    await uwriter.drain()

    async def _down(self, ureader: asyncio.StreamReader, cwriter: asyncio.StreamWriter, link: _Link) -> None:
        while True:
            await self.flowing.wait()
            data = await ureader.read(65536)
            if not data:
                cwriter.transport.abort()
                return
            if link.kind == "sse" and not link.head_seen:
                head = data.split(b"\r\n\r\n", 1)[0].lower()
                link.chunked = b"transfer-encoding: chunked" in head
                link.head_seen = True
            cwriter.write(data)
            await cwriter.drain()
