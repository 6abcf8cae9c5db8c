#!/usr/bin/env bash
# Runs Herald's whole test suite: unit tests, in-process integration tests against a real
# gateway, the CLI tests, the TypeScript client's build and unit tests, the Go client's tests
# (where Go is installed), and the headless-browser tests (the demo page, the client, the
# admin console), then the hostile-client soak against a release build and the chaos soak on
# a three-node cluster. Installs what the tests need on a fresh Debian machine first. Extra
# arguments are passed to `cargo test`.
#
#   HERALD_SKIP_BROWSER=1  skip the browser test (and installing Chromium / npm packages)
#   HERALD_SKIP_CHAOS=1    skip the 2-minute chaos soak (deploy/chaos.sh)
#   HERALD_SKIP_CONFORMANCE=1  skip the clients' conformance suite (clients/conformance: every
#                          scenario against the Python, JavaScript and Go clients; ~2 minutes)
#   HERALD_SKIP_SOAK=1     skip the hostile-client soak (deploy/hostile-soak.sh: a release
#                          build under the loadgen's attack catalogue for a minute)
#   HERALD_SHIP_TESTS=1    then run deploy/deploy-test.sh and deploy/image-test.sh too
#                          (Helm, compose, rules, dashboard, container image; CI runs them
#                          as steps of their own)
#
# The cluster tests run against a real Redis and a real Kafka broker, which
# deploy/engines.sh installs (Debian's redis-server and redis-sentinel; Kafka's jars from Maven
# Central, cached) and starts on free ports for the length of the run, with the production
# modes beside them: a TLS-only Redis with an ACL user, a Sentinel set, a Redis Cluster, and
# SASL_SSL and SSL listeners on the broker (tests/engines/). The tracing tests check traces
# in a real Jaeger (built once with Go into the engines' cache; tests/gateway/traces.rs).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

# engines.sh and its parts: syntax, shellcheck, each part alone, a plain Redis (~10 s).
"$repo/deploy/engines-test.sh"

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

# The hostile soak makes a CA and a certificate for its TLS node (HTTP/2 attacks).
if ! command -v openssl >/dev/null 2>&1; then
  echo "deploy/test.sh: installing openssl for the hostile soak's certificates" >&2
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >/dev/null
fi

if [ "${HERALD_SKIP_BROWSER:-}" != 1 ]; then
  # Debian's Chromium (no browser download), driven by playwright-core from npm.
  if ! command -v chromium >/dev/null 2>&1; then
    echo "deploy/test.sh: installing Debian's chromium for the browser test" >&2
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  fi
  npm ci --prefix crates/gateway/tests/browser --no-audit --no-fund --loglevel=error
fi

# The TypeScript client: its build (which the browser tests load) and its unit tests.
npm ci --prefix clients/js --no-audit --no-fund --loglevel=error
npm test --prefix clients/js

# The Go client (clients/go): its unit tests (httptest fakes) and its integration tests
# against the debug gateway, built first (cargo test below reuses the build). Skipped, with a
# message, where there is no Go. Go's own install directory joins PATH when it was not on it,
# so that the conformance suite below finds `go` for the Go runner too.
go_bin=$(command -v go || echo /usr/local/go/bin/go)
if [ -x "$go_bin" ]; then
  command -v go >/dev/null 2>&1 || export PATH="$PATH:${go_bin%/*}"
  cargo build --bin herald
  (cd clients/go && HERALD_BIN="$repo/target/debug/herald" HERALD_REQUIRE_INTEGRATION=1 "$go_bin" test ./...)
else
  echo "deploy/test.sh: no go on PATH: skipping the Go client's tests (clients/go)" >&2
fi

# Real engines for the cluster tests, stopped again however the run ends.
export HERALD_ENGINES_DIR="${HERALD_ENGINES_DIR:-$repo/target/engines}"
trap '"$repo/deploy/engines.sh" stop >&2 || true' EXIT
eval "$("$repo/deploy/engines.sh" start)"

# Every engine test runs here: under HERALD_REQUIRE_ENGINES=1 a test whose engine variable is
# missing fails instead of skipping, as it does in a plain `cargo test`
# (crates/gateway/tests/gateway/common/mod.rs, `engine`).
HERALD_REQUIRE_ENGINES=1 cargo test --workspace "$@"

# The clients' conformance suite (clients/conformance/README.md): every scenario against every
# client's runner (Python, JavaScript on clients/js/dist built above, Go where `go` and
# clients/go exist), each on fresh nodes of the debug build behind Toxiproxy (installed with
# Go, cached, as deploy/chaos.sh does) and an HTTP-aware gate, the cluster scenarios on the
# engines' Redis. The Python client's type check (mypy --strict) and its own tests first. A
# virtual environment in target/ holds heraldpush (from ./clients/python), pytest and mypy.
if [ "${HERALD_SKIP_CONFORMANCE:-}" != 1 ]; then
  cargo build --bin herald
  venv=$repo/target/conformance-venv
  if [ ! -x "$venv/bin/python" ] && ! python3 -m venv "$venv" >/dev/null 2>&1; then
    rm -rf "$venv"
    echo "deploy/test.sh: installing Debian's python3-venv for the conformance suite" >&2
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv "$venv"
  fi
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check ./clients/python pytest mypy
  (cd clients/python && "$venv/bin/python" -m mypy)
  "$venv/bin/python" -m pytest -q -p no:cacheprovider clients/python/tests clients/conformance/harness
fi

# The hostile-client soak: release builds of herald and herald-loadgen, the whole attack
# catalogue for a minute while good clients must receive every message and Herald's RSS and
# CPU stay bounded (docs/security.md, "The hostile soak").
if [ "${HERALD_SKIP_SOAK:-}" != 1 ]; then
  "$repo/deploy/hostile-soak.sh"
fi

# Proof under faults: 2 minutes of faults on a three-node cluster (Redis with Sentinel, Kafka,
# Toxiproxy on every link) while 300 clients reconnect, switch transport and are checked
# message by message; fails on any silent gap, duplicate, reorder or client that never
# recovered. Its own engines (target/chaos), stopped when it ends; HERALD_SKIP_CHAOS=1 skips it.
if [ "${HERALD_SKIP_CHAOS:-}" != 1 ]; then
  "$repo/deploy/chaos.sh" 120s
fi

if [ "${HERALD_SHIP_TESTS:-}" = 1 ]; then
  "$repo/deploy/deploy-test.sh"
  "$repo/deploy/image-test.sh"
fi
