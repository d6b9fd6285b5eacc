#!/usr/bin/env bash
# How `tagpilot plan` scales with the number of manifests and policies, on a local registry.
# Run by hand (not in CI); see bench/README.md for the numbers so far.
#
# Usage: bench/scale.sh [SIZE...]
#
# SIZE is FILES:POLICIES[:OUTDATED_PERCENT], default: 1000:100 10000:1000 50000:1000
# 50000:1000:2. For each size, bench/generate.py writes FILES Deployments (two image references
# each) over POLICIES registry repositories with one semver ImagePolicy each (every policy targets
# `apps/**`), OUTDATED_PERCENT of the files (default 100) on older tags. One lab registry holds
# the repositories' 20 tags each. Each size runs
#   tagpilot plan --format json          (cwd: the generated manifest repository)
# under /usr/bin/time -v, checks that the plan moves exactly the outdated references, and prints
# wall time, peak RSS, tag-list requests and all /v2/ requests per size.
#
# Environment:
#   TAGPILOT_BENCH_DIR  work directory (default ${TMPDIR:-/tmp}/tagpilot-scale)
#   TAGPILOT            the tagpilot binary (default: target/release/tagpilot, built if missing)
#   TAGPILOT_BASELINE   a second binary (e.g. main's) to run on the same data, for before/after
# Results: results.json in the work directory. The lab registry is stopped on exit; the generated
# trees are deleted after their size has run (they are large), the reports stay.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BENCH_DIR="${TAGPILOT_BENCH_DIR:-${TMPDIR:-/tmp}/tagpilot-scale}"
SIZES=("$@")
((${#SIZES[@]} > 0)) || SIZES=(1000:100 10000:1000 50000:1000 50000:1000:2)
say() { echo "bench: $*" >&2; }

for size in "${SIZES[@]}"; do
    [[ "$size" =~ ^[0-9]+:[0-9]+(:[0-9]+)?$ ]] || {
        sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//' >&2
        exit 64
    }
done

# === tools ===

# shellcheck source=scripts/lib/apt.sh
source "$ROOT/scripts/lib/apt.sh"
ensure_packages time docker-registry python3

TAGPILOT="${TAGPILOT:-}"
if [[ -z "$TAGPILOT" ]]; then
    TAGPILOT="${CARGO_TARGET_DIR:-$ROOT/target}/release/tagpilot"
    if [[ ! -x "$TAGPILOT" ]]; then
        say "building tagpilot (release)"
        (cd "$ROOT" && cargo build --release --locked --bin tagpilot)
    fi
fi
# Each run's working directory is its manifest repository: make the paths absolute.
BINARIES=("tagpilot=$(realpath "$TAGPILOT")")
[[ -n "${TAGPILOT_BASELINE:-}" ]] && BINARIES+=("baseline=$(realpath "$TAGPILOT_BASELINE")")
for entry in "${BINARIES[@]}"; do
    [[ -x "${entry#*=}" ]] || {
        say "no tagpilot binary at ${entry#*=}"
        exit 1
    }
done

# === registry ===

export TAGPILOT_LAB_DIR="$BENCH_DIR/lab"
cleanup() { "$ROOT/scripts/lab-registry.sh" stop 2>/dev/null || true; }
trap cleanup EXIT
REGISTRY="$("$ROOT/scripts/lab-registry.sh" start 0 | tail -n 1)"
ACCESS_LOG="$TAGPILOT_LAB_DIR/registry.log"
mkdir -p "$BENCH_DIR"
RESULTS="$BENCH_DIR/results.jsonl"
: >"$RESULTS"

# The registry gets the most repositories any size needs, once: the sizes' repositories are the
# first POLICIES of the same list.
max_repos=0
for size in "${SIZES[@]}"; do
    IFS=: read -r _ policies _ <<<"$size"
    ((policies > max_repos)) && max_repos=$policies
done
say "pushing $max_repos repositories x 20 tags to $REGISTRY"
python3 "$ROOT/bench/generate.py" --registry "$REGISTRY" --out "$BENCH_DIR/tags" \
    --files 0 --repos "$max_repos"
python3 "$ROOT/scripts/push-images.py" --registry "$REGISTRY" --shared-config \
    --from-file "$BENCH_DIR/tags/tags.txt" >/dev/null
rm -rf "$BENCH_DIR/tags"

# === measurement ===

for size in "${SIZES[@]}"; do
    IFS=: read -r files policies outdated <<<"$size"
    outdated="${outdated:-100}"
    run="$BENCH_DIR/run-$files-$policies-$outdated"
    rm -rf "$run"
    say "generating $files files, $policies policies, $outdated% outdated"
    python3 "$ROOT/bench/generate.py" --registry "$REGISTRY" --out "$run" \
        --files "$files" --repos "$policies" --outdated "$outdated"
    for entry in "${BINARIES[@]}"; do
        name="${entry%%=*}" bin="${entry#*=}" rc=0
        before="$(wc -l <"$ACCESS_LOG")"
        say "running $name on $files files"
        (cd "$run/repo" && /usr/bin/time -v -o "$run/$name.time" "$bin" plan --format json \
            >"$run/$name.out" 2>"$run/$name.err") || rc=$?
        tail -n "+$((before + 1))" "$ACCESS_LOG" | grep -F '"' | grep -F ' /v2/' \
            >"$run/$name.access.log" || true
        if ((rc != 0 && rc != 2)); then
            say "$name plan failed (exit $rc); stderr:"
            tail -n 30 "$run/$name.err" >&2
            exit 1
        fi
        python3 - "$run" "$name" "$size" >>"$RESULTS" <<'PY'
import json, os, re, sys

run, name, size = sys.argv[1:4]
expected = json.load(open(os.path.join(run, "expected.json")))
text = open(os.path.join(run, name + ".time")).read()
seconds = 0.0
wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", text).group(1)
for part in wall.split(":"):
    seconds = seconds * 60 + float(part)
rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1))
cpu = float(re.search(r"User time \(seconds\): (\S+)", text).group(1)) + float(
    re.search(r"System time \(seconds\): (\S+)", text).group(1)
)
lines = open(os.path.join(run, name + ".access.log")).read().splitlines()
plan = json.load(open(os.path.join(run, name + ".out")))
changes = plan.get("changes", []) if isinstance(plan, dict) else []
problems = []
if len(changes) != expected["outdated_references"]:
    problems.append(f"{len(changes)} changes, expected {expected['outdated_references']}")
if any(not str(c.get("to", "")).endswith(expected["newest"]) for c in changes):
    problems.append("a change does not move to the newest tag")
if isinstance(plan, dict) and plan.get("problems"):
    problems.append(f"{len(plan['problems'])} problems, first: {plan['problems'][0]}")
print(json.dumps({
    "binary": name, "size": size, "files": expected["files"],
    "policies": expected["repositories"], "changes": len(changes),
    "wall_s": seconds, "cpu_s": cpu, "peak_rss_mb": rss_kb / 1024,
    "tag_list_requests": sum(1 for l in lines if re.search(r'"GET /v2/\S+/tags/list', l)),
    "registry_requests": len(lines), "problems": problems,
}))
PY
    done
    rm -rf "$run/repo"
done

# === report ===

python3 - "$RESULTS" "$BENCH_DIR/results.json" <<'PY'
import json, sys

rows = [json.loads(l) for l in open(sys.argv[1])]
json.dump(rows, open(sys.argv[2], "w"), indent=2)
print()
print("| binary | files | policies | changes | wall | CPU | peak RSS | tags/list | all /v2/ |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for r in rows:
    print(f"| {r['binary']} | {r['files']:,} | {r['policies']:,} | {r['changes']:,} | "
          f"{r['wall_s']:.2f} s | {r['cpu_s']:.2f} s | {r['peak_rss_mb']:.1f} MB | "
          f"{r['tag_list_requests']:,} | {r['registry_requests']:,} |")
bad = [(r["binary"], r["size"], p) for r in rows for p in r["problems"]]
for binary, size, p in bad:
    print(f"PROBLEM: {binary} at {size}: {p}")
sys.exit(1 if bad else 0)
PY
