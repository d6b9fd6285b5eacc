#!/usr/bin/env bash
# One pattern policy against the exact policies it replaces (issue 31): `tagpilot plan` over the
# same manifests and the same local registry, once with one ImagePolicy per repository and once
# with one policy whose image is a pattern over all of them.
# Run by hand (not in CI); the figures go in bench/README.md.
#
# Usage: bench/patterns.sh [FILES] [REPOS]   (default 5000 1000)
#
# bench/generate.py writes FILES Deployments with two references each over REPOS repositories
# (bench/svc-NNN) of 20 semver tags, every file on an older tag, and one semver ImagePolicy per
# repository; the pattern shape replaces policies/ with one policy, image REGISTRY/bench/*, with
# the same strategy and targets. Per shape, `tagpilot plan --format json` runs REPEAT times under
# /usr/bin/time -v in the manifest directory. The script checks that every run moves every
# reference to the newest tag with no problem, and that each run lists each repository's tags
# exactly once (from the registry's access log), and prints per shape the minimum wall time, CPU
# time and peak RSS, and the ratio of the pattern to the exact policies (goal: <= 1.0, within
# the machine's noise).
#
# Environment:
#   TAGPILOT_BENCH_DIR  work directory (default ${TMPDIR:-/tmp}/tagpilot-patterns)
#   TAGPILOT            the tagpilot binary (default: target/release/tagpilot, built if missing)
#   REPEAT              runs per shape (default 3)
# Results: results.json in the work directory. The lab registry is stopped on exit.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BENCH_DIR="${TAGPILOT_BENCH_DIR:-${TMPDIR:-/tmp}/tagpilot-patterns}"
FILES="${1:-5000}"
REPOS="${2:-1000}"
REPEAT="${REPEAT:-3}"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
whole_numbers_or_usage 23 "$FILES" "$REPOS" "$REPEAT"

# shellcheck source=scripts/lib/apt.sh
source "$ROOT/scripts/lib/apt.sh"
ensure_packages time docker-registry python3

TAGPILOT="$(tagpilot_binary)"

export TAGPILOT_LAB_DIR="$BENCH_DIR/lab"
cleanup() { "$ROOT/scripts/lab-registry.sh" stop 2>/dev/null || true; }
trap cleanup EXIT
REGISTRY="$("$ROOT/scripts/lab-registry.sh" start 0 | tail -n 1)"
ACCESS_LOG="$TAGPILOT_LAB_DIR/registry.log"

RUN="$BENCH_DIR/run"
rm -rf "$RUN"
mkdir -p "$RUN"
say "generating $FILES files over $REPOS repositories"
python3 "$ROOT/bench/generate.py" --registry "$REGISTRY" --out "$RUN" \
    --files "$FILES" --repos "$REPOS"
say "pushing $REPOS repositories x 20 tags to $REGISTRY"
python3 "$ROOT/scripts/push-images.py" --registry "$REGISTRY" --shared-config \
    --from-file "$RUN/tags.txt" >/dev/null

# The pattern shape: the same tree, one policy for every repository.
cp -r "$RUN/repo" "$RUN/pattern"
mv "$RUN/repo" "$RUN/exact"
rm -rf "$RUN/pattern/policies"
mkdir -p "$RUN/pattern/policies"
cat >"$RUN/pattern/policies/bench.yaml" <<YAML
apiVersion: tagpilot.dev/v1alpha1
kind: ImagePolicy
metadata:
  name: bench
