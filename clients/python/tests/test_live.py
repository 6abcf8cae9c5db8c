"""heraldpush against a real node (target/debug/herald, or HERALD_BIN): the admin API client
and the calls of the client beside its connection. Skipped when the binary is not built."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

import heraldpush
from heraldpush import AdminClient, Client, HeraldError, Message, State, StateChanged

REPO = Path(__file__).resolve().parents[3]
BIN = Path(os.environ.get("HERALD_BIN", REPO / "target" / "debug" / "herald"))
KEY = "test-admin-key-0123456789abcdef"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def node() -> Iterator[tuple[str, str]]:
    if not BIN.exists():
        pytest.skip(f"{BIN} is not built")
    port, admin = _port(), _port()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "herald.toml"
        cfg.write_text(f'listen = "127.0.0.1:{port}"\nadmin_listen = "127.0.0.1:{admin}"\n'
                       f'dev = true\nlog_filter = "warn"\n\n[admin]\napi_keys = ["{KEY}"]\n')
        env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
        proc = subprocess.Popen([str(BIN), "--config", str(cfg)], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    if httpx.get(f"http://127.0.0.1:{admin}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("herald did not start")
                time.sleep(0.05)
            yield f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin}"
        finally:
            proc.kill()
            proc.wait()


async def _until(client: Client, pred: object, timeout: float = 10) -> list[heraldpush.Event]:
    seen: list[heraldpush.Event] = []

    async def read() -> list[heraldpush.Event]:
        async for ev in client:
            seen.append(ev)
            if callable(pred) and pred(ev):
                return seen
        raise AssertionError(f"client closed; saw {seen}")

    return await asyncio.wait_for(read(), timeout)


def test_admin_api(node: tuple[str, str]) -> None:
    public, admin_url = node

    async def main() -> None:
        async with AdminClient(admin_url) as anonymous:
            with pytest.raises(HeraldError) as refused:
                await anonymous.publish("a", 1)
            assert refused.value.status == 401
        async with AdminClient(admin_url, api_key=KEY) as admin:
            first = await admin.publish("adm.a", {"n": 1}, event="e")
            assert first["topic"] == "adm.a" and first["id"].endswith("-1")
            results = await admin.publish_batch([{"topic": "adm.a", "data": 2}, {"topic": "bad topic", "data": 3}])
            assert results[0]["id"].endswith("-2") and results[1]["code"] == "bad_topic"
            page = await admin.history("adm.a", limit=10)
            assert [m["data"] for m in page["messages"]] == [{"n": 1}, 2]
            assert (await admin.presence("adm.a"))["topic"] == "adm.a"
            with pytest.raises(HeraldError) as bad:
                await admin.send_user("bad user", {"x": 1})
            assert bad.value.code == "bad_user"
            assert "subscribed_here" in await admin.subscribe_user("nobody", ["adm.a"])
            assert (await admin.send_user("nobody", {"x": 1}))["topic"] == "user:nobody"
            await admin.disconnect_user("nobody", reason="bye", reconnect=False)
            assert isinstance(await admin.user_connections("nobody"), dict)

    asyncio.run(main())


def test_client_publish_history_and_close(node: tuple[str, str]) -> None:
    public, admin_url = node

    async def main() -> None:
        async with Client(public, topics=["live.a"], transports=["ws"]) as client:
            await _until(client, lambda ev: isinstance(ev, StateChanged) and ev.state is State.CONNECTED)
            done = await client.publish("live.a", {"k": "v"})
            got = await _until(client, lambda ev: isinstance(ev, Message))
            assert got[-1] == Message("live.a", done.id, {"k": "v"})
            page = await client.history("live.a", limit=5)
            assert [m.id for m in page.messages] == [done.id]
            assert client.cursor("live.a") == done.id
            with pytest.raises(ValueError):
                client.subscribe("*")
        assert client.state is State.CLOSED
        # Nothing of the client is left running.
        assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []

    asyncio.run(main())


@pytest.mark.parametrize("transport", ["ws", "sse", "poll"])
def test_subscribe_on_a_live_connection(node: tuple[str, str], transport: str) -> None:
    public, admin_url = node

    async def main() -> None:
        topics = [] if transport == "ws" else [f"first.{transport}"]
        async with Client(public, topics=topics, transports=[transport]) as client, \
                AdminClient(admin_url, api_key=KEY) as admin:
            await _until(client, lambda ev: isinstance(ev, StateChanged) and ev.state is State.CONNECTED)
            client.subscribe(f"late.{transport}")
            await asyncio.sleep(0.5)
            sent = await admin.publish(f"late.{transport}", {"late": True})
            got = await _until(client, lambda ev: isinstance(ev, Message))
            assert got[-1] == Message(f"late.{transport}", sent["id"], {"late": True})

    asyncio.run(main())
