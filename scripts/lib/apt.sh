# shellcheck shell=bash
# Sourced by the scripts that set up a machine: installs missing Debian packages, as root
# directly or through sudo, and leaves apt alone when everything is there (fast reruns).
#
# Some of the packages are servers (openssh-server, lighttpd, docker-registry) that the tests
# start on their own, on loopback. Debian starts a server's system service when it installs it;
# here nothing is started at install time: a policy-rc.d that forbids every start (exit 101,
# see /usr/share/doc/init-system-helpers/README.policy-rc.d) stands while apt runs, and
# whatever policy was there before is put back afterwards.

# The file invoke-rc.d and deb-systemd-invoke ask before they start a service.
POLICY_RC_D_DEFAULT=/usr/sbin/policy-rc.d

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
    echo "installing ${missing[*]} (their services are not started)" >&2
    "${as_root[@]}" apt-get update -q
    without_service_starts "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q "${missing[@]}"
}

# without_service_starts CMD...: runs CMD while Debian's maintainer scripts may not start any
# service, then restores the policy that was there (or none). The policy file is
# $POLICY_RC_D, default /usr/sbin/policy-rc.d; it is written as root when CMD starts with sudo.
without_service_starts() {
    local policy="${POLICY_RC_D:-$POLICY_RC_D_DEFAULT}" saved="" rc=0 as_root=() previous
    previous="$(trap -p EXIT)"
    [[ "${1:-}" == sudo ]] && as_root=(sudo)
    if [[ -e "$policy" ]]; then
        saved="$policy.tagpilot-saved"
        "${as_root[@]}" cp -p "$policy" "$saved"
    fi
    # An interrupted install must not leave every later service start forbidden.
    # shellcheck disable=SC2064 # expand now: the trap runs after these locals are gone
    trap "_restore_policy_rc_d '$policy' '$saved' ${as_root[*]}" EXIT
    printf '#!/bin/sh\n# scripts/lib/apt.sh: no service starts while tagpilot installs packages\nexit 101\n' |
        "${as_root[@]}" tee "$policy" >/dev/null
    "${as_root[@]}" chmod 755 "$policy"
    "$@" || rc=$?
    _restore_policy_rc_d "$policy" "$saved" "${as_root[@]}"
    eval "${previous:-trap - EXIT}"
    return "$rc"
}

# _restore_policy_rc_d POLICY SAVED [sudo]: puts SAVED back as POLICY, or removes POLICY.
_restore_policy_rc_d() {
    local policy="$1" saved="$2"
    shift 2
    if [[ -n "$saved" ]]; then
        "$@" mv -f "$saved" "$policy"
    else
        "$@" rm -f "$policy"
    fi
}
