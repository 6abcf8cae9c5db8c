#!/usr/bin/env python3
"""Client CPU per delivered message (docs/benchmarks/clients.md): Herald's Python client vs
centrifuge-python, and Herald's Go client vs centrifuge-go, each against its own server (a
Herald node, the release binary, in dev mode; Centrifugo v6 with a namespace `bench` open to
subscribers, published to through its HTTP API with an API key).

Same workload for every pair: one subscriber process holding N subscriptions (channels
bench.0..N-1 / bench:0..N-1) on one WebSocket (JSON); a separate Go publisher
(clients/bench/go, `heraldbench pub`) sends M messages of ~PAYLOAD bytes of JSON at RATE
messages/s round-robin over the channels, one HTTP request per message, to the server's
publish API. The subscriber measures its own user+system CPU time (getrusage) from the
moment all its subscriptions are live until the M-th delivery; runs alternate which server
goes first; the table is the median of RUNS runs. Server CPU (/proc/<pid>/stat, user+system)
over the same span is reported as well (it includes serving the publish API).

    python3 clients/bench/cpu.py                         # python and go; 5 runs each
    python3 clients/bench/cpu.py --clients go --runs 3 --subs 1 --rate 5000 --messages 25000
    python3 clients/bench/cpu.py --subs 1 --rate 10000 --messages 50000 --batch 100 --formats json,binary

--batch B publishes B messages per HTTP request (Herald's POST /v1/publish/batch, Centrifugo's
POST /api/batch), one request every B/RATE s. --formats binary adds each client's binary
protocol: Herald's herald.msgpack WebSocket against Centrifugo's Protobuf one (heraldpush
fmt="msgpack" vs centrifuge-python use_protobuf=True; heraldpush-go Options.MsgPack vs
centrifuge-go NewProtobufClient).

Needs: centrifuge-python (pip), Go (the Go programs are built here, centrifuge-go from the
module proxy), and Centrifugo: CENTRIFUGO_BIN, else `centrifugo` on PATH or in ~/go/bin
(go install github.com/centrifugal/centrifugo/v6@v6.9.1).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (REPO, Herald, free_port, git_commit, machine, proc_cpu_s, scratch, snapshot,  # noqa: E402
                    stop_proc, wait_http)

SECRET = "bench-secret-0123456789abcdef0123456789"
API_KEY = "bench-api-key"


def jwt(claims: dict[str, Any]) -> str:
    def b64(b: bytes) -> str:
        return base64.urlsafe_b64encode(b).rstrip(b"=").decode()

    head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64(json.dumps(claims).encode())
    sig = hmac.new(SECRET.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(sig)}"


def centrifugo_binary() -> Path:
    for cand in (os.environ.get("CENTRIFUGO_BIN"), shutil.which("centrifugo"),
                 str(Path.home() / "go" / "bin" / "centrifugo")):
        if cand and Path(cand).exists():
            return Path(cand)
    raise SystemExit("no Centrifugo: go install github.com/centrifugal/centrifugo/v6@v6.9.1 (or set CENTRIFUGO_BIN)")


class Centrifugo:
    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/connection/websocket"

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def version(self) -> str:
        r = subprocess.run([str(centrifugo_binary()), "version"], capture_output=True, text=True)
        return r.stdout.strip()

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        cfg = {
            "log": {"level": "warn"},
            "http_server": {"address": "127.0.0.1", "port": self.port},
            "health": {"enabled": True},
            "client": {"token": {"hmac_secret_key": SECRET}, "allowed_origins": ["*"]},
            "http_api": {"key": API_KEY},
            "channel": {"namespaces": [{"name": "bench", "allow_subscribe_for_client": True}]},
        }
        path = self.workdir / "config.json"
        path.write_text(json.dumps(cfg, indent=1))
        log = open(self.workdir / "centrifugo.log", "ab")
        self.proc = subprocess.Popen([str(centrifugo_binary()), "--config", str(path)], stdout=log, stderr=log,
                                     cwd=self.workdir)
        log.close()
        wait_http(f"{self.api_url}/health", 30, self.proc)

    def stop(self) -> None:
        stop_proc(self.proc)


def build_go(tree: Path, tmp: Path) -> Path:
    """heraldbench, built against the snapshot's Go client."""
    dst = tree / "clients" / "bench" / "go"
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(REPO / "clients" / "bench" / "go", dst)
    exe = tmp / "heraldbench"
    subprocess.run(["go", "build", "-o", str(exe), "."], cwd=dst, check=True)
    return exe


