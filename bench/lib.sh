# Shared by the benchmark scripts; sourced, not run. Needs ROOT (the checkout).

say() { echo "bench: $*" >&2; }

# usage_exit LAST: prints the script's header comment (lines 2 to LAST) and exits 64.
usage_exit() {
    sed -n "2,${1}p" "$0" | sed 's/^# \{0,1\}//' >&2
    exit 64
}

# whole_numbers_or_usage LAST ARG...: usage_exit LAST unless every ARG is a whole number.
whole_numbers_or_usage() {
    local last=$1 arg
    shift
    for arg in "$@"; do
        [[ "$arg" =~ ^[0-9]+$ ]] || usage_exit "$last"
    done
}

# tagpilot_binary: prints the absolute path of $TAGPILOT (which must exist when set), or of the
# release build, built first when it is missing.
tagpilot_binary() {
    if [[ -n "${TAGPILOT:-}" ]]; then
        [[ -x "$TAGPILOT" ]] || {
            say "no tagpilot binary at $TAGPILOT"
            exit 1
        }
        realpath "$TAGPILOT"
        return
    fi
    local bin="${CARGO_TARGET_DIR:-$ROOT/target}/release/tagpilot"
    if [[ ! -x "$bin" ]]; then
        say "building tagpilot (release)"
        (cd "$ROOT" && cargo build --release --locked --bin tagpilot) >&2
    fi
    realpath "$bin"
}
