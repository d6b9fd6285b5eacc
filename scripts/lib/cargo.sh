# shellcheck shell=bash
# Sourced by the scripts that run cargo.

# cargo_on_path: rustup installs cargo under ~/.cargo/bin, which a non-login shell (a fresh
# terminal before `source ~/.cargo/env`, sudo, CI) may not have on PATH.
cargo_on_path() {
    if ! command -v cargo >/dev/null && [[ -x "$HOME/.cargo/bin/cargo" ]]; then
        PATH="$HOME/.cargo/bin:$PATH"
    fi
}
