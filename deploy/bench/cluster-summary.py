#!/usr/bin/env python3
"""The summary of a cluster benchmark (deploy/bench-live.sh, deploy/bench-interest.sh).

    cluster-summary.py OUT live|interest

Each run's directory in OUT holds the loadgen's report (loadgen.json) and what its nodes
read (nodes.txt, from cluster-lib.sh's record_nodes: "NODE INGESTED PARTITIONS" a line). Every
run becomes a row of OUT/summary.json, and of the Markdown table printed.
"""
import json
import os
import sys


def measured(out, name):
    """What every cluster benchmark reads of one run: delivery, latency, the nodes' ingest
    and partitions, the nodes' and Redis's CPU."""
    r = json.load(open(os.path.join(out, name, "loadgen.json")))
    d = r.get("delivery") or {}
    lat = d.get("latency_ms") or {}
    secs = r["phases"]["measured_secs"]
    wall = secs + r["phases"]["drain_secs"]
    published = d.get("published", 0)
    nodes = [l.split() for l in open(os.path.join(out, name, "nodes.txt"))]
    servers = r.get("servers", [])
    cpu = sum(s["cpu_seconds_measured"] for s in servers if "redis" not in s["name"])
    redis_cpu = sum(s["cpu_seconds_measured"] for s in servers if "redis" in s["name"])

    def per_message(seconds):
        return round(seconds * 1e6 / published, 1) if published else None

    return {
        "published": published,
        "published_per_sec": round(published / secs) if secs else 0,
        "delivered": d.get("delivered"), "missing": d.get("missing"), "duplicates": d.get("duplicates"),
        "p50_ms": lat.get("p50_ms"), "p99_ms": lat.get("p99_ms"),
        "ingest_per_node": [int(n[1]) for n in nodes],
        "ingest_ratio_max": round(max(int(n[1]) for n in nodes) / published, 3) if published and nodes else None,
        "partitions_per_node": [int(n[2]) for n in nodes],
        "nodes_cpu_s": round(cpu, 2),
        "nodes_cpu_us_per_message": per_message(cpu),
        "nodes_cores": round(cpu / wall, 2),
        "redis_cpu_us_per_message": per_message(redis_cpu),
        "redis_cores": round(redis_cpu / wall, 3),
    }


# Per benchmark: the run's name → its own columns, the rows' order, and the table.
KINDS = {
    # bench-live.sh: runs SHAPE-rROUND
    "live": (
        lambda name: {"shape": name.rsplit("-r", 1)[0], "round": int(name.rsplit("-r", 1)[1])},
        lambda x: (x["round"], x["shape"]),
        [("shape", "shape"), ("round", "round"), ("published/s", "published_per_sec"),
         ("missing", "missing"), ("dups", "duplicates"), ("p50 ms", "p50_ms"), ("p99 ms", "p99_ms"),
         ("partitions per node", "partitions_per_node"), ("Redis µs per message", "redis_cpu_us_per_message"),
         ("Redis cores", "redis_cores"), ("nodes' µs per message", "nodes_cpu_us_per_message")],
    ),
    # bench-interest.sh: runs MODE[-PARTITIONS]-RATE
    "interest": (
        lambda name: {"mode": name.rsplit("-", 1)[0].replace("-", ":"), "rate": int(name.rsplit("-", 1)[1])},
        lambda x: (x["rate"], x["mode"]),
        [("mode", "mode"), ("rate asked", "rate"), ("published/s", "published_per_sec"),
         ("missing", "missing"), ("dups", "duplicates"), ("p50 ms", "p50_ms"), ("p99 ms", "p99_ms"),
         ("max node ingest / published", "ingest_ratio_max"), ("partitions per node", "partitions_per_node"),
         ("nodes' CPU µs per message", "nodes_cpu_us_per_message"), ("nodes' cores", "nodes_cores"),
         ("Redis cores", "redis_cores")],
    ),
}


def cell(value):
    return "/".join(map(str, value)) if isinstance(value, list) else str(value)


def main():
    out, kind = sys.argv[1], sys.argv[2]
    named, order, columns = KINDS[kind]
    rows = [
        {**named(name), **measured(out, name)}
        for name in sorted(os.listdir(out))
        if os.path.exists(os.path.join(out, name, "loadgen.json"))
    ]
    rows.sort(key=order)
    json.dump(rows, open(os.path.join(out, "summary.json"), "w"), indent=1)
    print("| " + " | ".join(title for title, _ in columns) + " |")
    print("|" + "---|" * len(columns))
    for x in rows:
        print("| " + " | ".join(cell(x[key]) for _, key in columns) + " |")
    print(f"reports in {out}")


if __name__ == "__main__":
    main()
