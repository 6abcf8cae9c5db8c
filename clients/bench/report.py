#!/usr/bin/env python3
"""Markdown tables from the JSON that resume.py and cpu.py write with --out.

    python3 clients/bench/report.py /tmp/resume-ws.json /tmp/cpu.json ...
"""

from __future__ import annotations

import json
import sys
from typing import Any


def resume(doc: dict[str, Any]) -> str:
    rows = ["| client | transport | drops | published | delivered | gaps | duplicates | reorders | loss signals | "
            "drops seen by the client | drop → subscribed again p50 / p99 (max) | drop → first message after it "
            "p50 / p99 (max) | drop → first message published after the drop p50 / p99 |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |"]
    for r in doc["results"]:
        rs, fm, fr = r["resubscribed_ms"], r["first_message_ms"], r.get("first_fresh_message_ms")
        resub = f"{rs['p50']} / {rs['p99']} ({rs['max']}) ms" if rs["p50"] is not None and r["transport"] != "poll" else "—"
        first = f"{fm['p50']} / {fm['p99']} ({fm['max']}) ms" if fm["p50"] is not None and r["transport"] != "poll" else "—"
        fresh = f"{fr['p50']} / {fr['p99']} ms" if fr and fr["p50"] is not None else "—"
        rows.append(f"| {r['client']} | {r['transport']} | {r['drops']} | {r['published']} | {r['received']} | "
                    f"{r['gap_count']} | {r['dup_count']} | {r['id_regressions']} | {r['lost_count']} | "
                    f"{r.get('drops_noticed', '—')} | {resub} | {first} | {fresh} |")
    return "\n".join(rows)


def _ratios(doc: dict[str, Any], name: str, peer: str) -> list[float]:
    runs = doc["runs"]
    out = []
    for run in range(doc["args"]["runs"]):
        a = [r for r in runs if r["client"] == name and r["run"] == run and r["received"]]
        b = [r for r in runs if r["client"] == peer and r["run"] == run and r["received"]]
        if a and b:
            out.append((a[0]["cpu_s"] / a[0]["received"]) / (b[0]["cpu_s"] / b[0]["received"]))
    return out


def cpu(doc: dict[str, Any]) -> str:
    a = doc["args"]
    batch = a.get("batch", 1)
    how = f"batches of {batch} per publish request" if batch > 1 else "one publish request per message"
    rows = [f"{a['subs']} subscription(s) on one WebSocket, {a['messages']} messages of {a['payload']} B JSON at "
            f"{a['rate']} msg/s ({how}), {a['runs']} runs:", "",
            "| client | server | client CPU µs / message, median (min–max) | server CPU µs / message, median | "
            "per-run ratio to its Centrifugo counterpart, median (min–max) | delivered / expected | gaps | duplicates | "
            "publish rate reached / delivered rate (median, msg/s) |",
            "| --- | --- | --- | ---: | ---: | --- | ---: | ---: | ---: |"]
    for s in doc["summary"]:
        server = "Herald" if s["client"].startswith("heraldpush") else "Centrifugo"
        ratio = "—"
        for k, v in s.items():
            if k.startswith("ratio_to_"):
                rs = _ratios(doc, s["client"], k[len("ratio_to_"):])
                ratio = f"{v:.2f}× ({min(rs):.2f}–{max(rs):.2f})" if rs else f"{v:.2f}×"
        rows.append(f"| {s['client']} | {server} | **{s['client_us_per_msg_median']}** ({s['client_us_per_msg_min']}–"
                    f"{s['client_us_per_msg_max']}) | {s['server_us_per_msg_median']} | {ratio} | {s['delivered']} / "
                    f"{s['expected']} | {s['gaps']} | {s['dups']} | {s['publish_rate_median']} / "
                    f"{s.get('delivered_rate_median', '—')} |")
    return "\n".join(rows)


def main() -> int:
    for path in sys.argv[1:]:
        doc = json.load(open(path))
        print(f"<!-- {path}: commit {doc['commit'][:12]}, {doc['date']}, {doc['machine']} -->")
        print(resume(doc) if "results" in doc else cpu(doc))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
