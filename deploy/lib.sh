#!/usr/bin/env bash
# deploy/lib.sh: what deploy/'s scripts share (sourced, not run): free ports on 127.0.0.1.
# deploy/engines/common.sh sources it for the engines; chaos.sh, image-test.sh and the bench
# scripts source it for their servers.
#
#   pick_port           print a port nothing is bound to, below the ephemeral range, and
#                       not handed out before by this shell (run it as `pick_port >FILE`,
#                       not in a $(subshell), which would forget what it handed out)
#   pick_port_in LO HI  the same, drawn from LO..HI
#   take_port VAR [LO HI]  pick_port (or pick_port_in) into the variable VAR
#   port_bindable PORT  true if a server could bind 127.0.0.1:PORT now
#   port_listening PORT true if something accepts TCP connections on 127.0.0.1:PORT

[[ -n ${DEPLOY_LIB_LOADED:-} ]] && return 0
DEPLOY_LIB_LOADED=1

# True if something accepts TCP connections on 127.0.0.1:PORT.
port_listening() {
    # shellcheck disable=SC2016 # $1 is expanded by the inner bash
    timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$1" 2>/dev/null
}

# True if a server could bind 127.0.0.1:PORT now (with SO_REUSEADDR, as Redis and Kafka do).
port_bindable() {
    local port=$1
    if command -v python3 >/dev/null 2>&1; then
        python3 -c '
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(1)
' "$port" 2>/dev/null
    elif port_listening "$port"; then
        return 1
    fi
}

PICKED_PORTS=()
# Print a free port from 20000 to just BELOW the kernel's ephemeral range: no client
# connection can then take it as its local port, neither while a server is down (fault
# injection, restarted on the same port) nor on a machine whose many client sockets fill the
# ephemeral range (benchmarks).
pick_port() {
    local eph_lo hi=60999
    if read -r eph_lo _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null && [[ $eph_lo -gt 21000 ]]; then
        hi=$((eph_lo - 1))
    fi
    pick_port_in 20000 "$hi"
}

# Print a free port drawn at random from LO..HI.
pick_port_in() { # LO HI
    local lo=$1 hi=$2 span port tries
    span=$((hi - lo + 1))
    for ((tries = 0; tries < 200; tries++)); do
        port=$((lo + (RANDOM * 32768 + RANDOM) % span))
        [[ " ${PICKED_PORTS[*]} " == *" $port "* ]] && continue
        port_bindable "$port" || continue
        PICKED_PORTS+=("$port")
        printf '%s\n' "$port"
        return 0
    done
    printf 'pick_port: no free port in %s-%s\n' "$lo" "$hi" >&2
    return 1
}

# Set the variable VAR to pick_port's port (pick_port_in's with LO HI), in this shell, so
# that the next pick knows it was handed out.
take_port() { # VAR [LO HI]
    if [[ $# -ge 3 ]]; then pick_port_in "$2" "$3" >/dev/null; else pick_port >/dev/null; fi
    printf -v "$1" '%s' "${PICKED_PORTS[-1]}"
}
