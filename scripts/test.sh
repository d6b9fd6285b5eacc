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

# shellcheck source=scripts/lib/apt.sh
source scripts/lib/apt.sh
ensure_packages "${PACKAGES[@]}"

# rustup installs cargo under ~/.cargo/bin, which a non-login shell may not have on PATH.
if ! command -v cargo >/dev/null && [[ -x "$HOME/.cargo/bin/cargo" ]]; then
    PATH="$HOME/.cargo/bin:$PATH"
fi

exec cargo test --locked "$@"
