#!/usr/bin/env bash
# How long `tagpilot plan` takes over many small remote manifest repositories, for each
# `concurrency.repositories` bound: with a bound high enough, about as long as the slowest few
# repositories, not their sum. Run by hand (not in CI); the figures are in bench/README.md.
#
# Usage: bench/many-repositories.sh [REPOSITORIES] [APPLICATIONS] [DELAY_MS] [BOUNDS...]
#        (default 200 2000 50 1 4 16 64)
#
# bench/generate.py spreads APPLICATIONS annotated Directory Applications (one Deployment each,
# one in 20 on an older tag, over 50 images) over REPOSITORIES manifest repositories, each read
# with `applications.fromGit` and written to as its own target. The repositories are served
# over smart HTTP by `git http-backend` behind bench/slow-git-http.py, which adds DELAY_MS to
# every request, as a remote git host would. For each bound, `tagpilot plan --format json` runs
# twice under /usr/bin/time: with an empty clone cache (clones) and with it filled (fetches).
# The script checks that every outdated reference is planned and prints wall time, CPU time,
# peak RSS and git HTTP requests per run, and the time of one repository alone.
#
# Environment:
#   TAGPILOT_BENCH_DIR  work directory (default ${TMPDIR:-/tmp}/tagpilot-many-repositories)
#   TAGPILOT            the tagpilot binary (default: target/release/tagpilot, built if missing)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BENCH_DIR="${TAGPILOT_BENCH_DIR:-${TMPDIR:-/tmp}/tagpilot-many-repositories}"
REPOS="${1:-200}"
APPS="${2:-2000}"
DELAY_MS="${3:-50}"
shift $(($# < 3 ? $# : 3))
BOUNDS=("$@")
((${#BOUNDS[@]} > 0)) || BOUNDS=(1 4 16 64)
IMAGES=50
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
whole_numbers_or_usage 20 "$REPOS" "$APPS" "$DELAY_MS"

# shellcheck source=scripts/lib/apt.sh
source "$ROOT/scripts/lib/apt.sh"
ensure_packages docker-registry python3 git time

TAGPILOT="$(tagpilot_binary)"

rm -rf "$BENCH_DIR"
mkdir -p "$BENCH_DIR/git"
export TAGPILOT_LAB_DIR="$BENCH_DIR/lab"
SERVER_PID=""
cleanup() {
    [[ -n "$SERVER_PID" ]] && kill "$SERVER_PID" 2>/dev/null || true
    "$ROOT/scripts/lab-registry.sh" stop 2>/dev/null || true
}
trap cleanup EXIT
REGISTRY="$("$ROOT/scripts/lab-registry.sh" start 0 | tail -n 1)"
say "pushing $IMAGES repositories x 20 tags to $REGISTRY"
python3 "$ROOT/bench/generate.py" --registry "$REGISTRY" --out "$BENCH_DIR/tags" \
    --files 0 --repos "$IMAGES"
python3 "$ROOT/scripts/push-images.py" --registry "$REGISTRY" --shared-config \
    --from-file "$BENCH_DIR/tags/tags.txt" >/dev/null

GIT_LOG="$BENCH_DIR/git-requests.log"
: >"$GIT_LOG"
python3 "$ROOT/bench/slow-git-http.py" --root "$BENCH_DIR/git" --delay-ms "$DELAY_MS" \
    --log "$GIT_LOG" >"$BENCH_DIR/port" &
SERVER_PID=$!
for _ in $(seq 50); do [[ -s "$BENCH_DIR/port" ]] && break; sleep 0.1; done
PORT="$(cat "$BENCH_DIR/port")"

run="$BENCH_DIR/run"
say "generating $APPS Applications in $REPOS repositories served with ${DELAY_MS} ms per request"
python3 "$ROOT/bench/generate.py" --registry "$REGISTRY" --out "$run" --apps "$APPS" \
    --repos "$IMAGES" --manifest-repos "$REPOS"
for ((m = 0; m < REPOS; m++)); do
    tag="$(printf '%03d' "$m")"
    url="http://127.0.0.1:$PORT/manifests-$tag.git"
    sed -i "s#REPO_URL_$tag#$url#g" "$run/tagpilot.yaml"
    grep -rlF "REPO_URL_$tag" "$run/repo-$tag" | xargs -r sed -i "s#REPO_URL_$tag#$url#g"
    bare="$BENCH_DIR/git/manifests-$tag.git"
    git init -q --bare -b main "$bare"
    (cd "$run/repo-$tag" && git init -q -b main && git add -A &&
        git -c user.name=bench -c user.email=bench@example.invalid commit -qm seed &&
        git push -q "file://$bare" main)
    rm -rf "$run/repo-$tag"
done
cp "$run/tagpilot.yaml" "$run/tagpilot.base.yaml"

# plan_once LABEL CONFIG_DIR: one run under /usr/bin/time; prints a JSON line.
plan_once() {
    local label="$1" dir="$2" rc=0 before
    before="$(wc -l <"$GIT_LOG")"
    (cd "$dir" && /usr/bin/time -v -o "$run/$label.time" "$TAGPILOT" plan --format json \
        --cache-dir "$dir/cache" >"$run/$label.out" 2>"$run/$label.err") || rc=$?
    if ((rc != 0 && rc != 2)); then
        say "plan failed (exit $rc); stderr:"
        tail -n 30 "$run/$label.err" >&2
        exit 1
    fi
    python3 - "$run" "$label" "$(($(wc -l <"$GIT_LOG") - before))" <<'PY'
import json, re, sys

run, label, requests = sys.argv[1], sys.argv[2], int(sys.argv[3])
text = open(f"{run}/{label}.time").read()
wall = 0.0
for part in re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", text).group(1).split(":"):
    wall = wall * 60 + float(part)
cpu = float(re.search(r"User time \(seconds\): (\S+)", text).group(1)) + float(
    re.search(r"System time \(seconds\): (\S+)", text).group(1))
rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1)) / 1024
plan = json.load(open(f"{run}/{label}.out"))
print(json.dumps({"label": label, "wall": wall, "cpu": cpu, "rss": rss, "requests": requests,
                  "changes": len(plan.get("changes", [])), "problems": plan.get("problems", [])}))
PY
}

RESULTS="$BENCH_DIR/results.jsonl"
: >"$RESULTS"
# One repository alone (the first, with its share of the Applications), for scale.
single="$BENCH_DIR/single"
mkdir -p "$single"
python3 - "$run/tagpilot.base.yaml" "$single/tagpilot.yaml" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
head, _, rest = text.partition("repositories:\n")
repos, _, apps = rest.partition("applications:\n")
first = re.findall(r"  - name: .*\n(?:    .*\n)*", repos)[0]
from_git = re.findall(r"    - repository: .*\n      paths: .*\n", apps)[0]
open(sys.argv[2], "w").write(f"{head}repositories:\n{first}applications:\n  fromGit:\n{from_git}")
PY
for label in first cached; do
    say "one repository alone ($label)"
    plan_once "single-$label" "$single" | sed "s/^{/{\"bound\": 0, /" >>"$RESULTS"
done
for bound in "${BOUNDS[@]}"; do
    rm -rf "$run/cache"
    { cat "$run/tagpilot.base.yaml"; printf 'concurrency:\n  repositories: %s\n' "$bound"; } \
        >"$run/tagpilot.yaml"
    for label in first cached; do
        say "concurrency.repositories: $bound ($label)"
        plan_once "bound-$bound-$label" "$run" | sed "s/^{/{\"bound\": $bound, /" >>"$RESULTS"
    done
done

python3 - "$RESULTS" "$run/expected.json" "$REPOS" "$APPS" "$DELAY_MS" <<'PY'
import json, sys

rows = [json.loads(l) for l in open(sys.argv[1])]
expected = json.load(open(sys.argv[2]))
repos, apps, delay = sys.argv[3:6]
print(f"\n{apps} Applications in {repos} repositories over HTTP, {delay} ms per git request\n")
print("| `concurrency.repositories` | run | wall | CPU | peak RSS | git requests | changes |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
bad = []
for r in rows:
    bound = "one repository alone" if r["bound"] == 0 else str(r["bound"])
    run = "first" if r["label"].endswith("first") else "cached"
    print(f"| {bound} | {run} | {r['wall']:.2f} s | {r['cpu']:.2f} s | {r['rss']:.1f} MB | "
          f"{r['requests']} | {r['changes']:,} |")
    if r["bound"] and r["changes"] != expected["outdated_references"]:
        bad.append(f"{r['label']}: {r['changes']} changes, expected {expected['outdated_references']}")
    if r["problems"]:
        bad.append(f"{r['label']}: {len(r['problems'])} problems, first: {r['problems'][0]}")
for b in bad:
    print(f"PROBLEM: {b}")
sys.exit(1 if bad else 0)
PY
