#!/usr/bin/env bash
# tagpilot plan vs Renovate 39 lookup, on the same manifests and the same local registry.
# Run by hand (not in CI); see bench/README.md for what it measures and the numbers so far.
#
# Usage: bench/plan-vs-renovate.sh [--only tagpilot|renovate]
#
# Generates 1,000 Deployment files with 2,000 image references over 100 repositories of 20
# semver tags each (files on older tags), pushes the tags to a fresh lab registry, then times
#   tagpilot plan --format json                              (cwd: the manifest repository)
#   renovate --platform=local --dry-run=lookup --report-type=file
# with /usr/bin/time -v, checks that both reports hold the expected updates, and prints wall
# time, peak memory, the ratios and each tool's registry requests (from the access log).
#
# Environment:
#   TAGPILOT_BENCH_DIR  work directory (default ${TMPDIR:-/tmp}/tagpilot-bench); Renovate is
#                       npm-installed into its renovate/ once, each run's files go to run/
#   TAGPILOT            the tagpilot binary (default: target/release/tagpilot, built if missing)
# Results: run/results.json in the work directory. The lab registry is stopped on exit.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BENCH_DIR="${TAGPILOT_BENCH_DIR:-${TMPDIR:-/tmp}/tagpilot-bench}"
RUN="$BENCH_DIR/run"
RENOVATE_VERSION=39
ONLY=""
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

while (($# > 0)); do
    case "$1" in
    --only)
        ONLY="${2:-}"
        [[ "$ONLY" == tagpilot || "$ONLY" == renovate ]] || {
            echo "bench: --only takes tagpilot or renovate" >&2
            exit 64
        }
        shift 2
        ;;
    *)
        usage_exit 20
        ;;
    esac
done
want() { [[ -z "$ONLY" || "$ONLY" == "$1" ]]; }

# === tools ===

# shellcheck source=scripts/lib/apt.sh
source "$ROOT/scripts/lib/apt.sh"
ensure_packages time docker-registry git python3

if want renovate; then
    command -v node >/dev/null || {
        say "Renovate $RENOVATE_VERSION needs Node.js 20 (node not found)"
        exit 1
    }
    RENOVATE="$BENCH_DIR/renovate/node_modules/.bin/renovate"
    installed="$(node -p "require('$BENCH_DIR/renovate/node_modules/renovate/package.json').version" 2>/dev/null || true)"
    if [[ "$installed" != "$RENOVATE_VERSION".* ]]; then
        say "npm install renovate@$RENOVATE_VERSION into $BENCH_DIR/renovate (once)"
        mkdir -p "$BENCH_DIR/renovate"
        [[ -f "$BENCH_DIR/renovate/package.json" ]] || echo '{"private": true}' >"$BENCH_DIR/renovate/package.json"
        npm install --prefix "$BENCH_DIR/renovate" --no-audit --no-fund --loglevel=error \
            "renovate@$RENOVATE_VERSION" >&2
    fi
    say "Renovate $("$RENOVATE" --version)"
fi

if want tagpilot; then
    TAGPILOT="$(tagpilot_binary)"
fi

# === data ===

export TAGPILOT_LAB_DIR="$BENCH_DIR/lab"
cleanup() { "$ROOT/scripts/lab-registry.sh" stop 2>/dev/null || true; }
trap cleanup EXIT
REGISTRY="$("$ROOT/scripts/lab-registry.sh" start 0 | tail -n 1)"
ACCESS_LOG="$TAGPILOT_LAB_DIR/registry.log"

rm -rf "$RUN"
mkdir -p "$RUN"
python3 "$ROOT/bench/generate.py" --registry "$REGISTRY" --out "$RUN"
python3 "$ROOT/scripts/push-images.py" --registry "$REGISTRY" --shared-config --from-file "$RUN/tags.txt"
# Renovate's local platform works on a git repository.
git -C "$RUN/repo" init -q
git -C "$RUN/repo" add -A
git -C "$RUN/repo" -c user.name=bench -c user.email=bench@localhost commit -qm "benchmark manifests"

# === measurement ===

# measure NAME CMD...: runs CMD in the manifest repository under /usr/bin/time -v, with stdout to
# NAME.out and stderr to NAME.err, and keeps the access log lines of its run in NAME.access.log.
measure() {
    local name="$1" before rc=0
    shift
    before="$(wc -l <"$ACCESS_LOG")"
    say "running $name"
    (cd "$RUN/repo" && /usr/bin/time -v -o "$RUN/$name.time" "$@" >"$RUN/$name.out" 2>"$RUN/$name.err") || rc=$?
    tail -n "+$((before + 1))" "$ACCESS_LOG" | grep -F '"' | grep -F ' /v2/' >"$RUN/$name.access.log" || true
    return "$rc"
}

if want tagpilot; then
    rc=0
    measure tagpilot "$TAGPILOT" plan --format json || rc=$?
    # 2 would mean "changes pending" if --exit-code were given; anything else is a failure.
    if ((rc != 0 && rc != 2)); then
        say "tagpilot plan failed (exit $rc); stderr:"
        tail -n 30 "$RUN/tagpilot.err" >&2
        exit 1
    fi
