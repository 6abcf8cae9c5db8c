#!/usr/bin/env bash
# The hostile-client soak: one release-build Herald node with the hooks of a real deployment
# (deploy/hostile-hooks.py), the loadgen's whole hostile catalogue against it for a minute —
# the default attacks plus those that need the admin listener and the hooks — while good SSE
# clients receive a steady publish rate. Run by deploy/test.sh after `cargo test`.
#
# It fails (exit 1, saying why) unless:
#   - the good clients received 100 % of the messages published (none failed or dropped, no
#     publish failed);
#   - no attack outside TOLERATED below had an unexpected outcome, and a good client's new
#     wildcard pattern was accepted every time (pattern_lockout's probe);
#   - Herald's RSS rose less than MAX_RSS_GROWTH_MB from before the attacks to its peak;
#   - Herald averaged less than MAX_CPU_CORES cores over the measured window;
#   - every health check of the admin listener was answered 200, and Herald was alive at the end.
#
# Everything is on loopback, bounded in count and time, and stopped on exit. The report
# (JSON and text) stays in target/hostile-soak/.
#
#   HERALD_SOAK_DURATION=60s      length of the attack phase
#   HERALD_SOAK_ATTACKS=default    the loadgen's --attacks (a subset, to find which attack
#                                  breaks a bound: default,-history_amplification)
#   HERALD_SOAK_TOLERATE="a b"    replaces the tolerated list below ("" or "none": tolerate nothing)
#   HERALD_SOAK_NO_BUILD=1        use target/release/{herald,herald-loadgen} as they are
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

duration=${HERALD_SOAK_DURATION:-60s}
attacks=${HERALD_SOAK_ATTACKS:-default}

# Attacks whose unexpected outcomes do not fail the soak, because the gateway's fix for them
# has not landed on this branch yet ("Trust, second pass"). Whoever merges a fix removes its
# attack here; once all are merged the list is empty and every attack counts. While an
# amplification attack is listed, the bound it would break is reported but not enforced:
# history_amplification → the RSS bound; ws_deflate_ping, ws_msgpack_nils → the CPU bound;
# pattern_lockout → the new-pattern probe.
# Attacks whose unexpected outcomes are tolerated (each also waives the bound it would break):
# empty since the fixes of "Trust, second pass" landed. Add one here only with a reason.
TOLERATED=()
if [ -n "${HERALD_SOAK_TOLERATE+set}" ]; then
  read -r -a TOLERATED <<<"${HERALD_SOAK_TOLERATE//,/ }"
  [ "${TOLERATED[*]:-}" = none ] && TOLERATED=()
fi

# Bounds (see docs/security.md, "The hostile soak", for why these numbers).
MAX_RSS_GROWTH_MB=150
MAX_CPU_CORES=1.6

# The run's size: attacker loops, good clients, their topics and publish rate.
ATTACKERS=200
GOOD=300
TOPICS=10
PUBLISH_RATE=50
# Large messages in the histories that history_amplification asks for (60 KB each).
BIG_MESSAGES=128
BIG_BYTES=60000

work="$repo/target/hostile-soak"
rm -rf "$work"
mkdir -p "$work"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
}
trap cleanup EXIT
fail() {
  echo "hostile-soak: FAILED: $*" >&2
  exit 1
}

if [ "${HERALD_SOAK_NO_BUILD:-}" != 1 ]; then
  cargo build --release -p herald-gateway -p herald-loadgen
fi
herald="$repo/target/release/herald"
loadgen="$repo/target/release/herald-loadgen"
[ -x "$herald" ] && [ -x "$loadgen" ] || fail "release binaries missing in target/release"

# The hook backend, on a free loopback port it reports in a file.
python3 "$repo/deploy/hostile-hooks.py" "$work/hooks.port" &
pids+=($!)
for _ in $(seq 100); do
  [ -s "$work/hooks.port" ] && break
  sleep 0.1
done
[ -s "$work/hooks.port" ] || fail "the hook backend did not start"
hooks_port=$(cat "$work/hooks.port")

read -r public_port admin_port < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
')

cat >"$work/herald.toml" <<EOF
listen = "127.0.0.1:$public_port"
admin_listen = "127.0.0.1:$admin_port"
log_filter = "warn"

[topics]
history_len = 256          # the big topics keep every one of their $BIG_MESSAGES messages
max_patterns = 2048        # pattern_lockout holds ~60 connections x 64 new patterns at once:
                           # without a per-client share they fill this and the probe is refused

[limits]
max_payload_bytes = 65536  # room for the $BIG_BYTES-byte messages

[hooks]                    # defaults otherwise: deflate and msgpack on, cookie forwarded
connect_url = "http://127.0.0.1:$hooks_port/connect"
subscribe_url = "http://127.0.0.1:$hooks_port/subscribe"
on_unavailable = "allow"   # the backend answers 503 for secret: topics
timeout = "1s"

[namespaces.rooms]         # the backend denies rooms:secret
hooks = ["subscribe"]

[namespaces.secret]        # the backend is "down" for these
hooks = ["subscribe"]

[namespaces.lock]          # pattern_lockout's and the probe's patterns: no hook decides
hooks = []
EOF

"$herald" --config "$work/herald.toml" >"$work/herald.log" 2>&1 &
herald_pid=$!
pids+=("$herald_pid")

admin="http://127.0.0.1:$admin_port"
python3 - "$admin" "$BIG_MESSAGES" "$BIG_BYTES" <<'EOF' || fail "Herald did not start (see target/hostile-soak/herald.log)"
import json, sys, time, urllib.request
admin, count, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
deadline = time.time() + 30
while True:
    try:
        with urllib.request.urlopen(admin + "/readyz", timeout=1) as r:
            if r.status == 200:
                break
    except OSError:
        pass
    if time.time() > deadline:
        sys.exit(1)
    time.sleep(0.2)
