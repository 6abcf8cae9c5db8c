"""Plays one scenario (clients/conformance/scenarios/*.json) against every runner at once.

The scenario's nodes, proxies and gates are made once; each runner gets a *lane*: its own
runner process and its own topics (``{r}`` in a topic is the runner's name), so the runners
share the faults and not the messages. Steps run in order: infrastructure steps once, runner
steps in every lane side by side. At the end each lane is checked: every message delivered
once, in order, with the data published, none missing unless a loss signal explains it.
The step and expectation vocabulary is described in clients/conformance/README.md.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import msgpack

from infra import Gate, Node, Redis, Toxiproxy, merge
from runners import RunnerProc, RunnerSpec, StepFailed

SECRET = "conformance-secret-0123456789abcdef"

BASE_CONFIG: dict[str, Any] = {
    "dev": True,
    "log_filter": "warn",
    "sse": {"min_heartbeat": "1s"},
    "ws": {"min_ping_interval": "1s"},
    "poll": {"timeout": "5s"},
    "shutdown": {"grace": "2s"},
}

INFRA_STEPS = {"pause", "resume", "block", "unblock", "cut", "proxy", "toxic", "untoxic", "inject", "kill_node", "start_node", "sleep"}


def jwt(claims: dict[str, Any]) -> str:
    def b64(b: bytes) -> str:
        return base64.urlsafe_b64encode(b).rstrip(b"=").decode()

    head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64(json.dumps(claims).encode())
    sig = hmac.new(SECRET.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(sig)}"


def _seq(cursor: str) -> tuple[str, int]:
    epoch, _, seq = cursor.rpartition("-")
    return epoch, int(seq)


def _state(topic: str, k: int) -> dict[str, Any]:
    """Message k of a topic carrying the full state of something that changes a little each
    time (a score sheet): what delta compression is for. Each message differs from the one
    before in a few numbers and a short non-ASCII text; the rest stays."""
    return {
        "match": topic, "n": k, "score": [k // 3, k // 5], "clock": f"{k // 60:02d}:{k % 60:02d}",
        "venue": "Estádio — «héllo ✓»",
        "players": [{"id": i, "name": f"player-{i}", "goals": (k + i) // 7 if i == k % 22 else i // 7,
                     "cards": [], "active": i % 2 == 0} for i in range(22)],
        "ratio": k / 8,
        # Changing non-ASCII text: a delta's inserts may start or end inside a multi-byte
        # character, and must still reach the client as the bytes published.
        "status": ["⚽ goal", "🟨 card", "🟥 off"][k % 3] + " " + "é" * (k % 4),
    }


def _json_form(value: Any) -> Any:
    """What a JSON reader sees of a MessagePack value (bin as base64)."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, dict):
        return {k: _json_form(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_form(v) for v in value]
    return value


@dataclass
class Published:
    id: str
    data: Any
    at: float


@dataclass
class Lane:
    spec: RunnerSpec
    proc: RunnerProc
    published: dict[str, list[Published]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    labels: dict[str, dict[str, int]] = field(default_factory=dict)
    reported_cursors: dict[str, str] = field(default_factory=dict)
    #: Events of runner processes that were stopped and replaced (checked with the rest).
    old_events: list[Any] = field(default_factory=list)
    failed_step: bool = False
    #: Topics published to that the client must never deliver.
    unseen: set[str] = field(default_factory=set)
    #: Where `wait_*` steps start looking (the `mark` step; 0: from the runner's start).
    mark: int = 0

    def sub(self, value: Any) -> Any:
        if isinstance(value, str):
            return value.replace("{r}", self.spec.name)
        if isinstance(value, list):
            return [self.sub(v) for v in value]
        if isinstance(value, dict):
            return {self.sub(k): self.sub(v) for k, v in value.items()}
        return value


@dataclass
class LaneResult:
    ok: bool
    failures: list[str]
    messages: int
    seconds: float


class Scenario:
    def __init__(self, path: Path, data: dict[str, Any], toxi: Toxiproxy, workdir: Path) -> None:
        self.path = path
        self.s = data
        self.name: str = data["name"]
        self.toxi = toxi
        self.workdir = workdir
        self.nodes: list[Node] = []
        self.gates: list[Gate] = []
        self.proxies: list[str] = []
        self.redis: Redis | None = None
        self.http = httpx.AsyncClient(trust_env=False, timeout=10)
        self.lanes: list[Lane] = []
        self.counter: dict[str, int] = {}

    # ------------------------------------------------------------------ set-up

    async def _setup(self) -> None:
        n = int(self.s.get("nodes", 1))
        config = merge(BASE_CONFIG, self.s.get("config", {}))
        if self.s.get("auth"):
            config = merge(config, {"auth": {"hs256_secret": SECRET, **self.s["auth"]}})
        if n > 1 or self.s.get("redis"):
            self.redis = Redis(self.workdir / "redis")
            await self.redis.start()
        for i in range(n):
            cfg = dict(config)
            if self.redis is not None:
                cfg = merge(cfg, {"cluster": {"node_id": f"{self.name[:40]}-n{i}", "redis_url": self.redis.url,
                                              "redis_prefix": f"conf-{self.name}-{time.time_ns()}"}})
            self.nodes.append(Node(f"n{i}", cfg, self.workdir))
        # Nodes of a cluster share a redis_prefix: give them the first node's.
        if self.redis is not None:
            prefix = self.nodes[0].config["cluster"]["redis_prefix"]
            for node in self.nodes:
                node.config["cluster"]["redis_prefix"] = prefix
        await asyncio.gather(*(node.start() for node in self.nodes))
        for i, ni in enumerate(self.s.get("urls", list(range(n)))):
            name = f"{self.name}-u{i}-{time.time_ns()}"
            port = await self.toxi.proxy(name, self.nodes[ni].port)
            self.proxies.append(name)
            gate = Gate(port)
            await gate.start()
            self.gates.append(gate)

    async def _teardown(self) -> None:
        for gate in self.gates:
            await gate.stop()
        for name in self.proxies:
            await self.toxi.delete(name)
        await asyncio.gather(*(node.kill() for node in self.nodes))
        if self.redis is not None:
            await self.redis.stop()
        await self.http.aclose()

    # ------------------------------------------------------------------ running

    async def run(self, runners: list[RunnerSpec]) -> dict[str, LaneResult]:
        started = time.monotonic()
        results: dict[str, LaneResult] = {}
        # The lanes first: a set-up that fails (a node refusing its configuration) is each
        # lane's failure, with the reason, not a scenario silently not played.
        for spec in runners:
            proc = RunnerProc(spec, self.workdir / f"runner-{spec.name}.log")
            self.lanes.append(Lane(spec, proc))
        try:
            await self._setup()
            for step in self.s["steps"]:
                await self._step(step)
            await asyncio.gather(*(self._finish(lane) for lane in self.lanes))
        except Exception:
            tb = traceback.format_exc()
            for lane in self.lanes:
                lane.failures.append(f"harness error: {tb}")
            for lane in self.lanes:
                await lane.proc.stop(2)
        finally:
            await self._teardown()
        seconds = time.monotonic() - started
        for lane in self.lanes:
            msgs = sum(1 for e in lane.old_events + lane.proc.events if e.obj.get("event") == "message")
            results[lane.spec.name] = LaneResult(not lane.failures, lane.failures, msgs, seconds)
        return results

    async def _step(self, step: dict[str, Any]) -> None:
        do = step["do"]
        if do in INFRA_STEPS:
            await self._infra(step)
            return
        await asyncio.gather(*(self._lane_step(lane, step) for lane in self.lanes if not lane.failed_step))

    async def _infra(self, step: dict[str, Any]) -> None:
        do = step["do"]
        url = int(step.get("url", 0))
        if do == "sleep":
            await asyncio.sleep(float(step["s"]))
        elif do == "block":
            self.gates[url].blocked.update(step.get("kinds", ["ws", "sse", "poll"]))
            if step.get("cut", True):
                self.gates[url].cut(step.get("kinds", ["ws", "sse", "poll"]))
        elif do == "unblock":
            self.gates[url].blocked.difference_update(step.get("kinds", ["ws", "sse", "poll", "other"]))
        elif do == "cut":
            self.gates[url].cut(step.get("kinds"))
        elif do == "pause":
            self.gates[url].flowing.clear()
        elif do == "resume":
            self.gates[url].flowing.set()
        elif do == "proxy":
            await self.toxi.enable(self.proxies[url], bool(step["enabled"]))
        elif do == "toxic":
            await self.toxi.add_toxic(self.proxies[url], step["toxic"])
        elif do == "untoxic":
            await self.toxi.remove_toxic(self.proxies[url], step["name"])
        elif do == "inject":
            n = self.gates[url].inject(step.get("kinds", ["ws", "sse"]))
            if n == 0:
                for lane in self.lanes:
                    lane.failures.append("inject: no live stream to inject into")
        elif do == "kill_node":
            await self.nodes[int(step.get("node", 0))].kill(graceful=bool(step.get("graceful", False)))
        elif do == "start_node":
            await self.nodes[int(step.get("node", 0))].start()

    async def _lane_step(self, lane: Lane, step: dict[str, Any]) -> None:
        try:
            await self._do(lane, lane.sub(step))
        except StepFailed as e:
            lane.failures.append(f"step {json.dumps(step)}: {e}")
            lane.failed_step = True
        except Exception as e:
            lane.failures.append(f"step {json.dumps(step)}: harness error {e!r}")
            lane.failed_step = True

    def _mark(self, lane: Lane, step: dict[str, Any]) -> int:
        return 0 if step.get("since") == "start" else lane.mark

    async def _do(self, lane: Lane, step: dict[str, Any]) -> None:
        do = step["do"]
        timeout = float(step.get("timeout_s", 15))
        proc = lane.proc
        if do == "start":
            await self._start_runner(lane, step)
        elif do == "mark":
            lane.mark = len(proc.events)
        elif do == "wait_state":
            state, transport = step.get("state", "connected"), step.get("transport")
            await proc.wait_for(
                lambda e: e.get("event") == "state" and e.get("state") == state
                and (transport is None or e.get("transport") == transport),
                self._mark(lane, step), timeout, f"state {state} {transport or ''}")
        elif do == "wait_lost":
            topic, reason = step["topic"], step.get("reason")
            await proc.wait_for(lambda e: e.get("event") == "lost" and e.get("topic") == topic
                                and (reason is None or e.get("reason") == reason),
                                self._mark(lane, step), timeout, f"lost {topic} {reason}")
        elif do == "wait_error":
            code = step.get("code")
            await proc.wait_for(lambda e: e.get("event") == "error" and e.get("ref") is None
                                and (code is None or e.get("code") == code),
                                self._mark(lane, step), timeout, f"an error event {code or ''}")
        elif do == "publish":
            await self._publish(lane, step)
        elif do == "wait_messages":
            await self._wait_messages(lane, step, timeout)
        elif do == "label":
            lane.labels[step["name"]] = {t: len(p) for t, p in lane.published.items()}
        elif do == "command":
            await self._command(lane, step, timeout)
        elif do == "token":
            await proc.send({"cmd": "token", "token": self._token(lane, step)})
        elif do == "admin":
            await self._admin(lane, step)
        elif do == "stop_runner":
            problem = await proc.stop()
            if problem:
                raise StepFailed(problem)
            lane.old_events.extend(proc.events)
        elif do == "lane_sleep":
            await asyncio.sleep(float(step["s"]))
        else:
            raise StepFailed(f"unknown step {do!r}")

    # ------------------------------------------------------------------ steps

    def _token(self, lane: Lane, step: dict[str, Any]) -> str:
        claims = dict(step.get("claims", {}))
        claims.setdefault("sub", f"user-{lane.spec.name}")
        claims["exp"] = int(time.time() + float(step.get("ttl_s", 600)))
        return jwt(claims)

    async def _start_runner(self, lane: Lane, step: dict[str, Any]) -> None:
        c = lane.sub(self.s["client"])
        if lane.proc.events or lane.proc.alive:
            lane.proc = RunnerProc(lane.spec, self.workdir / f"runner-{lane.spec.name}.log")
        token = None
        if c.get("token") is not None:
            token = self._token(lane, c["token"])
        cursors: dict[str, str] = {}
        if step.get("cursors") == "reported":
            cursors = dict(lane.reported_cursors)
        cmd = {
            "cmd": "start",
            "urls": [g.url for g in self.gates] if "url_order" not in c else [self.gates[i].url for i in c["url_order"]],
            "topics": c.get("topics", []),
            "patterns": c.get("patterns", []),
            "transports": c.get("transports", ["ws", "sse", "poll"]),
            "format": c.get("format", "json"),
            "token": token,
            "cursors": cursors,
            "heartbeat_ms": c.get("heartbeat_ms"),
            "backoff_ms": c.get("backoff_ms", [50, 500]),
        }
        for k in ("open_timeout_ms", "upgrade_ms", "stable_ms", "poll_timeout_ms", "token_margin_ms", "delta", "batch"):
            if k in c:
                cmd[k] = c[k]
        await lane.proc.start()
        await lane.proc.send(cmd)
        lane.mark = 0

    async def _publish(self, lane: Lane, step: dict[str, Any]) -> None:
        """``count`` messages to ``topic`` (or to each of ``topics``, interleaved), one request
        each, or with ``batch`` in requests to ``POST /v1/publish/batch`` of ``batch_size``
        messages at most (default: all of them in one)."""
        topics = list(step["topics"]) if "topics" in step else [step["topic"]]
        node = self.nodes[int(step.get("node", 0))]
        count = int(step.get("count", 1))
        fmt = step.get("format", "json")
        bodies: list[tuple[str, dict[str, Any]]] = []
        for _ in range(count):
            for topic in topics:
                k = self.counter.get(topic, 0) + 1
                self.counter[topic] = k
                data: Any = {"n": k, "topic": topic, "text": "héllo ✓", "list": [1, 2.5, None, True]}
                if step.get("payload") == "state":
                    data = _state(topic, k)
                if "data" in step:
                    data = step["data"]
                if fmt == "msgpack":
                    data = {"n": k, "topic": topic, "nested": {"a": [1, -2, 3.25]}, "big": 2 ** 40}
                body: dict[str, Any] = {"topic": topic, "data": data}
                if step.get("event"):
                    body["event"] = step["event"]
                bodies.append((topic, body))
        size = int(step.get("batch_size", len(bodies))) if step.get("batch") else 1
        for at in range(0, len(bodies), max(1, size)):
            chunk = bodies[at:at + max(1, size)]
            if step.get("batch"):
                path, payload = "/v1/publish/batch", {"messages": [b for _, b in chunk]}
            else:
                path, payload = "/v1/publish", chunk[0][1]
            if fmt == "msgpack":
                r = await self.http.post(f"{node.admin_url}{path}", content=msgpack.packb(payload),
                                         headers={"content-type": "application/msgpack"})
            else:
                r = await self.http.post(f"{node.admin_url}{path}", json=payload)
            if r.status_code != 200:
                raise StepFailed(f"publish to {', '.join(topics)} on {node.name}: {r.status_code} {r.text[:300]}")
            answers = r.json()["results"] if step.get("batch") else [r.json()]
            if len(answers) != len(chunk):
                raise StepFailed(f"publish batch of {len(chunk)}: {len(answers)} results")
            now = time.monotonic()
            for (topic, body), answer in zip(chunk, answers):
                if "id" not in answer:
                    raise StepFailed(f"publish to {topic} on {node.name} (in a batch): {answer}")
                if step.get("unseen"):
                    # Published where the client must not see it (a topic its patterns do not match).
                    lane.unseen.add(topic)
                    continue
                lane.published.setdefault(topic, []).append(Published(answer["id"], _json_form(body["data"]), now))
            if step.get("interval_s"):
                await asyncio.sleep(float(step["interval_s"]))

    def _delivered(self, lane: Lane) -> list[dict[str, Any]]:
        return [e.obj for e in lane.old_events + lane.proc.events if e.obj.get("event") == "message"]

    async def _wait_messages(self, lane: Lane, step: dict[str, Any], timeout: float) -> None:
        topic = step["topic"]
        since = lane.labels.get(step["since_label"], {}).get(topic, 0) if "since_label" in step else 0
        want = {p.id for p in lane.published.get(topic, [])[since:]}
        deadline = time.monotonic() + timeout
        while True:
            got = {m["id"] for m in self._delivered(lane) if m.get("topic") == topic}
            missing = want - got
            if not missing:
                return
            if time.monotonic() > deadline:
                raise StepFailed(f"{len(missing)} of {len(want)} messages of {topic} not delivered within "
                                 f"{timeout:g} s (e.g. {sorted(missing)[:3]})")
            await asyncio.sleep(0.05)

    async def _command(self, lane: Lane, step: dict[str, Any], timeout: float) -> None:
        cmd = {k: v for k, v in step.items()
               if k not in ("do", "expect", "error_code", "timeout_s", "since", "deltas_min", "delta_failures_max",
                             "batches_min", "batches_max")}
        answer = await lane.proc.request(cmd, timeout)
        expect = step.get("expect")
        if cmd["cmd"] == "publish":
            if expect == "error":
                if answer.get("event") != "error":
                    raise StepFailed(f"publish should have been refused, got {answer}")
                if step.get("error_code") and answer.get("code") != step["error_code"]:
                    raise StepFailed(f"publish refused with {answer.get('code')}, not {step['error_code']}")
                return
            if answer.get("event") != "published":
                raise StepFailed(f"publish through the client: {answer}")
            lane.published.setdefault(cmd["topic"], []).append(
                Published(str(answer.get("id")), cmd.get("data"), time.monotonic()))
        elif cmd["cmd"] == "history":
            if answer.get("event") != "history":
                raise StepFailed(f"history: {answer}")
            want = [(p.id, p.data) for p in lane.published.get(cmd["topic"], [])[-int(cmd["limit"]):]]
            got = [(m.get("id"), m.get("data")) for m in answer.get("messages", [])]
            if got != want:
                raise StepFailed(f"history of {cmd['topic']}: got {got}, want the last published {want}")
        elif cmd["cmd"] == "stats":
            # The client's counters: that deltas came and were applied, how many did not
            # apply, and that batch frames came (a runner that reports no `batches` fails a
            # `batches_min`).
            if answer.get("event") != "stats":
                raise StepFailed(f"stats: {answer}")
            batches = int(answer.get("batches", -1))
            if "batches_min" in step and batches < int(step["batches_min"]):
                raise StepFailed(f"{answer.get('batches')} batch frames received, at least "
                                 f"{step['batches_min']} expected ({answer})")
            if "batches_max" in step and not 0 <= batches <= int(step["batches_max"]):
                raise StepFailed(f"{answer.get('batches')} batch frames received, at most "
                                 f"{step['batches_max']} expected ({answer})")
            deltas, failures = int(answer.get("deltas", -1)), int(answer.get("delta_failures", -1))
            if "deltas_min" in step and deltas < int(step["deltas_min"]):
                raise StepFailed(f"{deltas} deltas applied, at least {step['deltas_min']} expected ({answer})")
            if "delta_failures_max" in step and not 0 <= failures <= int(step["delta_failures_max"]):
                raise StepFailed(f"{failures} deltas did not apply, at most {step['delta_failures_max']} expected")
        elif cmd["cmd"] == "cursors":
            if answer.get("event") != "cursors":
                raise StepFailed(f"cursors: {answer}")
            lane.reported_cursors = dict(answer.get("cursors") or {})
            for topic, pubs in lane.published.items():
                if pubs and lane.reported_cursors.get(topic) != pubs[-1].id:
                    raise StepFailed(f"cursor of {topic} is {lane.reported_cursors.get(topic)}, "
                                     f"not the last message {pubs[-1].id}")

    async def _admin(self, lane: Lane, step: dict[str, Any]) -> None:
        node = self.nodes[int(step.get("node", 0))]
        r = await self.http.request(step.get("method", "POST"), f"{node.admin_url}{step['path']}",
                                    json=step.get("body"))
        if r.status_code != 200:
            raise StepFailed(f"admin {step['path']}: {r.status_code} {r.text}")
        if step.get("published_topic"):
            lane.published.setdefault(step["published_topic"], []).append(
                Published(r.json()["id"], step["body"]["data"], time.monotonic()))

    # ------------------------------------------------------------------ checks

    async def _finish(self, lane: Lane) -> None:
        problem = await lane.proc.stop()
        if problem and not lane.failed_step:
            lane.failures.append(problem)
        events = lane.old_events + lane.proc.events
        t0 = events[0].at if events else 0.0
        with open(self.workdir / f"events-{lane.spec.name}.jsonl", "w") as f:
            for e in events:
                f.write(f"{e.at - t0:8.3f} {json.dumps(e.obj)}\n")
        if lane.proc.bad_lines:
            lane.failures.append(f"stdout lines that are not events: {lane.proc.bad_lines[:3]}")
        expect = lane.sub(self.s.get("expect", {}))
        # Loss signals: the expected ones arrived, no other.
        lost = [(e.obj.get("topic"), e.obj.get("reason"), e.at) for e in events if e.obj.get("event") == "lost"]
        for want in expect.get("lost", []):
            if not any(t == want["topic"] and (want.get("reason") is None or r == want["reason"]) for t, r, _ in lost):
                lane.failures.append(f"no loss signal {want}")
        if not expect.get("lost_allowed", bool(expect.get("lost"))) and lost:
            lane.failures.append(f"unexpected loss signals: {[(t, r) for t, r, _ in lost][:5]}")
        # Per topic: once, in order, as published.
        seen: dict[str, tuple[str, int]] = {}
        published = {(t, p.id): p for t, ps in lane.published.items() for p in ps}
        for e in events:
            o = e.obj
            if o.get("event") == "lost":
                seen.pop(str(o.get("topic")), None)
                continue
            if o.get("event") != "message":
                continue
            topic, mid = str(o.get("topic")), str(o.get("id"))
            if topic in lane.unseen:
                lane.failures.append(f"{topic}: delivered, but the client did not subscribe to it")
                continue
            try:
                pos = _seq(mid)
            except ValueError:
                lane.failures.append(f"message id {mid!r} of {topic} is not <epoch>-<seq>")
                continue
            prev = seen.get(topic)
            if prev is not None and prev[0] == pos[0] and pos[1] <= prev[1]:
                lane.failures.append(f"{topic}: {mid} delivered after {prev[0]}-{prev[1]} (a duplicate or reorder)")
            seen[topic] = pos
            p = published.get((topic, mid))
            if p is None:
                if topic in lane.published or not expect.get("foreign_topics_allowed", False):
                    lane.failures.append(f"{topic}: message {mid} was never published by the scenario")
            elif o.get("data") != p.data:
                lane.failures.append(f"{topic} {mid}: data {o.get('data')!r} is not the published {p.data!r}")
        # Nothing missing, unless a loss signal for the topic came after it was published.
        if expect.get("all_delivered", True):
            got = {(str(o.get("topic")), str(o.get("id"))) for o in self._delivered(lane)}
            for topic, pubs in lane.published.items():
                last_lost = max((at for t, _, at in lost if t == topic or (t or "").endswith("*")), default=None)
                missing = [p.id for p in pubs if (topic, p.id) not in got and (last_lost is None or p.at > last_lost)]
                if missing:
                    lane.failures.append(f"{topic}: {len(missing)} of {len(pubs)} published messages never delivered "
                                         f"(e.g. {missing[:3]})")
        states = [e.obj for e in events if e.obj.get("event") == "state"]
        for want in expect.get("transports_seen", []):
            if not any(s.get("state") == "connected" and s.get("transport") == want for s in states):
                lane.failures.append(f"never connected over {want}")
        for bad in expect.get("transports_never", []):
            if any(s.get("state") == "connected" and s.get("transport") == bad for s in states):
                lane.failures.append(f"connected over {bad}, which the scenario forbids")
        if "max_connects" in expect:
            n = sum(1 for s in states if s.get("state") == "connected")
            if n > int(expect["max_connects"]):
                lane.failures.append(f"connected {n} times, at most {expect['max_connects']} expected")
        if "max_disconnects" in expect:
            n = sum(1 for s in states if s.get("state") == "disconnected")
            if n > int(expect["max_disconnects"]):
                lane.failures.append(f"{n} disconnects, at most {expect['max_disconnects']} expected")
        if expect.get("errors_min"):
            n = sum(1 for e in events if e.obj.get("event") == "error" and e.obj.get("ref") is None)
            if n < int(expect["errors_min"]):
                lane.failures.append(f"{n} error events, at least {expect['errors_min']} expected")
