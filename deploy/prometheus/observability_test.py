#!/usr/bin/env python3
"""Runs every PromQL expression of the Grafana dashboard and the alert rules against a real
Prometheus that scrapes a real Herald under light load.

Started by deploy/observability-test.sh, which installs Prometheus, builds the binaries and
starts a Redis (so the bridge panels have a bridge to show). Everything listens on free
127.0.0.1 ports and is stopped at the end, however the run ends.

Checks:
  * Prometheus loads alerts.yaml and every rule evaluates without error;
  * a healthy, loaded node trips no alert (firing or pending);
  * every dashboard expression (and its variable query) parses and evaluates;
  * the key panels return data: connections by transport (SSE and WebSocket), deliveries/s,
    publishes/s, publish -> write latency, bridge lag and state, refusals, CPU, memory, nodes
    up and ready, version.

Usage: observability_test.py --herald BIN --loadgen BIN --redis-url URL --workdir DIR
"""

import argparse
import json
import math
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
DASHBOARD = os.path.join(HERE, "..", "grafana", "herald.json")
RULES = os.path.join(HERE, "alerts.yaml")

# Panel titles whose every query must return at least one finite sample.
KEY_PANELS = {
    "Nodes up",
    "Nodes ready",
    "Connections",
    "Deliveries/s",
    "Publishes/s",
    "Version",
    "Connections by transport and node",
    "Deliveries/s by transport",
    "Publishes/s by source",
    "Publish → write latency",
    "Publish → write p99 by transport",
    "Bytes sent/s",
    "Refusals by reason",
    "Bridge lag",
    "Bridges up and reconnects",
    "Bridge messages/s",
    "CPU",
    "Resident memory",
    "File descriptors",
}

passed = 0
failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
        print(f"[observability] ok: {what}", flush=True)
    else:
        failed += 1
        print(f"[observability] FAILED: {what}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def eventually(what, condition, timeout):
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return
        except (OSError, urllib.error.URLError, ValueError, KeyError):
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"[observability] ERROR: {what} not within {timeout}s")
        time.sleep(0.25)


class Prometheus:
    def __init__(self, url):
        self.url = url

    def query(self, expr, at=None):
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = urllib.parse.urlencode(params).encode()
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/query", data=data, timeout=10) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            return json.load(e)

    def values(self, expr):
        reply = self.query(expr)
        if reply.get("status") != "success":
            return None
        return [float(s["value"][1]) for s in reply["data"]["result"]]


def substitute(expr):
    """Grafana's variables, as Grafana would fill them in for this test's one-node range."""
    expr = expr.replace("$__rate_interval", "30s").replace("${__rate_interval}", "30s")
    expr = expr.replace("$__interval", "5s").replace("${__interval}", "5s")
    expr = re.sub(r"\$\{?instance\}?", ".*", expr)
    return expr


