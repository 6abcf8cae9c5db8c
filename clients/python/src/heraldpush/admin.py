"""The admin API (the gateway's admin listener, ``admin.api_keys``): what the application's
backend does — publish, batches, presence, server-side subscriptions, sends, disconnects."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any
from urllib.parse import quote

import httpx

from .errors import HeraldError

__all__ = ["AdminClient"]


class AdminClient:
    """``async with AdminClient("http://127.0.0.1:9090", api_key=KEY) as admin:``

    Every call raises :class:`HeraldError` (the gateway's code, reason and status) when it is
    refused.
    """

    def __init__(self, url: str, *, api_key: str | None = None, timeout: float = 10.0) -> None:
        headers = {"x-api-key": api_key} if api_key else {}
        self._http = httpx.AsyncClient(base_url=url.rstrip("/"), headers=headers, timeout=timeout,
                                       trust_env=False)

    async def __aenter__(self) -> AdminClient:
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        res = await self._http.request(method, path, json=body,
                                       params={k: v for k, v in params.items() if v is not None})
        try:
            o = res.json()
        except ValueError:
            o = None
        if res.status_code >= 300:
            code = o.get("code", "http_error") if isinstance(o, dict) else "http_error"
            reason = o.get("reason", res.text[:200]) if isinstance(o, dict) else res.text[:200]
            raise HeraldError(str(code), str(reason), res.status_code)
        return o

    async def publish(self, topic: str, data: Any, *, event: str | None = None) -> dict[str, str]:
        """``POST /v1/publish``: ``{"id": "<epoch>-<seq>", "topic": ...}``."""
        body: dict[str, Any] = {"topic": topic, "data": data}
        if event is not None:
            body["event"] = event
        answer: dict[str, str] = await self._call("POST", "/v1/publish", body)
        return answer

    async def publish_msgpack(self, packed: bytes) -> dict[str, str]:
        """``POST /v1/publish`` with a MessagePack body (``{topic, data, event?}`` packed)."""
        res = await self._http.post("/v1/publish", content=packed,
                                    headers={"content-type": "application/msgpack"})
        if res.status_code >= 300:
            o = res.json() if res.headers.get("content-type", "").startswith("application/json") else {}
            raise HeraldError(str(o.get("code", "http_error")), str(o.get("reason", res.text[:200])),
                              res.status_code)
        answer: dict[str, str] = res.json()
        return answer

    async def publish_batch(self, messages: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
        """``POST /v1/publish/batch``: one result per message, in order (an id, or a code and
        reason)."""
        o = await self._call("POST", "/v1/publish/batch", {"messages": list(messages)})
        results: list[dict[str, str]] = o["results"]
        return results

    async def history(self, topic: str, *, since: str | None = None, limit: int = 100) -> dict[str, Any]:
        o: dict[str, Any] = await self._call("GET", f"/v1/topics/{quote(topic, safe='')}/history",
                                             since=since, limit=limit)
        return o

    async def presence(self, topic: str, *, members: bool = False, limit: int | None = None,
                       cursor: str | None = None) -> dict[str, Any]:
        """``GET /v1/presence/{topic}``: counts, or with ``members`` a page of members."""
        o: dict[str, Any] = await self._call("GET", f"/v1/presence/{quote(topic, safe='')}",
                                             members="true" if members else None, limit=limit,
                                             cursor=cursor)
        return o

    async def topic(self, topic: str) -> dict[str, Any]:
        o: dict[str, Any] = await self._call("GET", f"/v1/topics/{quote(topic, safe='')}")
        return o

    async def user_connections(self, user: str) -> dict[str, Any]:
        o: dict[str, Any] = await self._call("GET", f"/v1/users/{quote(user, safe='')}/connections")
        return o

    async def subscribe_user(self, user: str, topics: Sequence[str]) -> dict[str, Any]:
        """Server-side subscription of every live connection of ``user``."""
        o: dict[str, Any] = await self._call("POST", f"/v1/users/{quote(user, safe='')}/subscribe",
                                             {"topics": list(topics)})
        return o

    async def unsubscribe_user(self, user: str, topics: Sequence[str]) -> dict[str, Any]:
        o: dict[str, Any] = await self._call("POST", f"/v1/users/{quote(user, safe='')}/unsubscribe",
                                             {"topics": list(topics)})
        return o

    async def send_user(self, user: str, data: Any, *, event: str | None = None) -> dict[str, Any]:
        """A message on the user's personal topic ``user:<user>``."""
        body: dict[str, Any] = {"data": data}
        if event is not None:
            body["event"] = event
        o: dict[str, Any] = await self._call("POST", f"/v1/users/{quote(user, safe='')}/send", body)
        return o

    async def send_connection(self, conn: str, data: Any, *, event: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"data": data}
        if event is not None:
            body["event"] = event
        o: dict[str, Any] = await self._call("POST", f"/v1/connections/{quote(conn, safe='')}/send", body)
        return o

    async def disconnect_user(self, user: str, *, reason: str | None = None,
                              reconnect: bool | None = None) -> dict[str, Any]:
        o: dict[str, Any] = await self._call("POST", f"/v1/users/{quote(user, safe='')}/disconnect",
                                             _disconnect(reason, reconnect))
        return o

    async def disconnect_connection(self, conn: str, *, reason: str | None = None,
                                    reconnect: bool | None = None) -> dict[str, Any]:
        o: dict[str, Any] = await self._call("POST", f"/v1/connections/{quote(conn, safe='')}/disconnect",
                                             _disconnect(reason, reconnect))
        return o


def _disconnect(reason: str | None, reconnect: bool | None) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if reason is not None:
        body["reason"] = reason
    if reconnect is not None:
        body["reconnect"] = reconnect
    return body
