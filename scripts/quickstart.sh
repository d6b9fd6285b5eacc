#!/usr/bin/env bash
# The quickstart: a local registry with a few images, and tagpilot keeping an example manifest
# directory up to date. Works offline on a fresh Debian machine (apt and crates.io aside).
#
# Usage: scripts/quickstart.sh [--keep-registry]
#
# 1. installs the Debian registry package if missing and builds tagpilot (cargo build);
# 2. starts a lab registry on 127.0.0.1:5000 (another free port if that one is busy) and pushes
#    demo/checkout-api, demo/web (plain and -alpine, some multi-arch) and demo/worker images;
# 3. copies examples/quickstart/ to a scratch directory (a git repository, so `git diff` shows
#    what changed), with 127.0.0.1:5000 rewritten to the registry's real address;
# 4. runs there `tagpilot plan --diff`, `tagpilot apply`, and `tagpilot plan --exit-code` to show
#    that nothing is left to do;
# 5. does the same to a git repository: a local bare repository holding the example's manifests,
#    which `tagpilot apply` clones, commits to and pushes to, ending with a commit in it.
# The registry is stopped at the end unless --keep-registry is given.
#
# Environment: TAGPILOT_QUICKSTART_DIR (default ${TMPDIR:-/tmp}/tagpilot-quickstart) is the
# scratch directory; TAGPILOT names a tagpilot binary to use instead of building one.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="${TAGPILOT_QUICKSTART_DIR:-${TMPDIR:-/tmp}/tagpilot-quickstart}"
KEEP_REGISTRY=0
case "${1:-}" in
"") ;;
--keep-registry) KEEP_REGISTRY=1 ;;
*)
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 64
    ;;
esac

# Narration goes to stdout with tagpilot's own output, so that the two stay in order in a log.
if [[ -t 1 ]]; then
    step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
else
    step() { printf '\n==> %s\n' "$*"; }
fi
# show DIR CMD...: prints the command as the user would type it, then runs it in DIR.
show() {
    local dir="$1"
    shift
    printf '\n$ %s\n' "$*" | sed "s#$TAGPILOT#tagpilot#"
    (cd "$dir" && "$@")
}

# === 1. tools ===

# shellcheck source=scripts/lib/apt.sh
source "$ROOT/scripts/lib/apt.sh"
# The registry, what the scripts use, and what building tagpilot's -sys crates needs.
ensure_packages docker-registry python3 git pkg-config libssl-dev
# shellcheck source=scripts/lib/cargo.sh
source "$ROOT/scripts/lib/cargo.sh"
cargo_on_path

if [[ -z "${TAGPILOT:-}" ]]; then
    step "Building tagpilot"
    (cd "$ROOT" && cargo build --locked --bin tagpilot)
    TAGPILOT="${CARGO_TARGET_DIR:-$ROOT/target}/debug/tagpilot"
fi
TAGPILOT="$(cd "$(dirname "$TAGPILOT")" && pwd)/$(basename "$TAGPILOT")"
echo "tagpilot: $TAGPILOT"

# === 2. registry and images ===

mkdir -p "$WORK"
export TAGPILOT_LAB_DIR="$WORK/lab"
stop_registry() { "$ROOT/scripts/lab-registry.sh" stop 2>/dev/null || true; }
if ((KEEP_REGISTRY == 0)); then
    trap stop_registry EXIT
fi
step "Starting a local registry"
stop_registry # a registry kept from an earlier run would still hold its images
REGISTRY="$("$ROOT/scripts/lab-registry.sh" start 5000 | tail -n 1)"

