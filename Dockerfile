# Herald gateway image.
#
#   docker build -t herald .
#   docker run --rm -p 8080:8080 -p 127.0.0.1:9090:9090 \
#     -e HERALD_ADMIN_API_KEYS="$(openssl rand -hex 24)" herald
#
# Port 8080 is the public listener (SSE, WebSocket, long-poll). Port 9090 is the admin
# listener (publish API, topic stats, /metrics, /healthz, /readyz). In the image it binds
# all interfaces, so it REQUIRES credentials: set HERALD_ADMIN_API_KEYS (sent as `x-api-key`
# or `Authorization: Bearer`), or the container exits 64 with the reason. /healthz, /readyz
# and /metrics stay open. HERALD_ADMIN_INSECURE=true lifts the rule on a trusted network.
#
# Stopping: SIGTERM starts the drain, which lasts at most HERALD_SHUTDOWN_GRACE (6s here), so
# the process exits before `docker stop`'s default 10 s timeout sends SIGKILL. Raise both
# together, e.g. `-e HERALD_SHUTDOWN_GRACE=25s` with `docker run --stop-timeout 30` or
# `docker stop -t 30` (compose: `stop_grace_period`, Kubernetes:
# `terminationGracePeriodSeconds`).
#
# Base images are build arguments, so the image builds without a registry too:
#   BUILDER_IMAGE  Debian-based, Rust >= 1.88 with cargo on PATH, a C compiler, make, cmake,
#                  pkg-config and libssl-dev (librdkafka is built from source, with SSL)
#   RUNTIME_IMAGE  Debian bookworm (glibc 2.36) or newer
ARG BUILDER_IMAGE=rust:1-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

FROM ${BUILDER_IMAGE} AS build
WORKDIR /src
# No debug line tables: the binary is stripped anyway, and they cost build time.
ENV CARGO_TERM_COLOR=never CARGO_INCREMENTAL=0 CARGO_PROFILE_RELEASE_DEBUG=false

# 1. Dependencies, in a layer of their own: only the manifests and the lock file are copied,
#    with empty sources for every target, so editing Herald's code does not rebuild
#    librdkafka and the other dependencies. (The benches' stubs are named from
#    benches/Cargo.toml; a new workspace member or other declared target needs a stub here
#    too: deploy/image-test.sh builds this file, so a missing one fails there.)
COPY Cargo.toml Cargo.lock ./
COPY crates/core/Cargo.toml crates/core/
COPY crates/gateway/Cargo.toml crates/gateway/
COPY crates/loadgen/Cargo.toml crates/loadgen/
COPY benches/Cargo.toml benches/
RUN mkdir -p crates/core/src crates/gateway/src crates/loadgen/src benches/benches \
 && touch crates/core/src/lib.rs crates/gateway/src/lib.rs crates/loadgen/src/lib.rs benches/lib.rs \
 && echo 'fn main() {}' > crates/gateway/src/main.rs \
 && echo 'fn main() {}' > crates/loadgen/src/main.rs \
 && for b in $(awk -F'"' '/^\[\[bench\]\]/ {b = 1; next} b && /^name/ {print $2; b = 0}' benches/Cargo.toml); do \
      echo 'fn main() {}' > "benches/benches/$b.rs"; done \
 && cargo build --release --locked -p herald-gateway --bin herald \
 && rm -rf crates/core/src crates/gateway/src

# 2. Herald itself. Touching the sources makes them newer than the stubs' build output.
COPY crates/core crates/core
COPY crates/gateway crates/gateway
RUN find crates/core/src crates/gateway/src -name '*.rs' -exec touch {} + \
 && cargo build --release --locked -p herald-gateway --bin herald \
 && cp target/release/herald /usr/local/bin/herald \
 && strip /usr/local/bin/herald \
 && /usr/local/bin/herald --version

FROM ${RUNTIME_IMAGE}
# OpenSSL for librdkafka's SSL/SASL_SSL (Kafka over TLS), and the CA certificates that TLS to
# managed Redis and Kafka verifies against.
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libssl3 ca-certificates \
 && apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
COPY --from=build /usr/local/bin/herald /usr/local/bin/herald
# Listeners on every interface (a container's own network namespace); the admin listener
# then needs HERALD_ADMIN_API_KEYS (see above). The drain fits in docker stop's default 10 s.
ENV HERALD_LISTEN=0.0.0.0:8080 \
    HERALD_ADMIN_LISTEN=0.0.0.0:9090 \
    HERALD_LOG_FORMAT=json \
    HERALD_SHUTDOWN_GRACE=6s
EXPOSE 8080 9090
# A numeric, non-root user (no /etc/passwd entry needed; Kubernetes' runAsNonRoot can check it).
USER 10001:10001
STOPSIGNAL SIGTERM
# `herald health` asks the admin listener's /readyz (127.0.0.1 when it binds 0.0.0.0); no
# curl needed. Unhealthy while draining, too.
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
  CMD ["/usr/local/bin/herald", "health"]
ENTRYPOINT ["/usr/local/bin/herald"]
