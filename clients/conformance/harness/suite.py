"""The conformance suite's plan: the scenarios, the runners, and playing them all
(clients/conformance/README.md).

All scenarios are played once per session, several at a time (HERALD_CONFORMANCE_JOBS, 3 by
default), every runner of a scenario side by side; each (scenario, runner) pair is then one
test that passes, fails with the lane's failures, or is skipped (runner unavailable here, or
without a capability the scenario needs) or xfailed (a known failure of that client, named in
runners.json with its reason).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from engine import LaneResult, Scenario  # noqa: E402
from infra import REPO, Toxiproxy, herald_binary  # noqa: E402
from runners import RunnerSpec, load_runners  # noqa: E402

SCENARIOS = REPO / "clients" / "conformance" / "scenarios"
WORK = Path(os.environ.get("HERALD_CONFORMANCE_DIR", REPO / "target" / "conformance"))


def scenarios() -> list[tuple[Path, dict[str, Any]]]:
    only = [s for s in os.environ.get("HERALD_CONFORMANCE_SCENARIOS", "").split(",") if s]
    out = []
    for path in sorted(SCENARIOS.glob("*.json")):
        data = json.loads(path.read_text())
        if only and data["name"] not in only:
            continue
        out.append((path, data))
    return out


_RUNNERS: list[RunnerSpec] | None = None


def runners() -> list[RunnerSpec]:
    global _RUNNERS
    if _RUNNERS is None:
        tmp = Path(tempfile.mkdtemp(prefix="herald-conformance-"))
        _RUNNERS = load_runners(tmp)
    return _RUNNERS


def needs(data: dict[str, Any]) -> set[str]:
    needs = set(data.get("requires", []))
    client = data.get("client", {})
    needs.update(client.get("transports", ["ws", "sse", "poll"]))
    if client.get("format") == "msgpack":
        needs.add("msgpack")
    if client.get("patterns"):
        needs.add("patterns")
    for step in data["steps"]:
        if step["do"] == "command":
            needs.add(step["cmd"])
        if step["do"] == "token":
            needs.add("token_refresh")
        if step["do"] == "start" and step.get("cursors"):
            needs.add("start_cursors")
    if client.get("heartbeat_ms"):
        needs.add("heartbeat")
    if client.get("delta"):
        needs.add("delta")
    return needs


async def play_all() -> dict[tuple[str, str], LaneResult]:
    if not herald_binary().exists():
        raise RuntimeError(f"{herald_binary()} is not built (cargo build -p herald-gateway)")
    WORK.mkdir(parents=True, exist_ok=True)
    toxi = Toxiproxy(WORK)
    await toxi.start()
    jobs = asyncio.Semaphore(int(os.environ.get("HERALD_CONFORMANCE_JOBS", "3")))
    results: dict[tuple[str, str], LaneResult] = {}
    summary: list[str] = []

    async def play(path: Path, data: dict[str, Any]) -> None:
        usable = [r for r in runners() if r.unavailable is None
                  and (r.capabilities is None or needs(data) <= r.capabilities)]
        if not usable:
            return
        async with jobs:
            t0 = time.monotonic()
            work = WORK / data["name"]
            work.mkdir(parents=True, exist_ok=True)
            for old in work.glob("*.log"):
                old.unlink()
            out = await Scenario(path, data, toxi, work).run(usable)
            line = (f"{data['name']}: {time.monotonic() - t0:.1f} s "
                    + " ".join(f"{k}={'ok' if v.ok else 'FAIL'}" for k, v in out.items()))
            print(f"[conformance] {line}", file=sys.stderr)
            summary.append(line)
            for name, res in out.items():
                results[(data["name"], name)] = res

    try:
        await asyncio.gather(*(play(p, d) for p, d in scenarios()))
    finally:
        await toxi.stop()
        (WORK / "summary.txt").write_text("\n".join(summary) + "\n")
    return results
