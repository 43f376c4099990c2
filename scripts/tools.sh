#!/usr/bin/env bash
# Make sure the command-line tools the tests call are installed; used by `make test` (and CI).
#
# Idempotent. The tools and the Debian packages that bring them:
#   docker-compose             docker-compose  tests/deploy checks docker-compose.yml
#   promtool                   prometheus      tests/deploy checks the alert rules
#   chromium, chromedriver     chromium, chromium-driver
#                                              tests/console load the web console headless
#   zsh                        zsh             tests/cli checks the zsh completion script
#   nft                        nftables        tests/dataplane: the netlab's policers and counters
#   ip                         iproute2        tests/dataplane: the netlab's namespaces and links
# Missing ones are installed together (as root). Prints a line per tool; exits non-zero with
# the reason when a tool cannot be had.
set -uo pipefail

declare -A package_of=(
    [docker-compose]=docker-compose
    [promtool]=prometheus
    [chromium]=chromium
    [chromedriver]=chromium-driver
    [zsh]=zsh
    [nft]=nftables
    [ip]=iproute2
)
tools=(docker-compose promtool chromium chromedriver zsh nft ip)

missing=()
for tool in "${tools[@]}"; do
    command -v "$tool" >/dev/null || missing+=("${package_of[$tool]}")
done

if ((${#missing[@]})); then
    if [[ "$(id -u)" != 0 ]]; then
        echo "tools: NOT AVAILABLE: need root to install ${missing[*]} (apt-get install -y ${missing[*]})" >&2
        exit 1
    fi
    log=/tmp/cnbrain-tools-apt.log
    # A failed update is not fatal: the package lists at hand may suffice.
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >"$log" 2>&1
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >>"$log" 2>&1; then
        tail -n 5 "$log" >&2
        echo "tools: NOT AVAILABLE: installing Debian's ${missing[*]} failed (see $log)" >&2
        exit 1
    fi
fi

status=0
for tool in "${tools[@]}"; do
    if command -v "$tool" >/dev/null; then
        printf '%s: %s\n' "$tool" "$(command -v "$tool")"
    else
        echo "$tool: NOT AVAILABLE after installing ${package_of[$tool]}" >&2
        status=1
    fi
done
exit $status