# the big histories history_amplification reads: big0..big3
for i in range(count):
    for topic in ("big0", "big1", "big2", "big3"):
        body = json.dumps({"topic": topic, "data": "x" * size}).encode()
        req = urllib.request.Request(admin + "/v1/publish", body,
                                     {"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as r:
            assert r.status in (200, 202), r.status
EOF

echo "hostile-soak: herald pid $herald_pid on 127.0.0.1:$public_port (admin $admin_port), hooks on $hooks_port; attacking for $duration" >&2
set +e
"$loadgen" hostile \
  --url "http://127.0.0.1:$public_port" --admin-url "$admin" --hooked \
  --attacks "$attacks" --conns "$ATTACKERS" --attack-timeout 5s \
  --good-conns "$GOOD" --topics "$TOPICS" \
  --publish-url "$admin" --publish-rate "$PUBLISH_RATE" \
  --health-url "$admin/healthz" --duration "$duration" --warmup 10s \
  --server-pid "$herald_pid" --json "$work/hostile.json" >"$work/hostile.txt" 2>"$work/loadgen.log"
rc=$?
set -e
[ -s "$work/hostile.json" ] || fail "the loadgen wrote no report (exit $rc; see target/hostile-soak/loadgen.log)"

python3 - "$work/hostile.json" "$MAX_RSS_GROWTH_MB" "$MAX_CPU_CORES" "${TOLERATED[@]}" <<'EOF'
import json, sys
report = json.load(open(sys.argv[1]))
max_rss_mb, max_cores = float(sys.argv[2]), float(sys.argv[3])
tolerated = set(sys.argv[4:])
h = report["hostile"]
problems, notes = [], []

def bound(ok, what, waived_by):
    waivers = sorted(tolerated & set(waived_by))
    if ok:
        return
    if waivers:
        notes.append(f"{what} (not enforced while {', '.join(waivers)} is tolerated)")
    else:
        problems.append(what)

g = h.get("good_clients") or {}
d = report.get("delivery") or {}
if not g.get("unharmed") or g.get("expected", 0) == 0 or g.get("delivered") != g.get("expected"):
    problems.append(f"good clients: {g.get('connected')} connected, {g.get('failed')} failed, "
                    f"{g.get('dropped')} dropped, delivered {g.get('delivered')} of {g.get('expected')}")
if d.get("publish_failed", 0):
    problems.append(f"{d['publish_failed']} publishes failed")
for a in h["by_attack"]:
    if a["total"] == 0:
        problems.append(f"{a['attack']} never finished an attack")
    elif a["unexpected"] and a["attack"] not in tolerated:
        problems.append(f"{a['attack']}: {a['unexpected']} of {a['total']} unexpected")
for u in h["unexpected"]:
    if u["attack"] in tolerated:
        notes.append(f"tolerated: {u['attack']}/{u['variant']} → {u['outcome']} ×{u['count']}")
health = h.get("health") or {}
if not health.get("checks") or health.get("failed"):
    problems.append(f"health checks: {health.get('failed')} of {health.get('checks')} failed")
probe = h.get("pattern_probe")
if probe is None:
    notes.append("no new-pattern probe ran (pattern_lockout not in the run)")
else:
    bound(probe["failed"] == 0,
          f"{probe['failed']} of {probe['checks']} new-pattern probes refused {probe['failures']}",
          ["pattern_lockout"])
server = report["servers"][0]
if not server["alive_at_end"]:
    problems.append("herald was gone at the end")
mem = h["memory"][0]
# from before the attacks (the good clients connected) to the attack phase's peak
baseline_kb = min(server["rss_after_connect_kb"] or mem["rss_attack_start_kb"], mem["rss_attack_start_kb"])
growth_mb = (mem["rss_peak_kb"] - baseline_kb) / 1024
bound(growth_mb < max_rss_mb,
      f"RSS rose {growth_mb:.0f} MiB during the attacks (bound {max_rss_mb:.0f} MiB)",
      ["history_amplification"])
phases = report["phases"]
window = phases["measured_secs"] + phases["drain_secs"]
cores = server["cpu_seconds_measured"] / window
bound(cores < max_cores,
      f"herald averaged {cores:.2f} cores (bound {max_cores})",
      ["ws_deflate_ping", "ws_msgpack_nils"])

print(f"hostile-soak: {h['attacks']} attacks in {h['secs']:.0f} s ({h['attacks_per_sec']:.0f}/s), "
      f"{h['unexpected_total']} unexpected")
print(f"hostile-soak: good clients delivered {g.get('delivered')} / {g.get('expected')} "
      f"({g.get('connected')} connected); health {health.get('ok')} / {health.get('checks')}; "
      f"new-pattern probes {probe and probe['ok']} / {probe and probe['checks']}")
print(f"hostile-soak: herald RSS {baseline_kb // 1024} MiB before the attacks, "
      f"peak {mem['rss_peak_kb'] // 1024}, end {mem['rss_end_kb'] // 1024} (+{growth_mb:.0f} MiB, bound {max_rss_mb:.0f}); "
      f"CPU {cores:.2f} cores on average (bound {max_cores})")
for n in notes:
    print(f"hostile-soak: note: {n}")
if problems:
    for p in problems:
        print(f"hostile-soak: FAILED: {p}", file=sys.stderr)
    sys.exit(1)
print("hostile-soak: passed")
EOF
