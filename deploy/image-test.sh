#!/usr/bin/env bash
# deploy/image-test.sh: builds the repository's real Dockerfile with podman and runs the image
# the way a user would, then checks what the user sees:
#
#   1. the image's defaults obey the admin rule: with the admin listener on 0.0.0.0 and no
#      credentials the container exits 64 and says why, before binding anything;
#   2. the container runs as a non-root user;
#   3. its HEALTHCHECK (`herald health`) answers healthy, and fails with the reason on a node
#      that is alive but not ready (a Redis bridge with no Redis);
#   4. the admin API refuses a publish without the key and takes one with it, and an SSE
#      client outside the container receives the published message;
#   5. `podman stop` drains (the SSE client is told to reconnect) and the container exits 0
#      within the grace period, long before the stop timeout's SIGKILL;
#   and prints the image size and the build time.
#
# No container registry is reachable here, so the base images are made locally:
# `debootstrap --variant=minbase bookworm` gives a root filesystem that `podman import`
# turns into an image (a trimmed copy of it is the runtime base, like debian:bookworm-slim);
# the builder image adds Debian's rustc-web/cargo-web, a C toolchain and the host's CA
# certificates (HTTPS goes through a proxy whose CA is in /usr/local/share/ca-certificates;
# cargo in the builder must trust it to fetch crates). Both are cached: the root filesystem
# tarballs in $HERALD_IMAGE_CACHE (default ~/.cache/herald-images), the images in podman's
# storage, so a second run only rebuilds what changed.
#
# Machine facts this script follows (Debian bookworm host, podman 4.3, root): crun fails on
# the hybrid cgroups here, so every build and run uses `--runtime runc`; the hard limits are
# lower than podman's defaults, so ulimits are explicit; networking is `--network host` (the
# container binds free loopback ports given by environment variables); podman keeps
# HEALTHCHECK only with `--format docker`. Without systemd podman cannot schedule the
# periodic health check and logs "unable to get systemd connection": harmless here, the
# test runs the check itself with `podman healthcheck run`.
#
#   HERALD_IMAGE_CACHE   rootfs tarball cache (default ~/.cache/herald-images)
#   HERALD_IMAGE_TAG     tag of the image built (default localhost/herald:test)
#   HERALD_IMAGE_KEEP=1  keep the test container on failure (for `podman logs`)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

cache=${HERALD_IMAGE_CACHE:-${HOME:-/tmp}/.cache/herald-images}
tag=${HERALD_IMAGE_TAG:-localhost/herald:test}
base_full=localhost/herald-base:bookworm
base_slim=localhost/herald-base:bookworm-slim
builder=localhost/herald-builder:bookworm
container=herald-image-test-$$
stop_timeout=20 # podman stop -t: SIGKILL after this; the image's drain is 6 s
ulimits=(--ulimit nofile=16384:16384 --ulimit nproc=1024:1024)

log() { printf '[image-test] %s\n' "$*" >&2; }
passed=0
ok() {
  passed=$((passed + 1))
  log "ok: $*"
}
die() {
  printf '[image-test] ERROR: %s\n' "$*" >&2
  exit 1
}
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
seconds() { date +%s; }

missing=()
command -v podman >/dev/null || missing+=(podman)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v runc >/dev/null || missing+=(runc)
command -v curl >/dev/null || missing+=(curl)
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]} with apt-get"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
mkdir -p "$cache"
started=$(seconds)

