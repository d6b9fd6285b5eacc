#!/usr/bin/env bash
# The promotion example, worked end to end on this machine: dev follows the registry, staging
# takes what dev has run for an hour, prod what staging has run for two (policies/shop.yaml).
#
# Usage: examples/promotion/run.sh
#
# 1. starts a lab registry on a free port of 127.0.0.1 and pushes acme/shop 1.0.0, 1.1.0, 1.2.0;
# 2. makes a bare git repository of environments/ with a history as a team would have it, the
#    commits back-dated: everything on 1.0.0 ten hours ago, dev on 1.1.0 three hours ago, and
#    staging on 1.1.0 thirty minutes ago;
# 3. runs `tagpilot plan` (dev moves to 1.2.0; staging is up to date; prod waits for 1.1.0 to
#    soak in staging), `tagpilot apply` (dev's commit is pushed), and `tagpilot plan` again
#    (staging now waits for 1.2.0 to soak in dev).
# Without a cluster, "runs" means "is on the base branch" and soak time counts from the commit
# that set the tag; see the README's section on promotion for Applications and verification.
#
# Environment: TAGPILOT_PROMOTION_DIR (default ${TMPDIR:-/tmp}/tagpilot-promotion) is the
# scratch directory; TAGPILOT names a tagpilot binary to use instead of building one.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
WORK="${TAGPILOT_PROMOTION_DIR:-${TMPDIR:-/tmp}/tagpilot-promotion}"
if (($# > 0)); then
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 64
fi

step() { printf '\n==> %s\n' "$*"; }
show() {
    printf '\n$ %s\n' "$*" | sed "s#$TAGPILOT#tagpilot#"
    (cd "$WORK/config" && "$@")
}

# shellcheck source=scripts/lib/apt.sh
source "$ROOT/scripts/lib/apt.sh"
ensure_packages docker-registry python3 git
if [[ -z "${TAGPILOT:-}" ]]; then
    # shellcheck source=scripts/lib/cargo.sh
    source "$ROOT/scripts/lib/cargo.sh"
    cargo_on_path
    step "Building tagpilot"
    (cd "$ROOT" && cargo build --locked --bin tagpilot)
    TAGPILOT="${CARGO_TARGET_DIR:-$ROOT/target}/debug/tagpilot"
fi

rm -rf "$WORK"
mkdir -p "$WORK"
export TAGPILOT_LAB_DIR="$WORK/lab"
trap '"$ROOT/scripts/lab-registry.sh" stop >/dev/null 2>&1 || true' EXIT
step "Starting a local registry with acme/shop 1.0.0, 1.1.0 and 1.2.0"
REGISTRY="$("$ROOT/scripts/lab-registry.sh" start 0 | tail -n 1)"
python3 "$ROOT/scripts/push-images.py" --registry "$REGISTRY" \
    acme/shop:1.0.0 acme/shop:1.1.0 acme/shop:1.2.0 >/dev/null

step "A manifest repository whose history is dev on 1.1.0 for 3h, staging for 30m"
BARE="$WORK/environments.git"
CLONE="$WORK/environments"
git init -q --bare -b main "$BARE"
cp -r "$HERE/environments" "$CLONE"
grep -rlF '127.0.0.1:5000' "$CLONE" | xargs sed -i "s/127\.0\.0\.1:5000/$REGISTRY/g"
git -C "$CLONE" init -q -b main
# commit MINUTES_AGO MESSAGE: a commit of the clone's changes, dated that long ago.
commit() {
    local date
    date="$(date -u -d "@$(($(date +%s) - $1 * 60))" '+%Y-%m-%dT%H:%M:%SZ')"
    git -C "$CLONE" add -A
    GIT_AUTHOR_DATE="$date" GIT_COMMITTER_DATE="$date" \
        git -C "$CLONE" -c user.name=team -c user.email=team@example.com commit -qm "$2"
}
set_tag() { sed -i "s/newTag: .*/newTag: $2/" "$CLONE/envs/$1/kustomization.yaml"; }
commit 600 "dev, staging and prod on 1.0.0"
set_tag dev 1.1.0 && commit 180 "dev: 1.1.0"
set_tag staging 1.1.0 && commit 30 "staging: 1.1.0 (promoted)"
git -C "$CLONE" push -q "$BARE" main
git -C "$BARE" log --format='  %cd  %s' --date=iso-local main

mkdir -p "$WORK/config"
cp -r "$HERE/policies" "$WORK/config/policies"
sed -i "s/127\.0\.0\.1:5000/$REGISTRY/g" "$WORK/config/policies/shop.yaml"
sed -e "s/127\.0\.0\.1:5000/$REGISTRY/g" -e "s#file:///srv/git/environments.git#file://$BARE#" \
    "$HERE/tagpilot.yaml" >"$WORK/config/tagpilot.yaml"
CACHE=(--cache-dir "$WORK/cache")

step "What would change: dev takes 1.2.0; prod waits for 1.1.0 to soak in staging"
show "$TAGPILOT" plan "${CACHE[@]}"

step "Applying: dev's change is pushed"
show "$TAGPILOT" apply "${CACHE[@]}"
git -C "$BARE" log --format='  %cd  %s' --date=iso-local -1 main

step "Planning again: staging waits for 1.2.0 to soak in dev for an hour"
show "$TAGPILOT" plan "${CACHE[@]}"

step "Done"
echo "The repository is $BARE; its configuration is in $WORK/config."