def one(sub_cmd: list[str], pub_cmd: list[str], server_pid: int, timeout: float) -> dict[str, Any]:
    sub = subprocess.Popen(sub_cmd, stdout=subprocess.PIPE, stderr=sys.stderr, text=True)
    assert sub.stdout is not None
    try:
        line = sub.stdout.readline()
        if not line or not json.loads(line).get("ready"):
            raise RuntimeError(f"subscriber not ready: {line!r}")
        s0 = proc_cpu_s(server_pid)
        pub = subprocess.run(pub_cmd, capture_output=True, text=True, timeout=timeout + 30)
        if pub.returncode != 0:
            raise RuntimeError(f"publisher: {pub.stderr}")
        line = sub.stdout.readline()
        s1 = proc_cpu_s(server_pid)
        res = json.loads(line)
        res["server_cpu_s"] = s1 - s0
        res["publisher"] = json.loads(pub.stdout.strip().splitlines()[-1])
        sub.wait(15)
        return res
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", default="python,go")
    ap.add_argument("--subs", type=int, default=50, help="subscriptions (channels) in the one subscriber")
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--rate", type=int, default=2000, help="messages per second, all channels together")
    ap.add_argument("--payload", type=int, default=200, help="bytes of JSON per message")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=1, help="messages per publish request (1: /publish, one each)")
    ap.add_argument("--formats", default="json", help="json, binary (msgpack vs protobuf), or both")
    ap.add_argument("--python-variants", default="nodeflate",
                    help="heraldpush variants patched by py_sub.py (see there); empty for none")
    ap.add_argument("--python-baseline", default="",
                    help="also run heraldpush as of this commit (its clients/python/src), e.g. the one before a change")
    ap.add_argument("--commit", default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    commit = args.commit or git_commit()
    tmp = scratch("herald-bench-cpu-")
    tree = snapshot(commit, tmp / "tree")
    exe = build_go(tree, tmp)
    extra: dict[str, Any] = {}
    if args.subs > 64:
        extra["limits"] = {"max_subscriptions": args.subs}
    herald = Herald(tmp / "herald", extra)
    cfg = Centrifugo(tmp / "centrifugo")
    token = jwt({"sub": "bench", "exp": int(time.time()) + 86400})
    timeout = args.messages / args.rate * 3 + 30
    herald.start()
    cfg.start()
    rows: list[dict[str, Any]] = []
    try:
        assert herald.proc is not None and cfg.proc is not None
        herald_pub = [str(exe), "pub", "herald", herald.admin_url, str(args.subs), str(args.messages),
                      str(args.rate), str(args.payload), str(args.batch)]
        cfg_pub = [str(exe), "pub", "centrifuge", cfg.api_url, API_KEY, str(args.subs), str(args.messages),
                   str(args.rate), str(args.payload), str(args.batch)]
        formats = args.formats.split(",")
        common = [str(args.subs), str(args.messages), str(int(timeout))]
        pairs: list[tuple[str, str, list[str], list[str], int]] = []
        py = [sys.executable, str(Path(__file__).parent / "py_sub.py")]
        src = str(tree / "clients/python/src")
        for client in args.clients.split(","):
            if client == "python":
                if "json" in formats:
                    pairs.append(("python", "heraldpush", [*py, "herald", herald.url, *common, src], herald_pub,
                                  herald.proc.pid))
                    pairs.append(("python", "centrifuge-python", [*py, "centrifuge", cfg.ws_url, *common, token], cfg_pub,
                                  cfg.proc.pid))
                    # Where heraldpush's CPU goes (py_sub.py patches these; the client is unchanged).
                    for variant in args.python_variants.split(","):
                        if variant:
                            pairs.append(("python", f"heraldpush [{variant}]", [*py, f"herald-{variant}", herald.url,
                                          *common, src], herald_pub, herald.proc.pid))
                    if args.python_baseline:
                        base = tmp / "baseline"
                        base.mkdir(parents=True, exist_ok=True)
                        tar = subprocess.run(["git", "archive", args.python_baseline, "clients/python/src"], cwd=REPO,
                                             capture_output=True, check=True)
                        subprocess.run(["tar", "-x", "-C", str(base)], input=tar.stdout, check=True)
                        pairs.append(("python", f"heraldpush [@{args.python_baseline}]", [*py, "herald", herald.url,
                                      *common, str(base / "clients/python/src")], herald_pub, herald.proc.pid))
                if "binary" in formats:
                    pairs.append(("python", "heraldpush msgpack", [*py, "herald-msgpack", herald.url, *common, src],
                                  herald_pub, herald.proc.pid))
                    pairs.append(("python", "centrifuge-python protobuf", [*py, "centrifuge-protobuf", cfg.ws_url, *common,
                                  token], cfg_pub, cfg.proc.pid))
            elif client == "go":
                if "json" in formats:
                    pairs.append(("go", "heraldpush-go", [str(exe), "sub", "herald", herald.url, *common], herald_pub,
                                  herald.proc.pid))
                    pairs.append(("go", "centrifuge-go", [str(exe), "sub", "centrifuge", cfg.ws_url, *common, token],
                                  cfg_pub, cfg.proc.pid))
                if "binary" in formats:
                    pairs.append(("go", "heraldpush-go msgpack", [str(exe), "sub", "herald-msgpack", herald.url, *common],
                                  herald_pub, herald.proc.pid))
                    pairs.append(("go", "centrifuge-go protobuf", [str(exe), "sub", "centrifuge-protobuf", cfg.ws_url,
                                  *common, token], cfg_pub, cfg.proc.pid))
            else:
                raise SystemExit(f"unknown client {client}")
        for run in range(args.runs):
            order = pairs if run % 2 == 0 else pairs[::-1]
            for lang, name, sub_cmd, pub_cmd, pid in order:
                res = one(sub_cmd, pub_cmd, pid, timeout)
                res.update({"lang": lang, "client": name, "run": run})
                rows.append(res)
                print(json.dumps(res), flush=True)
    finally:
        cfg.stop()
        herald.stop()
    summary = []
    for name in dict.fromkeys(r["client"] for r in rows):
        rs = [r for r in rows if r["client"] == name]
        per = [r["cpu_s"] / r["received"] * 1e6 for r in rs if r["received"]]
        srv = [r["server_cpu_s"] / r["received"] * 1e6 for r in rs if r["received"]]
        summary.append({
            "client": name, "runs": len(rs), "client_us_per_msg_median": round(statistics.median(per), 2),
            "client_us_per_msg_min": round(min(per), 2), "client_us_per_msg_max": round(max(per), 2),
            "server_us_per_msg_median": round(statistics.median(srv), 2),
            "delivered": sum(r["received"] for r in rs), "expected": args.messages * len(rs),
            "gaps": sum(r["gaps"] for r in rs), "dups": sum(r["dups"] for r in rs), "bad": sum(r["bad"] for r in rs),
            "timed_out": sum(1 for r in rs if r["timed_out"]),
            "publish_rate_median": round(statistics.median(r["publisher"]["rate"] for r in rs)),
            "delivered_rate_median": round(statistics.median(r["received"] / r["wall_s"] for r in rs if r["wall_s"])),
        })
    # Each Herald client against its counterpart in the same run (the two ran back to back):
    # the median of those ratios is steadier than a ratio of medians on a shared machine.
    for s in summary:
        if s["client"].startswith("centrifuge"):
            continue
        peer = "centrifuge-go" if s["client"].startswith("heraldpush-go") else "centrifuge-python"
        if s["client"].endswith("msgpack"):
            peer += " protobuf"
        if not any(r["client"] == peer for r in rows):
            continue
        ratios = []
        for run in range(args.runs):
            a = [r for r in rows if r["client"] == s["client"] and r["run"] == run]
            b = [r for r in rows if r["client"] == peer and r["run"] == run]
            if a and b and a[0]["received"] and b[0]["received"]:
                ratios.append((a[0]["cpu_s"] / a[0]["received"]) / (b[0]["cpu_s"] / b[0]["received"]))
        if ratios:
            s["ratio_to_" + peer] = round(statistics.median(ratios), 2)
    for s in summary:
        print(json.dumps(s), flush=True)
    doc = {"commit": commit, "machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "centrifugo": cfg.version(), "args": vars(args), "summary": summary, "runs": rows}
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
