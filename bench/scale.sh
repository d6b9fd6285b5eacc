#!/usr/bin/env bash
# How `tagpilot plan` scales with the number of manifests, policies and Argo CD Applications, on a
# local registry. Run by hand (not in CI); see bench/README.md for the numbers so far.
#
# Usage: bench/scale.sh [SIZE...]
#
# SIZE is one of
#   FILES:POLICIES[:OUTDATED_PERCENT]  the monorepo shape: FILES Deployments (two image references
#       each) over POLICIES registry repositories with one semver ImagePolicy each (every policy
#       targets `apps/**`), OUTDATED_PERCENT of the files (default 100) on older tags; runs
#         tagpilot plan --format json          (cwd: the generated manifest directory)
#   apps:N  the Applications shape: N annotated Directory Applications kept in a git repository
#       (file://), one Deployment each, over 500 images, 1 app in 20 outdated; runs
#         tagpilot plan --format json --cache-dir CACHE
#       twice: first with an empty clone cache, then with the clone cached
#   repos:M:N  the many-repositories shape: N such Applications spread over M manifest
#       repositories (each its own git repository, all in tagpilot.yaml), both runs as above
# Default: 1000:100 10000:1000 50000:1000 50000:1000:2 apps:500 apps:2000 apps:5000 apps:20000
# apps:50000 repos:200:2000.
# Each run is under /usr/bin/time -v; the script checks that the plan moves exactly the outdated
# references with no problem, and prints wall time, CPU time, peak RSS, tag-list requests and all
# /v2/ requests per run (from the registry's access log).
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
((${#SIZES[@]} > 0)) || SIZES=(1000:100 10000:1000 50000:1000 50000:1000:2 apps:500 apps:2000
    apps:5000 apps:20000 apps:50000 repos:200:2000)
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

for size in "${SIZES[@]}"; do
    [[ "$size" =~ ^([0-9]+:[0-9]+(:[0-9]+)?|apps:[0-9]+|repos:[0-9]+:[0-9]+)$ ]] || {
        usage_exit 31
    }
done

# === tools ===

# shellcheck source=scripts/lib/apt.sh
source "$ROOT/scripts/lib/apt.sh"
ensure_packages time docker-registry python3 git

TAGPILOT="$(tagpilot_binary)"
# Each run's working directory is its manifest repository: make the paths absolute.
BINARIES=("tagpilot=$(realpath "$TAGPILOT")")
[[ -n "${TAGPILOT_BASELINE:-}" ]] && BINARIES+=("baseline=$(realpath "$TAGPILOT_BASELINE")")
for i in "${!BINARIES[@]}"; do
    entry="${BINARIES[$i]}"
    [[ -x "${entry#*=}" ]] || {
        say "no tagpilot binary at ${entry#*=}"
        exit 1
    }
    # Each binary runs from a fresh copy: how a file's pages sit in the page cache (one just
    # written by the linker or `cp` is mapped in larger folios) moves the peak RSS of the same
    # binary by up to 2 MB, which would otherwise be read as a difference between the binaries.
    mkdir -p "$BENCH_DIR/bin"
    cp "${entry#*=}" "$BENCH_DIR/bin/${entry%%=*}"
    BINARIES[i]="${entry%%=*}=$BENCH_DIR/bin/${entry%%=*}"
done

# === registry ===

# The Applications shapes follow this many images.
APP_IMAGES=500

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
    case "$size" in
    apps:* | repos:*) policies=$APP_IMAGES ;;
    *) IFS=: read -r _ policies _ <<<"$size" ;;
    esac
    ((policies > max_repos)) && max_repos=$policies
done
say "pushing $max_repos repositories x 20 tags to $REGISTRY"
python3 "$ROOT/bench/generate.py" --registry "$REGISTRY" --out "$BENCH_DIR/tags" \
    --files 0 --repos "$max_repos"
