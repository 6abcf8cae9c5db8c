#!/usr/bin/env bash
# deploy/engines/redis-tls.sh: a Redis with TLS only (no plaintext port), client
# certificates required (tls.sh's CA), and an ACL user; the default user is off.
#
#   deploy/engines/redis-tls.sh start    start it fresh; prints
#                                        export HERALD_TEST_REDIS_TLS_URL=rediss://USER:PASS@127.0.0.1:PORT
#                                        and (tls.sh) the HERALD_TEST_TLS_* files
#   deploy/engines/redis-tls.sh stop     stop it, remove its dir
#   deploy/engines/redis-tls.sh status   whether it runs (rx/tls), its pid and port
#   deploy/engines/redis-tls.sh env      print its export lines
#
# deploy/engines.sh kill-node tls / start-node tls: fault injection on it.

# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
PART_LOADED["redis-tls"]=1
PART_NEEDS["redis-tls"]=tls

redis_tls_prepare() { ensure_redis; }
redis_tls_start() {
    local dir=$RX_DIR/tls port
    rx_prepare tls
    port=$(rx_port tls)
    printf '%s\n' --port 0 --tls-port "$port" --tls-cert-file "$TLS_DIR/server.pem" \
        --tls-key-file "$TLS_DIR/server.key" --tls-ca-cert-file "$TLS_DIR/ca.pem" \
        --tls-auth-clients yes --user default off \
        --user "$SECRET_USER" on ">$REDIS_SECRET" '~*' '&*' '+@all' >"$dir/args"
    printf '%s\n' --tls --cacert "$TLS_DIR/ca.pem" --cert "$TLS_DIR/client.pem" \
        --key "$TLS_DIR/client.key" --user "$SECRET_USER" --pass "$REDIS_SECRET" \
        --no-auth-warning >"$dir/cli"
    rx_launch tls
}
redis_tls_env() {
    local port
    if port=$(rx_port tls 2>/dev/null); then
        printf 'export HERALD_TEST_REDIS_TLS_URL=rediss://%s:%s@127.0.0.1:%s\n' \
            "$SECRET_USER" "$REDIS_SECRET" "$port"
    fi
}
redis_tls_procs() { printf '%s\n' rx/tls; }
redis_tls_clean() { rx_remove tls; }
redis_tls_reset() { rx_remove tls; }
redis_tls_forget() { rx_remove tls; }

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    engines_main redis-tls "${BASH_SOURCE[0]}" "$@"
fi