fi
if want renovate; then
    rm -rf "$RUN/renovate-cache" "$RUN/renovate-base"
    measure renovate env \
        RENOVATE_CONFIG_FILE="$RUN/renovate.json" \
        RENOVATE_BASE_DIR="$RUN/renovate-base" \
        RENOVATE_CACHE_DIR="$RUN/renovate-cache" \
        LOG_LEVEL=info \
        "$RENOVATE" --platform=local --dry-run=lookup --report-type=file \
        --report-path="$RUN/renovate-report.json" || {
        say "Renovate failed; log: $RUN/renovate.out"
        tail -n 30 "$RUN/renovate.out" >&2
        exit 1
    }
fi

# === report ===

python3 - "$RUN" "$ONLY" <<'PY'
import json, os, re, sys

run, only = sys.argv[1], sys.argv[2]
expected = json.load(open(os.path.join(run, "expected.json")))
refs, repos, newest = expected["references"], expected["repositories"], expected["newest"]


def usage(name):
    text = open(os.path.join(run, name + ".time")).read()
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", text).group(1)
    seconds = 0.0
    for part in wall.split(":"):
        seconds = seconds * 60 + float(part)
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1))
    lines = open(os.path.join(run, name + ".access.log")).read().splitlines()
    tag_lists = sum(1 for l in lines if re.search(r'"GET /v2/\S+/tags/list', l))
    return {"wall_s": seconds, "peak_rss_mb": rss_kb / 1024, "tag_list_requests": tag_lists,
            "registry_requests": len(lines)}


def changes_in(node):
    """Every object in tagpilot's JSON that reads as a change (file, from, to)."""
    if isinstance(node, dict):
        if {"file", "from", "to"} <= node.keys():
            yield node
        for value in node.values():
            yield from changes_in(value)
    elif isinstance(node, list):
        for value in node:
            yield from changes_in(value)


results, problems = {}, []
if only in ("", "tagpilot"):
    r = usage("tagpilot")
    plan = json.load(open(os.path.join(run, "tagpilot.out")))
    changes = list(changes_in(plan))
    r["changes"] = len(changes)
    r["changes_to_newest"] = sum(1 for c in changes if str(c["to"]).endswith(newest))
    if r["changes_to_newest"] != refs:
        problems.append(f"tagpilot: {r['changes_to_newest']} of {refs} references move to {newest}")
    reported = [p for key in ("problems", "errors") for p in (plan.get(key) or [])] if isinstance(plan, dict) else []
    if reported:
        problems.append(f"tagpilot reported {len(reported)} problem(s), first: {reported[0]}")
    results["tagpilot"] = r
if only in ("", "renovate"):
    r = usage("renovate")
    report = json.load(open(os.path.join(run, "renovate-report.json")))
    deps = [
        d
        for repo in report["repositories"].values()
        for files in repo["packageFiles"].values()
        for f in files
        for d in f["deps"]
        if d.get("datasource") == "docker"
    ]
    r["image_references"] = len(deps)
    r["references_with_update_to_newest"] = sum(
        1 for d in deps if any(u.get("newValue") == newest for u in d.get("updates", []))
    )
    if r["references_with_update_to_newest"] != refs:
        problems.append(
            f"Renovate: {r['references_with_update_to_newest']} of {refs} references "
            f"have an update to {newest} (did it reach the registry?)"
        )
    results["renovate"] = r
results["expected"] = expected
results["problems"] = problems
json.dump(results, open(os.path.join(run, "results.json"), "w"), indent=2)

print(f"\n{expected['files']} files, {refs} image references, {repos} repositories x "
      f"{expected['tags_per_repository']} tags\n")
print(f"{'':10} {'wall':>9} {'peak RSS':>10} {'tags/list':>10} {'/v2/ requests':>14}")
for name, label in (("tagpilot", "tagpilot"), ("renovate", "Renovate")):
    if name in results:
        r = results[name]
        print(f"{label:10} {r['wall_s']:8.2f}s {r['peak_rss_mb']:8.1f}MB "
              f"{r['tag_list_requests']:>10} {r['registry_requests']:>14}")
if "tagpilot" in results and "renovate" in results:
    t, n = results["tagpilot"], results["renovate"]
    speed = n["wall_s"] / max(t["wall_s"], 0.001)
    memory = t["peak_rss_mb"] / n["peak_rss_mb"]
    ok = lambda good: "met" if good else "MISSED"
    print(f"\ntagpilot is {speed:.1f}x faster (goal >= 50x: {ok(speed >= 50)}) and uses "
          f"{memory:.3f} of Renovate's memory (goal <= 0.1: {ok(memory <= 0.1)}).")
    print(f"tagpilot listed tags {t['tag_list_requests']} times for {repos} repositories "
          f"(goal: {repos}: {ok(t['tag_list_requests'] == repos)}).")
elif "tagpilot" in results:
    t = results["tagpilot"]
    print(f"\ntagpilot listed tags {t['tag_list_requests']} times for {repos} repositories.")
for p in problems:
    print(f"PROBLEM: {p}")
print(f"\nfiles and reports: {run}")
sys.exit(1 if problems else 0)
PY