step "Pushing images to $REGISTRY"
# Later tags of a repository get later build times.
python3 "$ROOT/scripts/push-images.py" --registry "$REGISTRY" \
    demo/checkout-api:1.2.0 demo/checkout-api:1.2.3 demo/checkout-api:1.3.0 \
    demo/checkout-api:2.0.0-rc.1 demo/checkout-api:2.0.0 \
    demo/web:1.24.0 demo/web:1.24.0-alpine demo/web:1.25.3 demo/web:1.25.3-alpine \
    'demo/web:1.26.0 platforms=linux/amd64,linux/arm64/v8' \
    'demo/web:1.26.0-alpine platforms=linux/amd64,linux/arm64/v8' \
    demo/web:1.27.0-rc.1 \
    demo/worker:main-1a2b3c4-1718000000 demo/worker:main-5d6e7f8-1719000000 \
    demo/worker:pr-42-0f0f0f0-1719500000 demo/worker:main-9abcdef-1720000000

# === 3. the example directory ===

EXAMPLE="$WORK/example"
step "Copying examples/quickstart to $EXAMPLE"
rm -rf "$EXAMPLE"
cp -r "$ROOT/examples/quickstart" "$EXAMPLE"
grep -rlF '127.0.0.1:5000' "$EXAMPLE" | while IFS= read -r file; do
    sed -i "s/127\.0\.0\.1:5000/$REGISTRY/g" "$file"
done
git -C "$EXAMPLE" init -q -b main
git -C "$EXAMPLE" add -A
git -C "$EXAMPLE" -c user.name=quickstart -c user.email=quickstart@localhost \
    commit -qm "Quickstart example before tagpilot"

# === 4. tagpilot ===

step "What would change (nothing is written yet)"
show "$EXAMPLE" "$TAGPILOT" plan --diff

step "Applying the plan"
show "$EXAMPLE" "$TAGPILOT" apply

step "Planning again: nothing should be left to do"
rc=0
show "$EXAMPLE" "$TAGPILOT" plan --exit-code || rc=$?
if ((rc != 0)); then
    echo "quickstart: the second plan still has work (exit $rc) after apply" >&2
    exit 1
fi

# === 5. a git repository ===

step "Keeping a git repository up to date"
# The manifests as they were before tagpilot, in a bare repository standing in for the team's
# manifest repository; tagpilot's own config lives elsewhere and names it under repositories:.
BARE="$WORK/manifests.git"
GITOPS="$WORK/gitops"
rm -rf "$BARE" "$GITOPS"
git clone -q --bare "$EXAMPLE" "$BARE"
mkdir -p "$GITOPS/policies"
cp "$EXAMPLE/tagpilot.yaml" "$GITOPS/tagpilot.yaml"
cat >>"$GITOPS/tagpilot.yaml" <<EOF
repositories:
  - name: manifests
    url: file://$BARE
    branch: main
    write:
      mode: push
      author: {name: tagpilot, email: tagpilot@users.noreply.example}
EOF
for policy in "$EXAMPLE"/policies/*.yaml; do
    sed 's|^    - paths: \["manifests/\*\*"\]$|    - repository: manifests\n      paths: ["manifests/**"]|' \
        "$policy" >"$GITOPS/policies/$(basename "$policy")"
done
show "$GITOPS" "$TAGPILOT" apply --cache-dir "$WORK/cache"
show "$GITOPS" git --git-dir "$BARE" log --stat -1 main

step "Done"
cat <<EOF
The tagpilot binary is $TAGPILOT
  (cargo install --locked --path $ROOT puts it on PATH as ~/.cargo/bin/tagpilot)
The example lives in $EXAMPLE (a git repository):
  cd $EXAMPLE && git diff          # exactly the bytes tagpilot changed
  tagpilot.yaml, policies/*.yaml   # the configuration and the image policies
  manifests/                       # a Deployment, a kustomization.yaml, Helm values
The git variant: $GITOPS/tagpilot.yaml pushes to $BARE:
  git --git-dir $BARE log -p -1    # tagpilot's commit
EOF
if ((KEEP_REGISTRY == 1)); then
    cat <<EOF
The registry still runs on $REGISTRY; try
  cd $EXAMPLE && $TAGPILOT tags $REGISTRY/demo/web
Stop it with: TAGPILOT_LAB_DIR=$TAGPILOT_LAB_DIR $ROOT/scripts/lab-registry.sh stop
EOF
else
    echo "The registry was stopped; run with --keep-registry to keep it."
fi
