#!/usr/bin/env bash
# The one test command: installs what the tests need, then runs the whole test suite.
#
# Usage: scripts/test.sh [extra cargo test args...]
#   scripts/test.sh                       # everything, as CI runs it
#   scripts/test.sh --test it registry::  # one area of the integration tests
#   scripts/test.sh -- --nocapture
#
# On a fresh Debian 12 machine it apt-installs the real servers and tools the tests start
# (registry, sshd, lighttpd + git http-backend, gpg, ...): as root directly, otherwise via sudo.
# When every package is already installed apt is not touched, so repeated runs start at once.
# Then `cargo test --locked`, a debug build: CI has 90 minutes on 2 cores.
set -euo pipefail

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
)

cd "$(dirname "${BASH_SOURCE[0]}")/.."

missing=()
for pkg in "${PACKAGES[@]}"; do
    status="$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)"
    [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
done

if ((${#missing[@]} > 0)); then
    if ((EUID == 0)); then
        as_root=()
    elif command -v sudo >/dev/null; then
        as_root=(sudo)
    else
        echo "test.sh: need root or sudo to install: ${missing[*]}" >&2
        exit 1
    fi
    echo "test.sh: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    "${as_root[@]}" apt-get update -q
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
fi

# rustup installs cargo under ~/.cargo/bin, which a non-login shell may not have on PATH.
if ! command -v cargo >/dev/null && [[ -x "$HOME/.cargo/bin/cargo" ]]; then
    PATH="$HOME/.cargo/bin:$PATH"
fi

exec cargo test --locked "$@"
