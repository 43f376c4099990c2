#!/usr/bin/env bash
# Make sure the command-line tools the tests call are installed; used by `make test` (and CI).
#
# Idempotent. Today one tool: docker-compose (tests/deploy validates docker-compose.yml with
# `docker-compose config`). When it is missing, Debian's package docker-compose is installed
# (as root). Prints one line; exits non-zero with the reason when the tool cannot be had.
set -uo pipefail

if command -v docker-compose >/dev/null; then
    printf 'docker-compose: %s (already installed)\n' "$(docker-compose version --short 2>/dev/null)"
    exit 0
fi
if [[ "$(id -u)" != 0 ]]; then
    echo "docker-compose: NOT AVAILABLE: need root to install it (apt-get install -y docker-compose)" >&2
    exit 1
fi
log=/tmp/cnbrain-tools-apt.log
# A failed update is not fatal: the package lists at hand may suffice.
DEBIAN_FRONTEND=noninteractive apt-get update -qq >"$log" 2>&1
if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose >>"$log" 2>&1 ||
    ! command -v docker-compose >/dev/null; then
    tail -n 5 "$log" >&2
    echo "docker-compose: NOT AVAILABLE: installing Debian's package docker-compose failed (see $log)" >&2
    exit 1
fi
printf 'docker-compose: %s (installed)\n' "$(docker-compose version --short 2>/dev/null)"
