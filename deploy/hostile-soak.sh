#!/usr/bin/env bash
# The hostile-client soak: one release-build Herald node with the hooks of a real deployment
# and tracing on (deploy/hostile-hooks.py is both the hook backend and the OTLP collector),
# the loadgen's whole hostile catalogue against it for a minute — the default attacks plus
# those that need the admin listener and the hooks — while good SSE clients receive a steady
# publish rate. A second node serves its public listener over TLS (a certificate made here),
# where HTTP/2 is served: the h2_* attacks go there, while a good HTTP/2 client's requests
# must be answered. Run by deploy/test.sh after `cargo test`.
#
# It fails (exit 1, saying why) unless:
#   - the good clients received 100 % of the messages published (none failed or dropped, no
#     publish failed);
#   - no attack outside TOLERATED below had an unexpected outcome, and a good client's new
#     wildcard pattern was accepted every time (pattern_lockout's probe);
#   - Herald's RSS rose less than MAX_RSS_GROWTH_MB from before the attacks to its peak (the
#     HTTP/2 node's less than MAX_H2_RSS_GROWTH_MB);
#   - Herald averaged less than MAX_CPU_CORES cores over the measured window;
#   - every health check of the admin listener and every request of the good HTTP/2 client was
#     answered 200, and both nodes were alive at the end;
#   - the spans exported while the trace attacks ran carried no tracestate over 32 members or
#     512 characters, and the attacks' sampled traces were exported (tracing was on).
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
# The HTTP/2 node, from before the attacks to its peak: about five connections of 100 streams
# owed ~1 MiB each are held at once, beside the resets, header lists and floods. Measured
# +59 to +76 MiB over the whole catalogue (+19 MiB without h2_streams); answers are shared
# frames (docs/security.md, "streams per HTTP/2 connection"), so copies of them would go far
# past this.
MAX_H2_RSS_GROWTH_MB=150
# What W3C Trace Context asks a participant to propagate of a tracestate.
MAX_TRACESTATE_CHARS=512
MAX_TRACESTATE_MEMBERS=32

# The run's size: attacker loops, good clients, their topics and publish rate.
ATTACKERS=200
GOOD=300
TOPICS=10
PUBLISH_RATE=50
# Large messages in the histories that history_amplification asks for (60 KB each).
BIG_MESSAGES=128
BIG_BYTES=60000
# The HTTP/2 node's big topics: the h2 attacks ask for 16 messages (~1 MiB) per stream.
H2_BIG_MESSAGES=16

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

read -r public_port admin_port h2_port h2_admin_port < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(4)]
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

[telemetry]                # the trace attacks' sampled publishes are exported to the collector
otlp_endpoint = "http://127.0.0.1:$hooks_port"
otlp_protocol = "http"
EOF

# The HTTP/2 node's certificate: a CA made for this run, and a certificate it signs for
# 127.0.0.1 and localhost (the loadgen trusts the CA).
tls="$work/tls"
mkdir -p "$tls"
{
  openssl ecparam -name prime256v1 -genkey -noout -out "$tls/ca.key" &&
    openssl req -x509 -new -key "$tls/ca.key" -sha256 -days 2 -subj "/CN=herald soak CA" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign" \
      -out "$tls/ca.pem" &&
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$tls/node.key" &&
    openssl req -new -key "$tls/node.key" -subj "/CN=herald-soak" -out "$tls/node.csr" &&
    printf '%s\n' basicConstraints=CA:FALSE extendedKeyUsage=serverAuth \
      subjectAltName=IP:127.0.0.1,DNS:localhost >"$tls/ext.cnf" &&
    openssl x509 -req -in "$tls/node.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" \
      -CAcreateserial -days 2 -sha256 -extfile "$tls/ext.cnf" -out "$tls/node.pem"
} >"$tls/openssl.log" 2>&1 || fail "could not make the HTTP/2 node's certificate (see $tls/openssl.log)"

cat >"$work/herald-h2.toml" <<EOF
listen = "127.0.0.1:$h2_port"
admin_listen = "127.0.0.1:$h2_admin_port"
log_filter = "warn"

[tls]                      # ALPN offers h2: Herald serves HTTP/2 over TLS only
cert_file = "$tls/node.pem"
key_file = "$tls/node.key"

[limits]
max_payload_bytes = 65536  # room for the $BIG_BYTES-byte messages
EOF

"$herald" --config "$work/herald.toml" >"$work/herald.log" 2>&1 &
herald_pid=$!
pids+=("$herald_pid")
"$herald" --config "$work/herald-h2.toml" >"$work/herald-h2.log" 2>&1 &
h2_pid=$!
pids+=("$h2_pid")

admin="http://127.0.0.1:$admin_port"
h2_admin="http://127.0.0.1:$h2_admin_port"
# Waits for a node's admin listener (argument 1), then fills its big topics with argument 2
# messages of argument 3 bytes.
fill() {
  python3 - "$@" <<'EOF'
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
}
fill "$admin" "$BIG_MESSAGES" "$BIG_BYTES" || fail "Herald did not start (see target/hostile-soak/herald.log)"
fill "$h2_admin" "$H2_BIG_MESSAGES" "$BIG_BYTES" ||
  fail "the HTTP/2 node did not start (see target/hostile-soak/herald-h2.log)"

