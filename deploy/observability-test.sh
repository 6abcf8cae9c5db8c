#!/usr/bin/env bash
# deploy/observability-test.sh: checks Herald's Prometheus rules and Grafana dashboard.
#
#   1. promtool check rules / promtool test rules on deploy/prometheus/alerts.yaml and its
#      unit tests (alerts.test.yaml);
#   2. a real Prometheus scraping a real Herald (with a real Redis bridge) under light load
#      from herald-loadgen runs every PromQL expression of deploy/grafana/herald.json and of
#      the rules (deploy/prometheus/observability_test.py says what is checked).
#
# Installs Debian's prometheus package (server and promtool) if missing, without starting its
# service; builds herald and herald-loadgen (debug) with cargo. Everything listens on free
# 127.0.0.1 ports; the Redis comes from deploy/engines.sh in a state dir of its own.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
  echo "[observability] installing Debian's prometheus (promtool and server)" >&2
  as_root apt-get update -qq
  # Keep the package's own service from starting (it would take port 9090).
  policy_added=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | as_root tee /usr/sbin/policy-rc.d >/dev/null
    as_root chmod +x /usr/sbin/policy-rc.d
    policy_added=1
  fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  [ -n "$policy_added" ] && as_root rm -f /usr/sbin/policy-rc.d
fi

(cd deploy/prometheus && promtool check rules alerts.yaml && promtool test rules alerts.test.yaml)

cargo build --quiet -p herald-gateway --bin herald -p herald-loadgen --bin herald-loadgen
target_dir=${CARGO_TARGET_DIR:-$repo/target}
work="$target_dir/observability"
rm -rf "$work"
mkdir -p "$work"
export HERALD_ENGINES_DIR="$work/engines"
trap '"$repo/deploy/engines.sh" stop >/dev/null 2>&1 || true' EXIT
eval "$("$repo/deploy/engines.sh" start --redis)"

python3 deploy/prometheus/observability_test.py \
  --herald "$target_dir/debug/herald" --loadgen "$target_dir/debug/herald-loadgen" \
  --redis-url "$HERALD_TEST_REDIS_URL" --workdir "$work"
