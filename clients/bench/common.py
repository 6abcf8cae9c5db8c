"""Shared by the client benchmarks (docs/benchmarks/clients.md): a snapshot of the clients
at a commit, a Herald node (the release binary), Toxiproxy, and CPU time read from /proc.

Everything listens on 127.0.0.1 and every process started here is stopped by whoever started it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("HERALD_ENGINES_CACHE", Path.home() / ".cache" / "herald-engines"))
CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def git_commit() -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout.strip()


def snapshot(commit: str, into: Path) -> Path:
    """The clients/ tree of `commit` under `into` (so that edits in the working tree while a
    benchmark runs do not change what is measured). The JS client is built there with the
    working tree's node_modules."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", commit, "clients"], cwd=REPO, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    js = into / "clients" / "js"
    nm = REPO / "clients" / "js" / "node_modules"
    if nm.exists() and shutil.which("npm"):
        (js / "node_modules").symlink_to(nm)
        subprocess.run(["npm", "run", "--silent", "build"], cwd=js, check=True, capture_output=True)
    return into


def herald_binary() -> Path:
    return Path(os.environ.get("HERALD_BIN", REPO / "target" / "release" / "herald"))


def toxiproxy_binary() -> Path:
    explicit = os.environ.get("HERALD_TOXIPROXY")
    if explicit:
        return Path(explicit)
    cached = CACHE / "toxiproxy" / "bin" / "server"
    if cached.exists():
        return cached
    found = shutil.which("toxiproxy-server")
    if found:
        return Path(found)
    raise SystemExit("no Toxiproxy: run deploy/chaos.sh once, or set HERALD_TOXIPROXY")


def wait_http(url: str, deadline_s: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode} before {url} answered")
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status < 500:
                    return
        time.sleep(0.05)
    raise RuntimeError(f"{url} did not answer within {deadline_s} s")


def toml(config: dict[str, Any]) -> str:
    def val(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return str(v)
        if isinstance(v, list):
            return "[" + ", ".join(val(x) for x in v) + "]"
        return json.dumps(v)

    top = [f"{k} = {val(v)}" for k, v in config.items() if not isinstance(v, dict)]
    sections = [f"[{k}]\n" + "\n".join(f"{kk} = {val(vv)}" for kk, vv in v.items())
                for k, v in config.items() if isinstance(v, dict)]
    return "\n".join(top) + "\n\n" + "\n\n".join(sections) + "\n"


class Herald:
    """One node with its embedded defaults plus `extra` (dev mode: publish without keys)."""

    def __init__(self, workdir: Path, extra: dict[str, Any] | None = None) -> None:
        self.port = free_port()
        self.admin_port = free_port()
        self.workdir = workdir
        self.config: dict[str, Any] = {"dev": True, "log_filter": "warn",
                                       "listen": f"127.0.0.1:{self.port}",
                                       "admin_listen": f"127.0.0.1:{self.admin_port}"}
        for k, v in (extra or {}).items():
            self.config[k] = v
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        path = self.workdir / "herald.toml"
        path.write_text(toml(self.config))
        log = open(self.workdir / "herald.log", "ab")
        env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
        self.proc = subprocess.Popen([str(herald_binary()), "--config", str(path)], stdout=log, stderr=log, env=env)
        log.close()
        wait_http(f"{self.admin_url}/readyz", 30, self.proc)

    def stop(self) -> None:
        stop_proc(self.proc)


class Toxiproxy:
    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.api = f"http://127.0.0.1:{self.port}"
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = open(self.workdir / "toxiproxy.log", "ab")
        self.proc = subprocess.Popen([str(toxiproxy_binary()), "-host", "127.0.0.1", "-port", str(self.port)],
                                     stdout=log, stderr=log)
        log.close()
        wait_http(f"{self.api}/version", 20, self.proc)

    def stop(self) -> None:
        stop_proc(self.proc)


def stop_proc(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def proc_cpu_s(pid: int) -> float:
    """user + system CPU seconds of a process (all its threads), from /proc/<pid>/stat."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def scratch(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))


def machine() -> str:
    cpu = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = "?"
    with contextlib.suppress(OSError):
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kb / 1024 / 1024:.0f} GiB"
    return f"{os.cpu_count()} CPUs ({cpu}), {mem} RAM, {os.uname().sysname} {os.uname().release}"
