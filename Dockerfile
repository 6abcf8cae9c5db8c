# Herald gateway image: `docker build -t herald .` then
#   docker run -p 8080:8080 -p 127.0.0.1:9090:9090 herald
# Port 8080 is the public listener; 9090 is the admin listener (publish API, metrics, health):
# publish it only to a private interface.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin herald \
 && strip target/release/herald

FROM debian:bookworm-slim
RUN useradd --system --uid 10001 --no-create-home herald
COPY --from=build /src/target/release/herald /usr/local/bin/herald
# Inside a container the admin listener must bind all interfaces to be reachable at all;
# keep its published port private.
ENV HERALD_LISTEN=0.0.0.0:8080 \
    HERALD_ADMIN_LISTEN=0.0.0.0:9090 \
    HERALD_LOG_FORMAT=json
EXPOSE 8080 9090
USER herald
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/herald"]
