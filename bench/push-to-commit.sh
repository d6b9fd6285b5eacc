#!/usr/bin/env bash
# From `docker push` to a commit: how long a pushed image takes to reach the manifest repository
# when the registry notifies `tagpilot run`. Run by hand (not in CI); see bench/README.md.
#
# Usage: bench/push-to-commit.sh [PUSHES]        (default 20)
#
# Starts Debian's docker-registry (CNCF distribution 2.8) on a free loopback port with a
# `notifications.endpoints` entry pointing at `tagpilot run`'s /webhooks/distribution (with the
# bearer secret), a bare git repository with one Deployment on bench/app:1.0.0, and
# `tagpilot run --interval 1h` (so only notifications can bring a new tag in). Then, PUSHES times:
# push bench/app:1.0.N (scripts/push-images.py; the push has ended when the registry answered the
# manifest PUT), and poll the bare repository until its main branch holds 1.0.N. The time from
# the end of the push to that commit is one sample. Prints every sample, the median and the
# 95th percentile.
#
# Environment:
#   TAGPILOT_BENCH_DIR  work directory (default ${TMPDIR:-/tmp}/tagpilot-push-to-commit)
#   TAGPILOT            the tagpilot binary (default: target/release/tagpilot, built if missing)
# Goal: a median of at most 1 s.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BENCH_DIR="${TAGPILOT_BENCH_DIR:-${TMPDIR:-/tmp}/tagpilot-push-to-commit}"
PUSHES="${1:-20}"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
whole_numbers_or_usage 20 "$PUSHES"
((PUSHES > 0)) || usage_exit 20

# shellcheck source=scripts/lib/apt.sh
source "$ROOT/scripts/lib/apt.sh"
ensure_packages docker-registry python3 git curl

TAGPILOT="$(tagpilot_binary)"

rm -rf "$BENCH_DIR"
mkdir -p "$BENCH_DIR"
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}
REGISTRY_PORT="$(free_port)"
DAEMON_PORT="$(free_port)"
REGISTRY="127.0.0.1:$REGISTRY_PORT"
SECRET="bench-$RANDOM$RANDOM"
PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

# === the registry, notifying tagpilot ===

cat >"$BENCH_DIR/registry.yml" <<EOF
version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $BENCH_DIR/storage
http:
  addr: $REGISTRY
  secret: tagpilot-bench-not-a-secret
notifications:
  endpoints:
    - name: tagpilot
      url: http://127.0.0.1:$DAEMON_PORT/webhooks/distribution
      headers:
        Authorization: ["Bearer $SECRET"]
      timeout: 2s
      threshold: 5
      backoff: 100ms
EOF
/usr/bin/docker-registry serve "$BENCH_DIR/registry.yml" >"$BENCH_DIR/registry.log" 2>&1 </dev/null &
PIDS+=($!)
for _ in $(seq 100); do
    curl -fsS -o /dev/null "http://$REGISTRY/v2/" 2>/dev/null && break
    sleep 0.1
done
python3 "$ROOT/scripts/push-images.py" --registry "$REGISTRY" --quiet bench/app:1.0.0

# === the manifest repository and tagpilot ===

BARE="$BENCH_DIR/manifests.git"
FILE="apps/app/deployment.yaml"
git init -q --bare -b main "$BARE"
(
    mkdir -p "$BENCH_DIR/seed/apps/app" && cd "$BENCH_DIR/seed"
    git init -q -b main
    cat >"$FILE" <<EOF
apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
spec:
  template:
    spec:
      containers:
        - name: app
          image: $REGISTRY/bench/app:1.0.0
EOF
    git add . && git -c user.name=bench -c user.email=bench@example.invalid commit -q -m seed
    git push -q "$BARE" main
)
CONFIG="$BENCH_DIR/config"
mkdir -p "$CONFIG/policies"
cat >"$CONFIG/tagpilot.yaml" <<EOF
registries:
  - host: $REGISTRY
    insecure: true
policies: policies/
repositories:
  - name: manifests
    url: file://$BARE
    branch: main
    write:
      mode: push
webhooks:
  secretEnv: BENCH_WEBHOOK_SECRET
EOF
cat >"$CONFIG/policies/app.yaml" <<EOF
apiVersion: tagpilot.dev/v1alpha1
kind: ImagePolicy
metadata:
  name: app
spec:
  image: $REGISTRY/bench/app
  strategy:
    semver: {}
  targets:
    - repository: manifests
      paths: ["apps/**"]
EOF
(
    cd "$CONFIG"
    exec env HOME="$BENCH_DIR" GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null \
        BENCH_WEBHOOK_SECRET="$SECRET" \
        "$TAGPILOT" run --interval 1h --listen "127.0.0.1:$DAEMON_PORT" \
        --state-dir "$BENCH_DIR/state" --cache-dir "$BENCH_DIR/cache" 2>"$BENCH_DIR/daemon.log"
) &
PIDS+=($!)
for _ in $(seq 300); do
    [[ "$(curl -fsS -o /dev/null -w '%{http_code}' "http://127.0.0.1:$DAEMON_PORT/readyz" 2>/dev/null)" == 200 ]] && break
    sleep 0.1
done
say "registry $REGISTRY notifies tagpilot on 127.0.0.1:$DAEMON_PORT; pushing $PUSHES tags"

# === the measurement ===

python3 - "$ROOT" "$REGISTRY" "$BARE" "$FILE" "$PUSHES" <<'PY'
import statistics, subprocess, sys, time

root, registry, bare, path, pushes = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])

def on_main(tag):
    shown = subprocess.run(["git", "--git-dir", bare, "show", f"main:{path}"],
                           capture_output=True, text=True).stdout
    return f"bench/app:{tag}\n" in shown

samples = []
for n in range(1, pushes + 1):
    tag = f"1.0.{n}"
    subprocess.run([sys.executable, f"{root}/scripts/push-images.py", "--registry", registry,
                    "--quiet", f"bench/app:{tag}"], check=True)
    pushed = time.monotonic()
    while not on_main(tag):
        if time.monotonic() - pushed > 60:
            sys.exit(f"PROBLEM: {tag} not committed within 60 s")
        time.sleep(0.005)
    samples.append(time.monotonic() - pushed)
    print(f"push {n:3d}: {tag} committed after {samples[-1] * 1000:.0f} ms", flush=True)

samples.sort()
median = statistics.median(samples)
p95 = samples[min(len(samples) - 1, max(0, round(0.95 * len(samples)) - 1))]
print()
print("| pushes | median | p95 | min | max |")
print("| ---: | ---: | ---: | ---: | ---: |")
print(f"| {len(samples)} | {median * 1000:.0f} ms | {p95 * 1000:.0f} ms | "
      f"{samples[0] * 1000:.0f} ms | {samples[-1] * 1000:.0f} ms |")
PY
