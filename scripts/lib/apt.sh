# shellcheck shell=bash
# Sourced by the scripts that set up a machine: installs missing Debian packages, as root
# directly or through sudo, and leaves apt alone when everything is there (fast reruns).

# ensure_packages PKG...: apt-get installs whichever of PKG is not installed yet.
ensure_packages() {
    local pkg status missing=() as_root=()
    for pkg in "$@"; do
        status="$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)"
        [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
    done
    ((${#missing[@]} > 0)) || return 0
    if ((EUID != 0)); then
        if ! command -v sudo >/dev/null; then
            echo "need root or sudo to install: ${missing[*]}" >&2
            return 1
        fi
        as_root=(sudo)
    fi
    echo "installing ${missing[*]}" >&2
    "${as_root[@]}" apt-get update -q
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
}