echo "hostile-soak: herald pid $herald_pid on 127.0.0.1:$public_port (admin $admin_port)," \
  "hooks and trace collector on $hooks_port; HTTP/2 node pid $h2_pid on https://127.0.0.1:$h2_port;" \
  "attacking for $duration" >&2
set +e
"$loadgen" hostile \
  --url "http://127.0.0.1:$public_port" --admin-url "$admin" --hooked \
  --h2-url "https://127.0.0.1:$h2_port" --tls-ca "$tls/ca.pem" \
  --attacks "$attacks" --conns "$ATTACKERS" --attack-timeout 5s \
  --good-conns "$GOOD" --topics "$TOPICS" \
  --publish-url "$admin" --publish-rate "$PUBLISH_RATE" \
  --health-url "$admin/healthz" --duration "$duration" --warmup 10s \
  --server-pid "$herald_pid" --server-pid "$h2_pid" --json "$work/hostile.json" >"$work/hostile.txt" 2>"$work/loadgen.log"
rc=$?
set -e
[ -s "$work/hostile.json" ] || fail "the loadgen wrote no report (exit $rc; see target/hostile-soak/loadgen.log)"

# What the collector received, once the nodes' batch exports (every 5 s) have settled.
python3 - "http://127.0.0.1:$hooks_port/traces" "$work/traces.json" <<'EOF' ||
import json, sys, time, urllib.request
last = None
for _ in range(10):
    with urllib.request.urlopen(sys.argv[1], timeout=5) as r:
        figures = json.load(r)
    if last is not None and figures == last:
        break
    last = figures
    time.sleep(3)
json.dump(figures, open(sys.argv[2], "w"))
EOF
  fail "the trace collector did not answer"

python3 - "$work/hostile.json" "$MAX_RSS_GROWTH_MB" "$MAX_CPU_CORES" "$work/traces.json" \
  "$MAX_H2_RSS_GROWTH_MB" "$MAX_TRACESTATE_CHARS" "$MAX_TRACESTATE_MEMBERS" "${TOLERATED[@]}" <<'EOF'
import json, sys
report = json.load(open(sys.argv[1]))
max_rss_mb, max_cores = float(sys.argv[2]), float(sys.argv[3])
traces = json.load(open(sys.argv[4]))
max_h2_rss_mb, max_chars, max_members = float(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
tolerated = set(sys.argv[8:])
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
ran = {a["attack"] for a in h["by_attack"]}
h2_probe = h.get("h2_probe")
if any(a.startswith("h2_") for a in ran):
    if not h2_probe or not h2_probe["checks"] or h2_probe["failed"]:
        problems.append(f"good HTTP/2 client: {h2_probe and h2_probe['failed']} of "
                        f"{h2_probe and h2_probe['checks']} requests failed "
                        f"{h2_probe and h2_probe['failures']}")
if ran & {"trace_state", "trace_parent"}:
    if not traces.get("attack_spans"):
        problems.append(f"no span of the trace attacks reached the collector (tracing off?) {traces}")
    if traces["tracestate_chars_max"] > max_chars or traces["tracestate_members_max"] > max_members:
        problems.append(f"a span carried a tracestate of {traces['tracestate_chars_max']} characters, "
                        f"{traces['tracestate_members_max']} members (bound {max_chars}, {max_members})")
    if traces.get("malformed"):
        problems.append(f"{traces['malformed']} exports the collector could not read")
else:
    notes.append("no trace attack in the run")
for s in report["servers"]:
    if not s["alive_at_end"]:
        problems.append(f"herald pid {s['pid']} was gone at the end")

def growth(i):
    """RSS growth (MiB) of server i from before the attacks (the good clients connected) to
    the attack phase's peak, and its memory figures."""
    server = report["servers"][i]
    mem = next(m for m in h["memory"] if m["pid"] == server["pid"])
    baseline_kb = min(server["rss_after_connect_kb"] or mem["rss_attack_start_kb"], mem["rss_attack_start_kb"])
    return (mem["rss_peak_kb"] - baseline_kb) / 1024, baseline_kb, mem

server = report["servers"][0]
growth_mb, baseline_kb, mem = growth(0)
bound(growth_mb < max_rss_mb,
      f"RSS rose {growth_mb:.0f} MiB during the attacks (bound {max_rss_mb:.0f} MiB)",
      ["history_amplification"])
h2_growth_mb, h2_baseline_kb, h2_mem = growth(1)
bound(h2_growth_mb < max_h2_rss_mb,
      f"the HTTP/2 node's RSS rose {h2_growth_mb:.0f} MiB during the attacks (bound {max_h2_rss_mb:.0f} MiB)",
      ["h2_streams"])
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
      f"new-pattern probes {probe and probe['ok']} / {probe and probe['checks']}; "
      f"HTTP/2 probes {h2_probe and h2_probe['ok']} / {h2_probe and h2_probe['checks']}")
print(f"hostile-soak: spans exported {traces['spans']} ({traces['attack_spans']} of the trace attacks), "
      f"largest tracestate {traces['tracestate_chars_max']} characters / {traces['tracestate_members_max']} members "
      f"(bound {max_chars} / {max_members}), largest export {traces['export_bytes_max']} bytes")
print(f"hostile-soak: HTTP/2 node RSS {h2_baseline_kb // 1024} MiB before the attacks, "
      f"peak {h2_mem['rss_peak_kb'] // 1024}, end {h2_mem['rss_end_kb'] // 1024} "
      f"(+{h2_growth_mb:.0f} MiB, bound {max_h2_rss_mb:.0f})")
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
