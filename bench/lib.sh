# Shared by the benchmark scripts; sourced, not run. Needs ROOT (the checkout) and say().

# tagpilot_binary: prints the absolute path of $TAGPILOT, or of the release build, built first
# when it is missing.
tagpilot_binary() {
    local bin="${TAGPILOT:-${CARGO_TARGET_DIR:-$ROOT/target}/release/tagpilot}"
    if [[ ! -x "$bin" ]]; then
        say "building tagpilot (release)"
        (cd "$ROOT" && cargo build --release --locked --bin tagpilot) >&2
    fi
    realpath "$bin"
}
