#!/usr/bin/env bash
# The Applications path as users run it: a second `tagpilot plan` (clone cached) over N annotated
# Directory Applications kept in git, against the time `grep -r` needs to read the same tree.
# Run by hand (not in CI); the figures are in bench/README.md.
#
# Usage: bench/applications.sh [N] [LAYOUT...]   (default 20000 per-file one-file)
#
# LAYOUT is per-file (argocd/app-NNNNN.yaml, one Application each) or one-file (all N
# Applications as the documents of argocd/applications.yaml). bench/generate.py writes N
# Applications with Image Updater's `image-list` annotation and `write-back-method: git`, no
# update-strategy annotation, each a Directory source on apps/app-NNNNN/ (one Deployment) of one
# push-mode manifest repository (file://), over 500 images, one app in 20 on an older tag.
# `tagpilot.yaml` reads the Applications with `applications.fromGit`. Per binary and layout,
# `tagpilot plan --format json --cache-dir CACHE` runs once to fill the clone cache, then REPEAT
# times with the clone cached, each under /usr/bin/time -v; `grep -rF image: TREE` over the
# same tree (a checkout without .git) runs REPEAT times after one warm-up read. The script
# checks that every run's plan moves exactly the outdated references to the newest tag with no
# problem, and prints per layout the minimum wall time and peak RSS of the cached runs (the
# machine may be shared: the minimum is the run least disturbed), grep's minimum, the ratio and
# the goals (≤ 5× grep, ≤ 100 MB).
#
# Environment:
#   TAGPILOT_BENCH_DIR  work directory (default ${TMPDIR:-/tmp}/tagpilot-applications)
#   TAGPILOT            the tagpilot binary (default: target/release/tagpilot, built if missing)
#   TAGPILOT_BASELINE   a second binary (e.g. main's) to run on the same data, for before/after
#   REPEAT              cached runs per binary and layout, and grep runs (default 3)
#   TAGPILOT_BENCH_REGISTRY  127.0.0.1:PORT of a registry that already holds the 500 x 20 tags
#                       (bench/generate.py --files 0 --repos 500, scripts/push-images.py
#                       --shared-config); default: a fresh lab registry, filled, stopped on exit
# Results: results.json in the work directory.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BENCH_DIR="${TAGPILOT_BENCH_DIR:-${TMPDIR:-/tmp}/tagpilot-applications}"
APPS="${1:-20000}"
shift $(($# < 1 ? $# : 1))
LAYOUTS=("$@")
((${#LAYOUTS[@]} > 0)) || LAYOUTS=(per-file one-file)
REPEAT="${REPEAT:-3}"
IMAGES=500
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
whole_numbers_or_usage 30 "$APPS" "$REPEAT"
for layout in "${LAYOUTS[@]}"; do
    [[ "$layout" == per-file || "$layout" == one-file ]] || usage_exit 30
done

# shellcheck source=scripts/lib/apt.sh
source "$ROOT/scripts/lib/apt.sh"
ensure_packages time docker-registry python3 git grep

TAGPILOT="$(tagpilot_binary)"
BINARIES=("tagpilot=$TAGPILOT")
[[ -n "${TAGPILOT_BASELINE:-}" ]] && BINARIES+=("baseline=$(realpath "$TAGPILOT_BASELINE")")
mkdir -p "$BENCH_DIR/bin"
for i in "${!BINARIES[@]}"; do
    entry="${BINARIES[$i]}"
    [[ -x "${entry#*=}" ]] || {
        say "no tagpilot binary at ${entry#*=}"
        exit 1
    }
    # A fresh copy per binary, so both sit alike in the page cache (see bench/scale.sh).
    cp "${entry#*=}" "$BENCH_DIR/bin/${entry%%=*}"
    BINARIES[i]="${entry%%=*}=$BENCH_DIR/bin/${entry%%=*}"
done

RESULTS="$BENCH_DIR/results.jsonl"
: >"$RESULTS"
if [[ -n "${TAGPILOT_BENCH_REGISTRY:-}" ]]; then
    # A registry a run before filled (pushing 10,000 tags takes minutes on a busy machine).
    REGISTRY="$TAGPILOT_BENCH_REGISTRY"
else
    export TAGPILOT_LAB_DIR="$BENCH_DIR/lab"
    cleanup() { "$ROOT/scripts/lab-registry.sh" stop 2>/dev/null || true; }
    trap cleanup EXIT
    REGISTRY="$("$ROOT/scripts/lab-registry.sh" start 0 | tail -n 1)"
    say "pushing $IMAGES repositories x 20 tags to $REGISTRY"
    python3 "$ROOT/bench/generate.py" --registry "$REGISTRY" --out "$BENCH_DIR/tags" \
        --files 0 --repos "$IMAGES"
    python3 "$ROOT/scripts/push-images.py" --registry "$REGISTRY" --shared-config \
        --from-file "$BENCH_DIR/tags/tags.txt" >/dev/null
    rm -rf "$BENCH_DIR/tags"
fi

# record RUN STEM KIND NAME LAYOUT: one /usr/bin/time -v report (and, for tagpilot, its plan,
# checked against expected.json) as a line of results.
record() {
    python3 - "$@" >>"$RESULTS" <<'PY'
import json, re, sys

run, stem, kind, name, layout = sys.argv[1:6]
text = open(stem + ".time").read()
seconds = 0.0
for part in re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", text).group(1).split(":"):
    seconds = seconds * 60 + float(part)
rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1))
cpu = float(re.search(r"User time \(seconds\): (\S+)", text).group(1)) + float(
    re.search(r"System time \(seconds\): (\S+)", text).group(1))
problems, changes = [], None
if kind != "grep":
    expected = json.load(open(f"{run}/expected.json"))
    plan = json.load(open(stem + ".out"))
    found = plan.get("changes", []) if isinstance(plan, dict) else []
    changes = len(found)
    if changes != expected["outdated_references"]:
        problems.append(f"{changes} changes, expected {expected['outdated_references']}")
    if any(not str(c.get("to", "")).endswith(expected["newest"]) for c in found):
        problems.append("a change does not move to the newest tag")
    if isinstance(plan, dict) and plan.get("problems"):
        problems.append(f"{len(plan['problems'])} problems, first: {plan['problems'][0]}")
print(json.dumps({"binary": name, "layout": layout, "kind": kind, "changes": changes,
                  "wall_s": seconds, "cpu_s": cpu, "peak_rss_mb": rss_kb / 1024,
                  "problems": problems}))
PY
}

# plan_once NAME BIN RUN LAYOUT KIND N: one `tagpilot plan` under /usr/bin/time -v, recorded.
plan_once() {
    local name="$1" bin="$2" run="$3" layout="$4" kind="$5" n="$6" rc=0
    local stem="$run/$name-$kind-$n"
    say "running $name ($kind $n) on $APPS Applications, $layout"
    (cd "$run" && /usr/bin/time -v -o "$stem.time" "$bin" plan --format json \
        --cache-dir "$run/cache-$name" >"$stem.out" 2>"$stem.err") || rc=$?
    if ((rc != 0 && rc != 2)); then
        say "$name plan failed (exit $rc); stderr:"
        tail -n 30 "$stem.err" >&2
        exit 1
    fi
    record "$run" "$stem" "$kind" "$name" "$layout"
}

for layout in "${LAYOUTS[@]}"; do
    run="$BENCH_DIR/run-$layout"
    rm -rf "$run"
    say "generating $APPS Applications ($layout) over $IMAGES images"
    python3 "$ROOT/bench/generate.py" --registry "$REGISTRY" --out "$run" --apps "$APPS" \
        --repos "$IMAGES" --apps-layout "$layout" --no-strategy
    url="file://$run/manifests.git"
    sed -i "s#REPO_URL#$url#g" "$run/tagpilot.yaml"
    grep -rlF REPO_URL "$run/repo" | xargs -r sed -i "s#REPO_URL#$url#g"
    git init -q --bare -b main "$run/manifests.git"
    (cd "$run/repo" && git init -q -b main && git config gc.auto 0 &&
        git config maintenance.auto false && git add -A &&
        git -c user.name=bench -c user.email=bench@example.invalid commit -qm seed &&
        git push -q "$url" main)
    # What grep reads: the same files, without git's own.
    rm -rf "$run/repo/.git"

    grep -rF image: "$run/repo" >/dev/null
    for ((n = 1; n <= REPEAT; n++)); do
        /usr/bin/time -v -o "$run/grep-$n.time" grep -rF image: "$run/repo" >/dev/null
        record "$run" "$run/grep-$n" grep grep "$layout"
    done
    for entry in "${BINARIES[@]}"; do
        name="${entry%%=*}" bin="${entry#*=}"
        rm -rf "$run/cache-$name"
        plan_once "$name" "$bin" "$run" "$layout" first 1
        for ((n = 1; n <= REPEAT; n++)); do
            plan_once "$name" "$bin" "$run" "$layout" cached "$n"
        done
        rm -rf "$run/cache-$name"
    done
    rm -rf "$run/repo" "$run/manifests.git"
done

python3 - "$RESULTS" "$BENCH_DIR/results.json" "$APPS" <<'PY'
import json, sys

rows = [json.loads(l) for l in open(sys.argv[1])]
json.dump(rows, open(sys.argv[2], "w"), indent=2)
apps = int(sys.argv[3])
print()
print("| binary | Applications | layout | changes | cached runs | wall (min) | CPU (min) "
      "| peak RSS (min) | grep -r (min) | ratio to grep |")
print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
missed = []
for layout in dict.fromkeys(r["layout"] for r in rows):
    greps = [r for r in rows if r["layout"] == layout and r["kind"] == "grep"]
    grep = min(r["wall_s"] for r in greps)
    for binary in dict.fromkeys(r["binary"] for r in rows if r["kind"] == "cached"):
        cached = [r for r in rows
                  if r["layout"] == layout and r["binary"] == binary and r["kind"] == "cached"]
        if not cached:
            continue
        wall = min(r["wall_s"] for r in cached)
        cpu = min(r["cpu_s"] for r in cached)
        rss = min(r["peak_rss_mb"] for r in cached)
        ratio = wall / grep if grep > 0 else float("inf")
        print(f"| {binary} | {apps:,} | {layout} | {cached[0]['changes']:,} | {len(cached)} | "
              f"{wall:.2f} s | {cpu:.2f} s | {rss:.1f} MB | {grep:.2f} s | {ratio:.1f}x |")
        if binary == "tagpilot" and (ratio > 5 or rss > 100):
            missed.append(f"{layout}: {ratio:.1f}x grep, {rss:.1f} MB (goal: <= 5x, <= 100 MB)")
for m in missed:
    print(f"goal missed: {m}")
bad = [(r["binary"], r["layout"], r["kind"], p) for r in rows for p in r["problems"]]
for binary, layout, kind, p in bad:
    print(f"PROBLEM: {binary} on {layout} ({kind}): {p}")
sys.exit(1 if bad else 0)
PY
