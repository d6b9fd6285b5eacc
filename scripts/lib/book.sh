# shellcheck shell=bash
# Sourced by scripts/test.sh: mdBook, which builds the documentation under docs/, from
# crates.io into DIR/mdbook (pinned; built once, then reused). Only the HTML renderer and its
# search index: the `serve` and `watch` features are for writers at their desks
# (`cargo install mdbook` gives them).

MDBOOK_VERSION="0.5.4"

# ensure_mdbook DIR: prints the path of the mdbook binary.
ensure_mdbook() {
    local dir=$1/mdbook
    if [[ -x "$dir/bin/mdbook" && "$("$dir/bin/mdbook" --version)" == "mdbook v$MDBOOK_VERSION" ]]; then
        echo "$dir/bin/mdbook"
        return 0
    fi
    echo "building mdbook $MDBOOK_VERSION into $dir" >&2
    cargo install --quiet --locked --no-default-features --features search \
        --version "$MDBOOK_VERSION" --root "$dir" mdbook >&2
    echo "$dir/bin/mdbook"
}
