"""The runners the harness drives (clients/conformance/runners.json), and one runner process
speaking the contract of clients/conformance/RUNNER.md."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from infra import REPO

CONFIG = REPO / "clients" / "conformance" / "runners.json"


@dataclass
class RunnerSpec:
    name: str
    cmd: list[str]
    cwd: Path
    #: What the client can do; a scenario that requires more is skipped for it. None: all.
    capabilities: set[str] | None
    #: Scenario name -> why this client is known to fail it (an xfail, not a pass).
    known_failures: dict[str, str] = field(default_factory=dict)
    #: Why it cannot run here (missing toolchain, not built), or None.
    unavailable: str | None = None


def _expand(s: str, tmp: Path) -> str:
    return s.replace("{repo}", str(REPO)).replace("{tmp}", str(tmp)).replace("{python}", sys.executable)


def load_runners(tmp: Path) -> list[RunnerSpec]:
    """Every runner of runners.json, HERALD_CONFORMANCE_RUNNERS (comma-separated names) to
    pick some. A runner whose toolchain or sources are missing is listed as unavailable; one
    with a ``build`` step is built first (into ``tmp``)."""
    raw: dict[str, Any] = json.loads(CONFIG.read_text())
    wanted = [n for n in os.environ.get("HERALD_CONFORMANCE_RUNNERS", "").split(",") if n]
    out = []
    for name, r in raw["runners"].items():
        if wanted and name not in wanted:
            continue
        cwd = REPO / r.get("cwd", ".")
        spec = RunnerSpec(name, [_expand(c, tmp) for c in r["cmd"]], cwd,
                          set(r["capabilities"]) if "capabilities" in r else None,
                          dict(r.get("known_failures", {})))
        for tool in r.get("needs_tools", []):
            if shutil.which(tool) is None:
                spec.unavailable = f"no {tool} on PATH"
        for p in r.get("needs_paths", []):
            if not (REPO / p).exists():
                spec.unavailable = spec.unavailable or f"{p} does not exist"
        if spec.unavailable is None and r.get("build"):
            build = subprocess.run([_expand(c, tmp) for c in r["build"]], cwd=cwd, capture_output=True,
                                   text=True, timeout=600)
            if build.returncode != 0:
                spec.unavailable = f"build failed: {build.stderr[-2000:]}"
        out.append(spec)
    return out


@dataclass
class RunnerEvent:
    at: float
    obj: dict[str, Any]


class RunnerProc:
    """One runner process: commands to its stdin, events from its stdout, recorded in order."""

    def __init__(self, spec: RunnerSpec, log_path: Path) -> None:
        self.spec = spec
        self.events: list[RunnerEvent] = []
        self.bad_lines: list[str] = []
        self._log_path = log_path
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        self._ref = 0

    async def start(self) -> None:
        log = open(self._log_path, "ab")
        self._proc = await asyncio.create_subprocess_exec(
            *self.spec.cmd, cwd=self.spec.cwd, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=log, limit=1 << 24, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        log.close()
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        while True:
            line = await self._proc.stdout.readline()
            if not line:
                break
            try:
                obj = json.loads(line)
                if not isinstance(obj, dict) or "event" not in obj:
                    raise ValueError("not an event object")
            except ValueError:
                self.bad_lines.append(line.decode("utf-8", "replace")[:200])
                continue
            self.events.append(RunnerEvent(time.monotonic(), obj))
            self._changed.set()
        self._changed.set()

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.returncode is None and not (self._reader and self._reader.done())

    async def send(self, cmd: dict[str, Any]) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write((json.dumps(cmd) + "\n").encode())
        await self._proc.stdin.drain()

    async def wait_for(self, pred: Callable[[dict[str, Any]], bool], since: int, timeout: float,
                       what: str) -> int:
        """The index of the first event at or after ``since`` that ``pred`` accepts."""
        deadline = time.monotonic() + timeout
        i = since
        while True:
            while i < len(self.events):
                if pred(self.events[i].obj):
                    return i
                i += 1
            left = deadline - time.monotonic()
            if left <= 0:
                raise StepFailed(f"timed out after {timeout:g} s waiting for {what}")
            if self._reader is not None and self._reader.done():
                raise StepFailed(f"the runner exited while waiting for {what}")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except asyncio.TimeoutError:
                pass

    async def request(self, cmd: dict[str, Any], timeout: float) -> dict[str, Any]:
        self._ref += 1
        ref = f"r{self._ref}"
        mark = len(self.events)
        await self.send(dict(cmd, ref=ref))
        i = await self.wait_for(lambda e: e.get("ref") == ref, mark, timeout, f"the answer to {cmd['cmd']}")
        return self.events[i].obj

    async def stop(self, timeout: float = 10) -> str | None:
        """Sends ``stop``; None when the runner said ``closed`` and exited 0 in time, else why not."""
        if self._proc is None:
            return None
        problem = None
        try:
            if self._proc.returncode is None:
                mark = len(self.events)
                await self.send({"cmd": "stop"})
                await self.wait_for(lambda e: e.get("event") == "closed", mark, timeout, "closed")
                rc = await asyncio.wait_for(self._proc.wait(), timeout)
                if rc != 0:
                    problem = f"the runner exited {rc} after stop"
            else:
                problem = f"the runner had exited ({self._proc.returncode}) before stop"
        except (StepFailed, asyncio.TimeoutError, OSError) as e:
            problem = f"stop: {e}"
        finally:
            if self._proc.returncode is None:
                self._proc.kill()
                await self._proc.wait()
            if self._reader is not None:
                await self._reader
        return problem


class StepFailed(Exception):
    pass
