#!/usr/bin/env bash
# Installs the Python client into a venv under build/ (offline) and runs its tests against
# the installed package, with real rl-node/rl-router/rl-cli from $RL_BUILD_DIR (default
# build/). A program missing there fails the tests that need it (RL_REQUIRE_BINARIES=1;
# pytest run by hand skips them instead), so a run without binaries cannot pass.
#   scripts/build.sh release && clients/python/run_tests.sh [pytest args...]
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
export RL_BUILD_DIR=${RL_BUILD_DIR:-$top/build}
# Debian's python3 (its python3-msgpack and python3-pytest), not a pyenv/other python first in PATH
py=${PYTHON:-/usr/bin/python3}
[ -x "$py" ] || py=python3
venv=$top/build/pyclient-venv
if [ ! -x "$venv/bin/python" ]; then
    mkdir -p "$top/build"
    "$py" -m venv --system-site-packages "$venv"
fi
"$venv/bin/python" -m pip uninstall -q -y ratelimiter-client >/dev/null 2>&1 || true
"$venv/bin/python" -m pip install -q --no-build-isolation --no-index ./clients/python
"$venv/bin/python" -c 'import ratelimiter, sys; print("testing", ratelimiter.__file__, file=sys.stderr)'
status=0
# grpcio's fork handlers can hang a fork of the test process (conftest.py says why): off
export GRPC_ENABLE_FORK_SUPPORT=false
RL_REQUIRE_INSTALLED=1 RL_REQUIRE_BINARIES=1 "$venv/bin/python" -m pytest clients/python/tests -q "$@" || status=$?
exit $status
