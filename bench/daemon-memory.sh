#!/usr/bin/env bash
# How much memory `tagpilot run` holds while it watches many registry repositories.
# Run by hand (not in CI); see bench/README.md for the numbers so far.
#
# Usage: bench/daemon-memory.sh [REPOSITORIES] [CYCLES]     (default 1000 10)
#
# A lab registry gets REPOSITORIES repositories x 20 tags (bench/generate.py, pushed with
# scripts/push-images.py --shared-config). A bare git repository holds REPOSITORIES Deployments
# (two references each, on older tags) and one semver ImagePolicy per repository, all writing
# back to that repository. `tagpilot run --interval 1s --state-dir …` then runs until CYCLES
# cycles have completed (counted from /metrics: the first pushes every update, the others find
# everything up to date), and the script prints the process's resident memory then (VmRSS) and
# its peak (VmHWM), from /proc, and checks that the first cycle pushed every update.
#
# Environment:
#   TAGPILOT_BENCH_DIR  work directory (default ${TMPDIR:-/tmp}/tagpilot-daemon-memory)
#   TAGPILOT            the tagpilot binary (default: target/release/tagpilot, built if missing)
# Goal: at most 40 MiB after 10 cycles watching 1,000 repositories.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BENCH_DIR="${TAGPILOT_BENCH_DIR:-${TMPDIR:-/tmp}/tagpilot-daemon-memory}"
REPOS="${1:-1000}"
CYCLES="${2:-10}"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
whole_numbers_or_usage 18 "$REPOS" "$CYCLES"

# shellcheck source=scripts/lib/apt.sh
source "$ROOT/scripts/lib/apt.sh"
ensure_packages docker-registry python3 git curl

TAGPILOT="$(tagpilot_binary)"

rm -rf "$BENCH_DIR"
mkdir -p "$BENCH_DIR"
export TAGPILOT_LAB_DIR="$BENCH_DIR/lab"
DAEMON_PID=""
cleanup() {
    [[ -n "$DAEMON_PID" ]] && kill "$DAEMON_PID" 2>/dev/null || true
    "$ROOT/scripts/lab-registry.sh" stop 2>/dev/null || true
}
trap cleanup EXIT
REGISTRY="$("$ROOT/scripts/lab-registry.sh" start 0 | tail -n 1)"

say "pushing $REPOS repositories x 20 tags to $REGISTRY"
python3 "$ROOT/bench/generate.py" --registry "$REGISTRY" --out "$BENCH_DIR/gen" \
    --files "$REPOS" --repos "$REPOS"
python3 "$ROOT/scripts/push-images.py" --registry "$REGISTRY" --shared-config \
    --from-file "$BENCH_DIR/gen/tags.txt" >/dev/null

# The generated tree becomes the repository the daemon writes to; its policies name it.
BARE="$BENCH_DIR/manifests.git"
WORK="$BENCH_DIR/gen/repo"
sed -i 's|    - paths: \["apps/\*\*"\]|    - repository: manifests\n      paths: ["apps/**"]|' \
    "$WORK"/policies/*.yaml
git init -q --bare -b main "$BARE"
(
    cd "$WORK"
    git init -q -b main
    git add apps
    git -c user.name=bench -c user.email=bench@example.invalid commit -q -m "generated manifests"
    git push -q "$BARE" main
)
CONFIG="$BENCH_DIR/config"
mkdir -p "$CONFIG"
cp -r "$WORK/policies" "$CONFIG/"
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
      group: repository
EOF

PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"
say "running tagpilot run on 127.0.0.1:$PORT until $CYCLES cycles have completed"
(
    cd "$CONFIG"
    exec env HOME="$BENCH_DIR" GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null \
        "$TAGPILOT" run --interval 1s --listen "127.0.0.1:$PORT" \
        --state-dir "$BENCH_DIR/state" --cache-dir "$BENCH_DIR/cache" \
        2>"$BENCH_DIR/daemon.log"
) &
DAEMON_PID=$!

cycles() {
    curl -fsS "http://127.0.0.1:$PORT/metrics" 2>/dev/null |
        awk '/^tagpilot_cycles_total/ { n += $2 } END { print n + 0 }'
}
started=$SECONDS
while (($(cycles) < CYCLES)); do
    kill -0 "$DAEMON_PID" 2>/dev/null || {
        tail -n 20 "$BENCH_DIR/daemon.log" >&2
        say "tagpilot run exited"
        exit 1
    }
    ((SECONDS - started < 900)) || {
        say "no $CYCLES cycles within 15 minutes"
        exit 1
    }
    sleep 0.2
done
rss_kb="$(awk '/^VmRSS:/ { print $2 }' "/proc/$DAEMON_PID/status")"
hwm_kb="$(awk '/^VmHWM:/ { print $2 }' "/proc/$DAEMON_PID/status")"
# Of the resident memory: the heap and stacks (RssAnon) and pages of mapped files, mostly the
# binary's own code (RssFile), which the kernel shares and can drop.
grep -E '^(RssAnon|RssFile|RssShmem|Threads):' "/proc/$DAEMON_PID/status" >&2
cp "/proc/$DAEMON_PID/smaps" "$BENCH_DIR/smaps" 2>/dev/null || true
metrics="$(curl -fsS "http://127.0.0.1:$PORT/metrics")"
kill -TERM "$DAEMON_PID"
wait "$DAEMON_PID" || true
DAEMON_PID=""

pushed="$(git --git-dir="$BARE" log --format=%s main | wc -l)"
updates="$(grep -F -c "$REGISTRY/bench/svc-" <(git --git-dir="$BARE" grep -h "image: .*:2.4.1" main -- apps) || true)"
ok_cycles="$(awk '/^tagpilot_cycles_total\{result="ok"\}/ { print $2 }' <<<"$metrics")"
listings="$(awk '/^tagpilot_tag_listings_total/ { n += $2 } END { print n + 0 }' <<<"$metrics")"
echo
echo "| repositories | cycles (ok) | tag listings | RSS after | peak RSS |"
echo "| ---: | ---: | ---: | ---: | ---: |"
printf '| %s | %s (%s) | %s | %.1f MiB | %.1f MiB |\n' "$REPOS" "$CYCLES" "$ok_cycles" "$listings" \
    "$(bc -l <<<"$rss_kb / 1024" 2>/dev/null || python3 -c "print($rss_kb / 1024)")" \
    "$(bc -l <<<"$hwm_kb / 1024" 2>/dev/null || python3 -c "print($hwm_kb / 1024)")"
if ((updates != 2 * REPOS)) || ((pushed != 2)); then
    echo "PROBLEM: expected one commit moving $((2 * REPOS)) references to 2.4.1;" \
        "found $pushed commits and $updates references on 2.4.1" >&2
    exit 1
fi
