#!/usr/bin/env bash
# Peak memory of a writing cycle over one large manifest, as a multiple of the file's size.
# Run by hand (not in CI); see bench/README.md for the numbers so far.
#
# Usage: bench/large-file.sh [MEGABYTES] [REFERENCES]     (default 50 20)
#
# Writes one multi-document YAML file of about MEGABYTES MB (Deployments with long
# environment lists, REFERENCES of them on bench/big:1.0.0, the others on an image no policy
# follows), and a semver policy for bench/big on a lab registry holding 1.0.0 and 1.1.0. Then,
# each under `/usr/bin/time -v`:
#   local   `tagpilot apply` in the directory (read, scan, edit, verify, write the file);
#   remote  `tagpilot apply` with the file in a bare git repository over file:// (clone, read
#           the blob, edit, verify, commit, push).
# and prints the peak RSS of each, and its ratio to the file's size. It checks that every
# reference moved to 1.1.0.
#
# Environment:
#   TAGPILOT_BENCH_DIR  work directory (default ${TMPDIR:-/tmp}/tagpilot-large-file)
#   TAGPILOT            the tagpilot binary (default: target/release/tagpilot, built if missing)
# Goal: peak RSS at most 3x the file's size.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BENCH_DIR="${TAGPILOT_BENCH_DIR:-${TMPDIR:-/tmp}/tagpilot-large-file}"
MB="${1:-50}"
REFS="${2:-20}"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
whole_numbers_or_usage 20 "$MB" "$REFS"

# shellcheck source=scripts/lib/apt.sh
source "$ROOT/scripts/lib/apt.sh"
ensure_packages docker-registry python3 git time

TAGPILOT="$(tagpilot_binary)"

rm -rf "$BENCH_DIR"
mkdir -p "$BENCH_DIR"
export TAGPILOT_LAB_DIR="$BENCH_DIR/lab"
cleanup() { "$ROOT/scripts/lab-registry.sh" stop 2>/dev/null || true; }
trap cleanup EXIT
REGISTRY="$("$ROOT/scripts/lab-registry.sh" start 0 | tail -n 1)"
python3 "$ROOT/scripts/push-images.py" --registry "$REGISTRY" --quiet \
    bench/big:1.0.0 bench/big:1.1.0 >/dev/null

LOCAL="$BENCH_DIR/local"
mkdir -p "$LOCAL/apps" "$LOCAL/policies"
python3 - "$LOCAL/apps/big.yaml" "$MB" "$REFS" "$REGISTRY" <<'EOF'
import sys
path, mb, refs, registry = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
target = mb * 1024 * 1024
env = "".join(
    f"            - name: SETTING_{i:03}\n              value: \"{'x' * 40}\"\n" for i in range(100)
)
def doc(n, image):
    return (
        f"---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app-{n:06}\n"
        f"  labels: {{app: app-{n:06}, tier: backend}}\nspec:\n  replicas: 2\n  template:\n"
        f"    spec:\n      containers:\n        - name: app\n          image: {image}\n"
        f"          env:\n{env}"
    )
size = len(doc(0, "x").encode())
count = max(refs, target // size)
step = max(1, count // max(refs, 1))
with open(path, "w") as f:
    written = 0
    for n in range(count):
        if written < refs and n % step == 0:
            image = f"{registry}/bench/big:1.0.0"
            written += 1
        else:
            image = "registry.example/other/app:1.0.0"
        f.write(doc(n, image))
EOF
SIZE=$(stat -c %s "$LOCAL/apps/big.yaml")
cat >"$LOCAL/tagpilot.yaml" <<EOF
registries:
  - host: $REGISTRY
    insecure: true
policies: policies/
EOF
cat >"$LOCAL/policies/big.yaml" <<EOF
apiVersion: tagpilot.dev/v1alpha1
kind: ImagePolicy
metadata:
  name: big
spec:
  image: $REGISTRY/bench/big
  strategy:
    semver: {}
  targets:
    - paths: ["apps/**"]
EOF

# The same file in a bare repository, for the repository path (clone, blob, commit, push).
REMOTE="$BENCH_DIR/remote"
BARE="$BENCH_DIR/manifests.git"
git init -q --bare -b main "$BARE"
(
    cd "$LOCAL"
    git init -q -b main
    git add apps
    git -c user.name=bench -c user.email=bench@example.invalid commit -q -m "large manifest"
    git push -q "$BARE" main
)
mkdir -p "$REMOTE/policies"
sed "s|    - paths: \[\"apps/\*\*\"\]|    - repository: manifests\n      paths: [\"apps/**\"]|" \
    "$LOCAL/policies/big.yaml" >"$REMOTE/policies/big.yaml"
cat >"$REMOTE/tagpilot.yaml" <<EOF
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
EOF

peak_kb() { awk -F': ' '/Maximum resident set size/ {print $2}' "$1"; }
report() {
    local name="$1" kb="$2"
    python3 -c "import sys; kb, size = int(sys.argv[1]), int(sys.argv[2]); \
print(f'{sys.argv[3]:<7} file {size/1e6:.1f} MB  peak RSS {kb*1024/1e6:.1f} MB  = {kb*1024/size:.2f}x the file')" \
        "$kb" "$SIZE" "$name"
}

say "local: tagpilot apply over one $(numfmt --to=si "$SIZE")B file"
(cd "$LOCAL" && /usr/bin/time -v "$TAGPILOT" apply >"$BENCH_DIR/local.out" 2>"$BENCH_DIR/local.time") || {
    cat "$BENCH_DIR/local.out" "$BENCH_DIR/local.time" >&2
    exit 1
}
moved=$(grep -c "bench/big:1.1.0" "$LOCAL/apps/big.yaml" || true)
[[ "$moved" == "$REFS" ]] || { echo "PROBLEM: $moved of $REFS references moved (local)" >&2; exit 1; }

say "remote: tagpilot apply, pushing to file://$BARE"
(cd "$REMOTE" && HOME="$BENCH_DIR" GIT_CONFIG_NOSYSTEM=1 /usr/bin/time -v "$TAGPILOT" apply \
    --cache-dir "$BENCH_DIR/cache" >"$BENCH_DIR/remote.out" 2>"$BENCH_DIR/remote.time") || {
    cat "$BENCH_DIR/remote.out" "$BENCH_DIR/remote.time" >&2
    exit 1
}
moved=$(git --git-dir="$BARE" show main:apps/big.yaml | grep -c "bench/big:1.1.0" || true)
[[ "$moved" == "$REFS" ]] || { echo "PROBLEM: $moved of $REFS references moved (remote)" >&2; exit 1; }

report local "$(peak_kb "$BENCH_DIR/local.time")"
report remote "$(peak_kb "$BENCH_DIR/remote.time")"