spec:
  image: $REGISTRY/bench/*
  strategy:
    semver: {}
  targets:
    - paths: ["apps/**"]
YAML

RESULTS="$RUN/results.jsonl"
: >"$RESULTS"

# plan_once SHAPE N: one `tagpilot plan` in the shape's directory under /usr/bin/time -v, its
# report and its registry requests checked, recorded as a line of results.
plan_once() {
    local shape="$1" n="$2" before rc=0
    local stem="$RUN/$shape-$n"
    before="$(wc -l <"$ACCESS_LOG")"
    say "running tagpilot plan ($shape, run $n)"
    (cd "$RUN/$shape" && /usr/bin/time -v -o "$stem.time" "$TAGPILOT" plan --format json \
        >"$stem.out" 2>"$stem.err") || rc=$?
    if ((rc != 0 && rc != 2)); then
        say "tagpilot plan failed (exit $rc); stderr:"
        tail -n 30 "$stem.err" >&2
        exit 1
    fi
    tail -n "+$((before + 1))" "$ACCESS_LOG" | grep -F '"' | grep -F ' /v2/' >"$stem.access.log" || true
    python3 - "$RUN" "$stem" "$shape" >>"$RESULTS" <<'PY'
import json, re, sys

run, stem, shape = sys.argv[1:4]
text = open(stem + ".time").read()
seconds = 0.0
for part in re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", text).group(1).split(":"):
    seconds = seconds * 60 + float(part)
rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1))
cpu = float(re.search(r"User time \(seconds\): (\S+)", text).group(1)) + float(
    re.search(r"System time \(seconds\): (\S+)", text).group(1))
expected = json.load(open(f"{run}/expected.json"))
plan = json.load(open(stem + ".out"))
found = plan.get("changes", [])
problems = []
if len(found) != expected["outdated_references"]:
    problems.append(f"{len(found)} changes, expected {expected['outdated_references']}")
if any(not str(c.get("to", "")).endswith(expected["newest"]) for c in found):
    problems.append("a change does not move to the newest tag")
if plan.get("problems"):
    problems.append(f"{len(plan['problems'])} problems, first: {plan['problems'][0]}")
listings = [l for l in open(stem + ".access.log") if "/tags/list" in l]
repos = {re.search(r" /v2/(.+)/tags/list", l).group(1) for l in listings}
if len(repos) != expected["repositories"] or len(listings) != len(repos):
    problems.append(f"{len(listings)} tag listings of {len(repos)} repositories, "
                    f"expected one of each of {expected['repositories']}")
print(json.dumps({"shape": shape, "changes": len(found), "tag_listings": len(listings),
                  "wall_s": seconds, "cpu_s": cpu, "peak_rss_mb": rss_kb / 1024,
                  "problems": problems}))
PY
}

for ((n = 1; n <= REPEAT; n++)); do
    # Interleaved, so a busy spell on a shared machine weighs on both shapes alike.
    plan_once exact "$n"
    plan_once pattern "$n"
done

python3 - "$RESULTS" "$RUN/results.json" "$FILES" "$REPOS" <<'PY'
import json, sys

rows = [json.loads(l) for l in open(sys.argv[1])]
json.dump(rows, open(sys.argv[2], "w"), indent=2)
files, repos = int(sys.argv[3]), int(sys.argv[4])
print()
print("| policies | files | repositories | changes | tag listings | runs | wall (min) "
      "| CPU (min) | peak RSS (min) |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
best = {}
for shape, label in (("exact", f"{repos:,} exact"), ("pattern", "1 pattern")):
    runs = [r for r in rows if r["shape"] == shape]
    wall = min(r["wall_s"] for r in runs)
    best[shape] = wall
    print(f"| {label} | {files:,} | {repos:,} | {runs[0]['changes']:,} | "
          f"{runs[0]['tag_listings']:,} | {len(runs)} | {wall:.2f} s | "
          f"{min(r['cpu_s'] for r in runs):.2f} s | {min(r['peak_rss_mb'] for r in runs):.1f} MB |")
ratio = best["pattern"] / best["exact"] if best["exact"] > 0 else float("inf")
print(f"\npattern / exact wall time: {ratio:.2f} (goal: <= 1.0, within the machine's noise)")
bad = [(r["shape"], p) for r in rows for p in r["problems"]]
for shape, p in bad:
    print(f"PROBLEM: {shape}: {p}")
sys.exit(1 if bad else 0)
PY
