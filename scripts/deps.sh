#!/usr/bin/env bash
# Installs the Debian packages ratelimiter builds, tests and demos with.
# A no-op when everything is already installed; needs root (or sudo) otherwise.
# nodejs: the Node.js clients of the RESP tests (tests/resp/); it brings npm, from Debian or
# from a nodejs package that bundles it. chromium: headless, opens rl-chaos's report page in
# its test (tests/chaos/check_report.py). stress-ng: the CPU hog of scripts/busy.sh.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libuv1-dev libmsgpack-dev libzookeeper-mt-dev
      check libsubunit-dev libxxhash-dev libinih-dev zookeeper default-jre-headless
      procps clang libclang-rt-dev python3 libssl-dev libyaml-dev protobuf-c-compiler
      libprotobuf-c-dev libprotobuf-dev protobuf-compiler python3-protobuf
      libnghttp2-dev nghttp2-client python3-grpcio python3-h2 libmicrohttpd-dev prometheus nginx libnginx-mod-http-lua wrk
      python3-pytest python3-msgpack redis-tools redis-server python3-redis nodejs python3-venv python3-setuptools python3-pip curl iproute2
      chromium stress-ng)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
command -v npm >/dev/null 2>&1 || missing+=(npm) # Debian's nodejs comes without it
[ ${#missing[@]} -eq 0 ] && exit 0
echo "deps: installing ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
