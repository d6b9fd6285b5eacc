#!/usr/bin/env bash
# A throwaway local container registry for the quickstart, the benchmark and manual poking.
#
# Usage:
#   scripts/lab-registry.sh start [PORT]   # default 5000; 0 or a busy port: any free port
#   scripts/lab-registry.sh status         # prints 127.0.0.1:PORT, exit 3 when not running
#   scripts/lab-registry.sh stop           # stops it and deletes its storage
#
# `start` prints the registry address (127.0.0.1:PORT) as the last line on stdout.
# It runs Debian's `docker-registry` (CNCF distribution 2.8) on loopback, plain HTTP, no auth,
# with storage in a fresh directory under the state directory:
#   TAGPILOT_LAB_DIR (default: ${TMPDIR:-/tmp}/tagpilot-lab)
# which also holds config.yml, registry.pid, registry.addr and registry.log (the access log).
# Several labs can run side by side with different TAGPILOT_LAB_DIR values.
set -euo pipefail

STATE_DIR="${TAGPILOT_LAB_DIR:-${TMPDIR:-/tmp}/tagpilot-lab}"
REGISTRY_BIN="${TAGPILOT_REGISTRY_BIN:-/usr/bin/docker-registry}"
PID_FILE="$STATE_DIR/registry.pid"
ADDR_FILE="$STATE_DIR/registry.addr"
LOG_FILE="$STATE_DIR/registry.log"
CONFIG_FILE="$STATE_DIR/config.yml"

die() {
    echo "lab-registry: $*" >&2
    exit 1
}

running_pid() {
    local pid
    [[ -f "$PID_FILE" ]] || return 1
    pid="$(cat "$PID_FILE")"
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
    echo "$pid"
}

port_is_free() {
    python3 - "$1" <<'PY'
import socket, sys
s = socket.socket()
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(1)
finally:
    s.close()
PY
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

answers_v2() {
    local url="http://$1/v2/"
    if command -v curl >/dev/null; then
        curl -fsS -o /dev/null --max-time 2 "$url" 2>/dev/null
    else
        python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "$url" 2>/dev/null
    fi
}

cmd_start() {
    local port="${1:-5000}" pid addr storage
    if pid="$(running_pid)"; then
        addr="$(cat "$ADDR_FILE")"
        echo "lab-registry: already running (pid $pid) on $addr" >&2
        echo "$addr"
        return 0
    fi
    [[ -x "$REGISTRY_BIN" ]] || die "$REGISTRY_BIN not found: install the Debian package docker-registry"
    [[ "$port" =~ ^[0-9]+$ ]] || die "port must be a number, got '$port'"
    if ((port == 0)); then
        port="$(free_port)"
    elif ! port_is_free "$port"; then
        local wanted="$port"
        port="$(free_port)"
        echo "lab-registry: port $wanted is busy, using $port" >&2
    fi
    addr="127.0.0.1:$port"

    mkdir -p "$STATE_DIR"
    # A fresh storage directory per start: a lab never sees images from an earlier run.
    rm -rf "$STATE_DIR"/storage.*
    storage="$(mktemp -d "$STATE_DIR/storage.XXXXXX")"
    cat >"$CONFIG_FILE" <<EOF
version: 0.1
log:
  level: info
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: $storage
  delete:
    enabled: true
  cache:
    blobdescriptor: inmemory
http:
  addr: $addr
  secret: tagpilot-lab-not-a-secret
  headers:
    X-Content-Type-Options: [nosniff]
EOF
    : >"$LOG_FILE"
    # setsid: the registry must outlive this script and not get the caller's Ctrl-C.
    setsid "$REGISTRY_BIN" serve "$CONFIG_FILE" >>"$LOG_FILE" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$PID_FILE"
    echo "$addr" >"$ADDR_FILE"

    local i
    for ((i = 0; i < 100; i++)); do
        if answers_v2 "$addr"; then
            echo "lab-registry: running (pid $pid) on $addr, storage $storage, log $LOG_FILE" >&2
            echo "$addr"
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    tail -n 20 "$LOG_FILE" >&2 || true
    kill "$pid" 2>/dev/null || true
    rm -f "$PID_FILE" "$ADDR_FILE"
    die "registry did not answer on http://$addr/v2/ (log above: $LOG_FILE)"
}

cmd_stop() {
    local pid i
    if pid="$(running_pid)"; then
        kill "$pid"
        for ((i = 0; i < 50; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
            kill -9 "$pid" 2>/dev/null || true
        fi
        echo "lab-registry: stopped (pid $pid)" >&2
    else
        echo "lab-registry: not running" >&2
    fi
    rm -f "$PID_FILE" "$ADDR_FILE"
    rm -rf "$STATE_DIR"/storage.*
}

cmd_status() {
    local pid
    if pid="$(running_pid)"; then
        echo "lab-registry: running (pid $pid)" >&2
        cat "$ADDR_FILE"
    else
        echo "lab-registry: not running" >&2
        return 3
    fi
}

case "${1:-}" in
start) cmd_start "${2:-5000}" ;;
stop) cmd_stop ;;
status) cmd_status ;;
*)
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 64
    ;;
esac