python3 "$ROOT/scripts/push-images.py" --registry "$REGISTRY" --shared-config \
    --from-file "$BENCH_DIR/tags/tags.txt" >/dev/null
rm -rf "$BENCH_DIR/tags"

# === measurement ===

# measure NAME BIN RUN SIZE LABEL DIR ARGS...: one run under /usr/bin/time, checked and recorded.
measure() {
    local name="$1" bin="$2" run="$3" size="$4" label="$5" dir="$6" rc=0 before
    shift 6
    before="$(wc -l <"$ACCESS_LOG")"
    say "running $name ($label) on $size"
    (cd "$dir" && /usr/bin/time -v -o "$run/$name-$label.time" "$bin" plan --format json "$@" \
        >"$run/$name-$label.out" 2>"$run/$name-$label.err") || rc=$?
    tail -n "+$((before + 1))" "$ACCESS_LOG" | grep -F '"' | grep -F ' /v2/' \
        >"$run/$name-$label.access.log" || true
    if ((rc != 0 && rc != 2)); then
        say "$name plan failed (exit $rc); stderr:"
        tail -n 30 "$run/$name-$label.err" >&2
        exit 1
    fi
    python3 - "$run" "$name" "$size" "$label" >>"$RESULTS" <<'PY'
import json, os, re, sys

run, name, size, label = sys.argv[1:5]
stem = os.path.join(run, f"{name}-{label}")
expected = json.load(open(os.path.join(run, "expected.json")))
text = open(stem + ".time").read()
seconds = 0.0
wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", text).group(1)
for part in wall.split(":"):
    seconds = seconds * 60 + float(part)
rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1))
cpu = float(re.search(r"User time \(seconds\): (\S+)", text).group(1)) + float(
    re.search(r"System time \(seconds\): (\S+)", text).group(1)
)
lines = open(stem + ".access.log").read().splitlines()
plan = json.load(open(stem + ".out"))
changes = plan.get("changes", []) if isinstance(plan, dict) else []
problems = []
if len(changes) != expected["outdated_references"]:
    problems.append(f"{len(changes)} changes, expected {expected['outdated_references']}")
if any(not str(c.get("to", "")).endswith(expected["newest"]) for c in changes):
    problems.append("a change does not move to the newest tag")
if isinstance(plan, dict) and plan.get("problems"):
    problems.append(f"{len(plan['problems'])} problems, first: {plan['problems'][0]}")
listings = sum(1 for l in lines if re.search(r'"GET /v2/\S+/tags/list', l))
if listings > expected["repositories"]:
    problems.append(f"{listings} tag listings for {expected['repositories']} repositories")
print(json.dumps({
    "binary": name, "size": size, "run": label,
    "files": expected.get("files", expected.get("apps")),
    "apps": expected.get("apps"),
    "manifest_repositories": expected.get("manifest_repositories"),
    "policies": expected["repositories"], "changes": len(changes),
    "wall_s": seconds, "cpu_s": cpu, "peak_rss_mb": rss_kb / 1024,
    "tag_list_requests": listings,
    "registry_requests": len(lines), "problems": problems,
}))
PY
}

# A generated manifest tree committed to a bare repository on file://.
publish() {
    local tree="$1" bare="$2"
    git init -q --bare -b main "$bare"
    # No automatic gc: a detached `git gc --auto` after the big commit would still be writing
    # into the tree's .git while it is deleted below.
    (cd "$tree" && git init -q -b main && git config gc.auto 0 && git config maintenance.auto false &&
        git add -A &&
        git -c user.name=bench -c user.email=bench@example.invalid commit -qm seed &&
        git push -q "file://$bare" main)
    rm -rf "$tree"
}

