#!/usr/bin/env bash
# deploy/engines/tls.sh: the test TLS material in $STATE_DIR/tls, made with openssl: a CA,
# a server certificate for 127.0.0.1/localhost and a client certificate; when the JDK's
# keytool is there, the Kafka broker's keystore and truststore made from them. Kafka,
# the TLS Redis and the Redis Cluster need it; nothing runs.
#
#   deploy/engines/tls.sh start    make fresh material; prints
#                                  export HERALD_TEST_TLS_CA=... HERALD_TEST_TLS_CLIENT_CERT=...
#                                  HERALD_TEST_TLS_CLIENT_KEY=...
#   deploy/engines/tls.sh stop     nothing to stop: the material is kept (as engines.sh stop
#                                  keeps it); the next `start` makes a new one
#   deploy/engines/tls.sh status   whether the material is there
#   deploy/engines/tls.sh env      print its export line

# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
PART_LOADED["tls"]=1

# The PEM files, once; then the PKCS12 stores whenever keytool is there and they are not.
make_tls_material() {
    if [[ ! -f $TLS_DIR/.complete ]]; then
        command -v openssl >/dev/null 2>&1 || apt_install openssl
        rm -rf "$TLS_DIR"
        mkdir -p "$TLS_DIR"
        log "making test certificates in $TLS_DIR"
        if ! (
            set -e
            cd "$TLS_DIR"
            openssl req -x509 -newkey rsa:2048 -nodes -days 3 -subj "/CN=Herald test CA" \
                -keyout ca.key -out ca.pem
            printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' >server.ext
            openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout server.key -out server.csr
            openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3 \
                -extfile server.ext -out server.pem
            printf 'extendedKeyUsage=clientAuth\n' >client.ext
            openssl req -newkey rsa:2048 -nodes -subj "/CN=herald-client" -keyout client.key -out client.csr
            openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3 \
                -extfile client.ext -out client.pem
            make_keystores
        ) >"$STATE_DIR/tls.log" 2>&1 || ! tls_files_ok; then
            tail_log "$STATE_DIR/tls.log"
            die "could not make the test certificates"
        fi
        touch "$TLS_DIR/.complete"
    elif [[ ! -f $TLS_DIR/truststore.p12 ]] && command -v keytool >/dev/null 2>&1; then
        # Made earlier without a JDK (tls.sh or redis-tls.sh alone); Kafka needs the stores.
        if ! (cd "$TLS_DIR" && make_keystores) >>"$STATE_DIR/tls.log" 2>&1 || ! tls_files_ok; then
            tail_log "$STATE_DIR/tls.log"
            die "could not make the Kafka keystores"
        fi
    fi
}

# In $TLS_DIR: the broker's keystore and the truststore, if keytool is there.
make_keystores() {
    command -v keytool >/dev/null 2>&1 || return 0
    openssl pkcs12 -export -in server.pem -inkey server.key -certfile ca.pem -name broker \
        -passout "pass:$STORE_PASS" -out broker-openssl.p12
    keytool -importkeystore -noprompt -srckeystore broker-openssl.p12 -srcstoretype PKCS12 \
        -srcstorepass "$STORE_PASS" -destkeystore broker.p12 -deststoretype PKCS12 \
        -deststorepass "$STORE_PASS"
    keytool -importcert -noprompt -alias herald-ca -file ca.pem -keystore truststore.p12 \
        -storetype PKCS12 -storepass "$STORE_PASS"
}

# True if every file is there. (`set -e` is ignored in a subshell left of `||`, so a failed
# step is caught here.)
tls_files_ok() {
    local f files=(ca.pem server.pem server.key client.pem client.key)
    command -v keytool >/dev/null 2>&1 && files+=(broker.p12 truststore.p12)
    for f in "${files[@]}"; do
        [[ -s $TLS_DIR/$f ]] || return 1
    done
}

tls_prepare() { make_tls_material; }
tls_env() {
    if [[ -f $TLS_DIR/ca.pem ]]; then
        printf 'export HERALD_TEST_TLS_CA=%s HERALD_TEST_TLS_CLIENT_CERT=%s HERALD_TEST_TLS_CLIENT_KEY=%s\n' \
            "$TLS_DIR/ca.pem" "$TLS_DIR/client.pem" "$TLS_DIR/client.key"
    fi
}
tls_reset() { rm -rf "$TLS_DIR"; }
tls_status() {
    if [[ -f $TLS_DIR/.complete ]]; then
        printf 'tls: made, %s\n' "$TLS_DIR"
    else
        printf 'tls: not made\n'
    fi
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    engines_main tls "${BASH_SOURCE[0]}" "$@"
fi