def dashboard_queries(dashboard):
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]
        for inner in panel.get("panels", []):
            for target in inner.get("targets", []):
                yield inner["title"], target["expr"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--herald", required=True)
    ap.add_argument("--loadgen", required=True)
    ap.add_argument("--redis-url", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--prometheus", default="prometheus")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    procs = []

    def spawn(name, cmd, **kw):
        log = open(os.path.join(args.workdir, f"{name}.log"), "w")
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, **kw)
        procs.append((name, p))
        return p

    try:
        public, admin, prom_port = free_port(), free_port(), free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
        spawn("herald", [args.herald, "--listen", f"127.0.0.1:{public}",
                         "--admin-listen", f"127.0.0.1:{admin}", "--redis-url", args.redis_url,
                         "--node-id", "obs-1", "--log-format", "json"], env=env)
        eventually("herald ready", lambda: get(f"http://127.0.0.1:{admin}/readyz")[0] == 200, 30)

        with open(os.path.join(args.workdir, "prometheus.yml"), "w") as f:
            f.write(f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - {RULES}
scrape_configs:
  - job_name: herald
    static_configs:
      - targets: ["127.0.0.1:{admin}"]
""")
        spawn("prometheus", [args.prometheus,
                             f"--config.file={args.workdir}/prometheus.yml",
                             f"--storage.tsdb.path={args.workdir}/tsdb",
                             f"--web.listen-address=127.0.0.1:{prom_port}",
                             "--web.enable-lifecycle"])
        prom = Prometheus(f"http://127.0.0.1:{prom_port}")
        eventually("prometheus ready", lambda: get(f"{prom.url}/-/ready")[0] == 200, 60)

        # Light load: SSE and WebSocket subscribers, 20 publishes/s through the admin API,
        # and a few refused requests so the refusal panels have something to show.
        base = f"http://127.0.0.1:{public}"
        pub = f"http://127.0.0.1:{admin}"
        common = ["--topics", "4", "--publish-url", pub, "--publish-rate", "10",
                  "--duration", "90s", "--ramp", "50"]
        spawn("loadgen-sse", [args.loadgen, "sse", "--url", base, "--conns", "20"] + common)
        spawn("loadgen-ws", [args.loadgen, "ws", "--url", base, "--conns", "10"] + common)
        for _ in range(5):
            req = urllib.request.Request(f"{pub}/v1/publish", method="POST",
                                         data=b'{"topic":"bad topic","data":1}',
                                         headers={"content-type": "application/json"})
            try:
                urllib.request.urlopen(req, timeout=5)
            except urllib.error.HTTPError as e:
                assert e.code == 400, e.code

        def loaded():
            ws = prom.values('sum(herald_connections{job="herald", transport="ws"})')
            sse = prom.values('sum(herald_connections{job="herald", transport="sse"})')
            rate = prom.values('sum(rate(herald_messages_delivered_total{job="herald"}[30s]))')
            samples = prom.values('count_over_time(herald_messages_delivered_total{job="herald", transport="ws"}[30s])')
            return (ws and ws[0] >= 10 and sse and sse[0] >= 20 and rate and rate[0] > 0
                    and samples and samples[0] >= 15)

        eventually("Prometheus seeing the load for 15 s", loaded, 90)

        # The rules: loaded, evaluated without error, and none trips on a healthy node.
        rules = json.loads(get(f"{prom.url}/api/v1/rules")[1])["data"]["groups"]
        loaded_rules = [r for g in rules for r in g["rules"]]
        check(len(loaded_rules) == 10, f"Prometheus loaded {len(loaded_rules)} rules from alerts.yaml")
        eventually("every rule evaluated", lambda: all(
            r.get("lastEvaluation", "").startswith("20") and r["health"] != "unknown"
            for g in json.loads(get(f"{prom.url}/api/v1/rules")[1])["data"]["groups"]
            for r in g["rules"]), 30)
        rules = json.loads(get(f"{prom.url}/api/v1/rules")[1])["data"]["groups"]
        for g in rules:
            for r in g["rules"]:
                check(r["health"] == "ok", f"rule {r['name']} evaluates ({r['health']} {r.get('lastError', '')})")
        for g in rules:
            for r in g["rules"]:
                reply = prom.query(r["query"])
                check(reply.get("status") == "success",
                      f"rule {r['name']} expression parses and evaluates")
        alerts = json.loads(get(f"{prom.url}/api/v1/alerts")[1])["data"]["alerts"]
        check(alerts == [], f"a healthy node trips no alert: {[a['labels']['alertname'] for a in alerts]}")

        # The dashboard.
        with open(DASHBOARD) as f:
            dashboard = json.load(f)
        for var in dashboard["templating"]["list"]:
            if var["type"] == "query":
                m = re.fullmatch(r"label_values\((.*), (\w+)\)", var["definition"])
                check(m is not None, f"variable {var['name']} is a label_values query")
                url = (f"{prom.url}/api/v1/label/{m.group(2)}/values?"
                       + urllib.parse.urlencode({"match[]": m.group(1)}))
                values = json.loads(get(url)[1])["data"]
                check(values == [f"127.0.0.1:{admin}"], f"variable {var['name']} lists the node: {values}")
        data = {}
        for title, expr in dashboard_queries(dashboard):
            reply = prom.query(substitute(expr))
            ok = reply.get("status") == "success"
            check(ok, f"panel {title!r}: {expr} ({reply.get('error', 'evaluates')})")
            values = [float(s["value"][1]) for s in reply["data"]["result"]] if ok else []
            data.setdefault(title, []).extend(v for v in values if math.isfinite(v))
        # A key panel shows something (a counter that never moved, such as refusals or
        # reconnects on a healthy node, has no series yet; the panel's other query does).
        for title in sorted(KEY_PANELS & data.keys()):
            check(data[title], f"panel {title!r} returns data: {data[title][:6]}")
        titles = set(data)
        missing = KEY_PANELS - titles
        check(not missing, f"every key panel is on the dashboard (missing: {sorted(missing)})")
        # Values that must be what the load made them, not just present.
        check(prom.values('sum(up{job="herald"})') == [1.0], "one node up")
        check(prom.values('sum(herald_ready{job="herald"})') == [1.0], "one node ready (bridge up)")
        refused = prom.values('sum(herald_client_errors_total{job="herald", reason="bad_topic"})')
        check(refused == [5.0], f"the 5 refused publishes are counted: {refused}")
    finally:
        for name, p in reversed(procs):
            if p.poll() is None:
                p.terminate()
        for name, p in reversed(procs):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    print(f"observability: {passed} passed, {failed} failed", flush=True)
    if failed:
        print(f"[observability] logs in {args.workdir}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