for size in "${SIZES[@]}"; do
    run="$BENCH_DIR/run-${size//:/-}"
    rm -rf "$run"
    case "$size" in
    apps:* | repos:*)
        if [[ "$size" == apps:* ]]; then
            apps="${size#apps:}" manifest_repos=0
        else
            IFS=: read -r _ manifest_repos apps <<<"$size"
        fi
        say "generating $apps Applications over $APP_IMAGES images in $((manifest_repos > 0 ? manifest_repos : 1)) repositories"
        python3 "$ROOT/bench/generate.py" --registry "$REGISTRY" --out "$run" --apps "$apps" \
            --repos "$APP_IMAGES" --manifest-repos "$manifest_repos"
        if ((manifest_repos == 0)); then
            sed -i "s#REPO_URL#file://$run/manifests.git#g" "$run/tagpilot.yaml"
            grep -rlF REPO_URL "$run/repo" | xargs -r sed -i "s#REPO_URL#file://$run/manifests.git#g"
            publish "$run/repo" "$run/manifests.git"
        else
            for ((m = 0; m < manifest_repos; m++)); do
                tag="$(printf '%03d' "$m")"
                url="file://$run/manifests-$tag.git"
                sed -i "s#REPO_URL_$tag#$url#g" "$run/tagpilot.yaml"
                grep -rlF "REPO_URL_$tag" "$run/repo-$tag" | xargs -r sed -i "s#REPO_URL_$tag#$url#g"
                publish "$run/repo-$tag" "$run/manifests-$tag.git"
            done
        fi
        for entry in "${BINARIES[@]}"; do
            name="${entry%%=*}" bin="${entry#*=}"
            rm -rf "$run/cache-$name"
            measure "$name" "$bin" "$run" "$size" first "$run" --cache-dir "$run/cache-$name"
            measure "$name" "$bin" "$run" "$size" cached "$run" --cache-dir "$run/cache-$name"
            rm -rf "$run/cache-$name"
        done
        rm -rf "$run"/*.git
        ;;
    *)
        IFS=: read -r files policies outdated <<<"$size"
        outdated="${outdated:-100}"
        say "generating $files files, $policies policies, $outdated% outdated"
        python3 "$ROOT/bench/generate.py" --registry "$REGISTRY" --out "$run" \
            --files "$files" --repos "$policies" --outdated "$outdated"
        for entry in "${BINARIES[@]}"; do
            name="${entry%%=*}" bin="${entry#*=}"
            measure "$name" "$bin" "$run" "$size" local "$run/repo"
        done
        rm -rf "$run/repo"
        ;;
    esac
done

# === report ===

python3 - "$RESULTS" "$BENCH_DIR/results.json" <<'PY'
import json, sys

rows = [json.loads(l) for l in open(sys.argv[1])]
json.dump(rows, open(sys.argv[2], "w"), indent=2)
files = [r for r in rows if r["run"] == "local"]
apps = [r for r in rows if r["run"] != "local"]
if files:
    print()
    print("| binary | files | policies | changes | wall | CPU | peak RSS | tags/list | all /v2/ |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in files:
        print(f"| {r['binary']} | {r['files']:,} | {r['policies']:,} | {r['changes']:,} | "
              f"{r['wall_s']:.2f} s | {r['cpu_s']:.2f} s | {r['peak_rss_mb']:.1f} MB | "
              f"{r['tag_list_requests']:,} | {r['registry_requests']:,} |")
if apps:
    print()
    print("| binary | Applications | repositories | run | changes | wall | CPU | peak RSS | tags/list | all /v2/ |")
    print("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in apps:
        print(f"| {r['binary']} | {r['apps']:,} | {r['manifest_repositories']} | {r['run']} | "
              f"{r['changes']:,} | {r['wall_s']:.2f} s | {r['cpu_s']:.2f} s | "
              f"{r['peak_rss_mb']:.1f} MB | {r['tag_list_requests']:,} | {r['registry_requests']:,} |")
bad = [(r["binary"], r["size"], r["run"], p) for r in rows for p in r["problems"]]
for binary, size, run, p in bad:
    print(f"PROBLEM: {binary} at {size} ({run}): {p}")
sys.exit(1 if bad else 0)
PY