# ------------------------------------------------------------------ base images (cached)
mirror=$(awk '/^URIs:/ && $2 ~ /debian$/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
mirror=${mirror:-http://deb.debian.org/debian}
if ! podman image exists "$base_full" || ! podman image exists "$base_slim"; then
  if [ ! -s "$cache/bookworm-minbase.tar" ] || [ ! -s "$cache/bookworm-slim.tar" ]; then
    log "debootstrap --variant=minbase bookworm from $mirror"
    t=$(seconds)
    root=$(mktemp -d "$cache/rootfs.XXXXXX")
    trap 'rm -rf "$root"' EXIT
    as_root debootstrap --variant=minbase bookworm "$root" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
      { tail -n 30 "$cache/debootstrap.log" >&2; die "debootstrap failed"; }
    security=${mirror%/debian}/debian-security
    printf 'deb %s bookworm main\ndeb %s bookworm-updates main\ndeb %s bookworm-security main\n' \
      "$mirror" "$mirror" "$security" >"$root/etc/apt/sources.list"
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    tar -C "$root" --numeric-owner -cf "$cache/bookworm-minbase.tar.tmp" .
    # The runtime base: what debian:bookworm-slim leaves out (docs, man pages, locales).
    rm -rf "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
      "$root"/usr/share/locale/* "$root"/var/cache/debconf/*-old "$root"/var/log/*
    tar -C "$root" --numeric-owner -cf "$cache/bookworm-slim.tar.tmp" .
    mv "$cache/bookworm-minbase.tar.tmp" "$cache/bookworm-minbase.tar"
    mv "$cache/bookworm-slim.tar.tmp" "$cache/bookworm-slim.tar"
    rm -rf "$root"
    trap - EXIT
    log "root filesystems made in $(($(seconds) - t)) s"
  fi
  podman import --quiet "$cache/bookworm-minbase.tar" "$base_full" >/dev/null
  podman import --quiet "$cache/bookworm-slim.tar" "$base_slim" >/dev/null
fi

# The builder: the host's CA certificates are part of this local image only, never of the
# Dockerfile. Rebuilt when they change (podman's layer cache keys on the copied files).
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/ca"
cp /usr/local/share/ca-certificates/*.crt "$ctx/ca/" 2>/dev/null || true
cat >"$ctx/Containerfile" <<EOF
FROM $base_full
COPY ca/ /usr/local/share/ca-certificates/
RUN apt-get update -qq \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \\
      rustc-web cargo-web gcc g++ make cmake pkg-config libssl-dev libc6-dev binutils ca-certificates \\
 && update-ca-certificates \\
 && rm -rf /var/lib/apt/lists/* \\
 && cargo --version && rustc --version
EOF
log "builder image $builder"
t=$(seconds)
podman build --quiet --format docker --runtime runc --network host "${ulimits[@]}" \
  -t "$builder" "$ctx" >/dev/null
log "builder ready in $(($(seconds) - t)) s"

# ------------------------------------------------------------------ the real Dockerfile
log "podman build $tag from ./Dockerfile"
t=$(seconds)
podman build --format docker --runtime runc --network host "${ulimits[@]}" \
  --build-arg BUILDER_IMAGE="$builder" --build-arg RUNTIME_IMAGE="$base_slim" \
  -t "$tag" . >"$cache/build.log" 2>&1 || { tail -n 60 "$cache/build.log" >&2; die "podman build failed"; }
build_seconds=$(($(seconds) - t))
log "image built in $build_seconds s"
[ "$(podman image inspect -f '{{.Config.User}}' "$tag")" = "10001:10001" ] || die "image user is not 10001:10001"
podman image inspect -f '{{json .Config.Healthcheck}}' "$tag" | grep -q 'herald' ||
  die "the image has no HEALTHCHECK (built without --format docker?)"
[ "$(podman image inspect -f '{{.Config.StopSignal}}' "$tag")" = SIGTERM ] || die "STOPSIGNAL is not SIGTERM"
ok "image metadata: user 10001:10001, HEALTHCHECK herald health, STOPSIGNAL SIGTERM"

# ------------------------------------------------------------------ run it
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# Ports, set by take_port (deploy/lib.sh).
public="" admin="" refused_admin="" unready_public="" unready_admin="" no_redis=""
cleanup() {
  [ -n "${sse_pid:-}" ] && kill "$sse_pid" 2>/dev/null || true
  if [ "${HERALD_IMAGE_KEEP:-}" != 1 ]; then podman rm -f --ignore "$container" "$container-refused" "$container-unready" >/dev/null 2>&1 || true; fi
  rm -rf "$ctx"
}
trap cleanup EXIT
run=(podman run --runtime runc "${ulimits[@]}" --network host)

# 1. The image's own defaults: admin on 0.0.0.0 without credentials is refused (exit 64).
take_port public
take_port refused_admin
log "check: the image's defaults refuse an unauthenticated admin listener"
set +e
refused=$("${run[@]}" --name "$container-refused" -e HERALD_LISTEN="127.0.0.1:$public" \
  -e HERALD_ADMIN_LISTEN="0.0.0.0:$refused_admin" "$tag" 2>&1)
code=$?
set -e
[ "$code" = 64 ] || die "expected exit 64 without admin credentials, got $code: $refused"
grep -q 'HERALD_ADMIN_API_KEYS' <<<"$refused" || die "the refusal does not say what to set: $refused"
podman rm -f "$container-refused" >/dev/null
ok "without admin credentials the image exits 64 and names HERALD_ADMIN_API_KEYS"

# 2-5. A configured container.
take_port public
take_port admin
key=$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')
log "run: public 127.0.0.1:$public, admin 127.0.0.1:$admin"
"${run[@]}" -d --name "$container" -e HERALD_LISTEN="127.0.0.1:$public" \
  -e HERALD_ADMIN_LISTEN="127.0.0.1:$admin" -e HERALD_ADMIN_API_KEYS="$key" "$tag" >/dev/null

deadline=$(($(seconds) + 30))
until curl -fsS "http://127.0.0.1:$admin/readyz" >/dev/null 2>&1; do
  [ "$(podman inspect -f '{{.State.Running}}' "$container")" = true ] ||
    { podman logs "$container" >&2; die "the container exited"; }
  [ "$(seconds)" -lt "$deadline" ] || { podman logs "$container" >&2; die "not ready within 30 s"; }
  sleep 0.2
done

pid=$(podman inspect -f '{{.State.Pid}}' "$container")
uid=$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")
[ "$uid" != 0 ] || die "herald runs as root in the container"
ok "runs as uid $uid"

podman healthcheck run "$container" >/dev/null || die "the HEALTHCHECK (herald health) failed"
ok "HEALTHCHECK answers healthy"

publish() { # publish KEY -> HTTP status
  curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$admin/v1/publish" \
    -H 'content-type: application/json' ${1:+-H "x-api-key: $1"} \
    -d '{"topic":"image-test","data":{"hello":"from the image test"}}'
}
[ "$(publish '')" = 401 ] || die "the admin API published without credentials"
sse_out=$(mktemp)
curl -sN "http://127.0.0.1:$public/v1/sse?topic=image-test" >"$sse_out" &
sse_pid=$!
deadline=$(($(seconds) + 10))
until curl -s -H "x-api-key: $key" "http://127.0.0.1:$admin/v1/topics/image-test" | grep -q '"subscribers":1'; do
  [ "$(seconds)" -lt "$deadline" ] || die "the SSE client did not subscribe"
  sleep 0.1
done
[ "$(publish "$key")" = 200 ] || die "publish with the key was refused"
deadline=$(($(seconds) + 10))
until grep -q 'from the image test' "$sse_out"; do
  [ "$(seconds)" -lt "$deadline" ] || die "the SSE client did not receive the message: $(cat "$sse_out")"
  sleep 0.1
done
ok "the admin API wants the key; an SSE client received the published message"

# The health check fails when the node is alive but not ready (its Redis is not there).
take_port unready_admin
take_port unready_public
take_port no_redis
"${run[@]}" -d --name "$container-unready" -e HERALD_LISTEN="127.0.0.1:$unready_public" \
  -e HERALD_ADMIN_LISTEN="127.0.0.1:$unready_admin" -e HERALD_ADMIN_API_KEYS="$key" \
  -e HERALD_REDIS_URL="redis://127.0.0.1:$no_redis" "$tag" >/dev/null
deadline=$(($(seconds) + 30))
until curl -fsS "http://127.0.0.1:$unready_admin/healthz" >/dev/null 2>&1; do
  [ "$(seconds)" -lt "$deadline" ] || { podman logs "$container-unready" >&2; die "the unready container never came up"; }
  sleep 0.2
done
if podman healthcheck run "$container-unready" >/dev/null 2>&1; then
  die "the HEALTHCHECK passed on a node whose bridge is down"
fi
reason=$(podman exec "$container-unready" /usr/local/bin/herald health 2>&1 || true)
grep -q 'redis: not ready' <<<"$reason" || die "herald health gave no reason: $reason"
podman rm -f --ignore "$container-unready" >/dev/null 2>&1
ok "HEALTHCHECK fails on a node that is alive but not ready: $reason"

t0=$(date +%s.%N)
podman stop -t "$stop_timeout" "$container" >/dev/null
stopped=$(python3 -c "print(round($(date +%s.%N) - $t0, 1))")
exit_code=$(podman inspect -f '{{.State.ExitCode}}' "$container")
[ "$exit_code" = 0 ] || { podman logs "$container" >&2; die "exit code $exit_code after podman stop (137 = SIGKILL)"; }
python3 -c "import sys; sys.exit(0 if $stopped < 10 else 1)" ||
  die "podman stop took ${stopped}s; the drain should end within the image's 6 s grace"
wait "$sse_pid" 2>/dev/null || true
sse_pid=
grep -q '^event: herald.shutdown' "$sse_out" || die "the SSE client got no reconnect hint on drain"
podman logs "$container" 2>&1 | grep -q '"stopped"' || die "no 'stopped' log line after the drain"
ok "podman stop drained the SSE client and exited 0 in ${stopped}s (stop timeout ${stop_timeout}s)"
rm -f "$sse_out"

size=$(podman image inspect -f '{{.Size}}' "$tag")
log "image $tag: $((size / 1000000)) MB ($size bytes), build ${build_seconds}s, whole test $(($(seconds) - started))s"
echo "image-test: $passed passed, 0 failed"
