#!/usr/bin/env bash
# Builds ratelimiter: scripts/build.sh [release|asan]. Release goes to build/, the
# AddressSanitizer+UBSan build to build-asan/. Installs the Debian dependencies first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
kind=${1:-release}
case "$kind" in
release) dir=build; flags=(-DCMAKE_BUILD_TYPE=Release) ;;
asan) dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=Debug -DRL_SANITIZE=ON) ;;
*) echo "usage: scripts/build.sh [release|asan]" >&2; exit 2 ;;
esac
cmake -S . -B "$dir" "${flags[@]}" >/dev/null
cmake --build "$dir" -j"$(nproc)"
