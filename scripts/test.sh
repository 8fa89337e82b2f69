#!/usr/bin/env bash
# Sets everything up and runs every test: the unit and integration suites on the Release
# build, and beside them a short run of every libFuzzer harness (scripts/fuzz.sh;
# FUZZ_SECONDS each, 10 by default) and the Python client's tests against the Release build's
# processes (clients/python/run_tests.sh: it installs the package into a venv first), then
# all the suites again under AddressSanitizer+UBSan (built beside the Release suites too),
# then every rl-chaos scenario against the Release
# build (scripts/chaos.sh), then a cluster spread over network namespaces, over mutual TLS,
# with a partition
# (scripts/netns.sh: as root only; elsewhere it prints "netns: skipped (needs root and ip
# netns)"). The ctest suites include the install test, the real-Prometheus
# test and the real-nginx test.
#   scripts/test.sh            all six
#   scripts/test.sh release    Release only (quicker while developing)
#   scripts/test.sh python     the Python client only (after a Release build)
#   scripts/test.sh fuzz       the fuzzers only
#   scripts/test.sh chaos      the chaos scenarios only
#   scripts/test.sh netns      the cluster across network namespaces only (root; TLS=0:
#                              plaintext)
set -euo pipefail
cd "$(dirname "$0")/.."
which=${1:-all}
export CK_DEFAULT_TIMEOUT=${CK_DEFAULT_TIMEOUT:-60}
# Every suite's own time limits (tcase_set_timeout) are waits, not assertions: three times
# them, so a loaded 2-core machine (or ASan's slowdown) does not turn a wait into a failure.
export CK_TIMEOUT_MULTIPLIER=${CK_TIMEOUT_MULTIPLIER:-3}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/lsan.supp}
status=0
# Beside the Release suites (whose tests mostly wait on processes, ZooKeeper and timers) run
# the fuzzers, the Python client's tests and the ASan build, each its output kept and printed
# after them, so the whole run takes less wall time; the ASan suites, the chaos scenarios and
# the network namespaces run alone. Every test must pass on a busy machine anyway
# (scripts/busy.sh).
logs=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$logs"' EXIT
beside() { # beside NAME HEADER COMMAND...: runs COMMAND in the background, output to a log
    local name=$1 header=$2
    shift 2
    echo "$header" >"$logs/$name.log"
    (
        set +e
        "$@" >>"$logs/$name.log" 2>&1
        echo $? >"$logs/$name.rc"
    ) &
    echo "== $name: started beside the Release tests (its output below, once it ends) =="
}
collect() { # collect NAME: waits for it, prints its output, counts its failure
    local name=$1
    while [ ! -e "$logs/$name.rc" ]; do sleep 1; done
    cat "$logs/$name.log"
    [ "$(cat "$logs/$name.rc")" = 0 ] || status=1
}
with_release=
if [ "$which" = all ] || [ "$which" = release ]; then
    echo "== release build (build) =="
    bash scripts/build.sh release
fi
if [ "$which" = all ]; then
    with_release=1
    beside fuzzers "== fuzzers (${FUZZ_SECONDS:-10} s each) ==" \
        bash scripts/fuzz.sh "${FUZZ_SECONDS:-10}"
    beside python "== Python client (clients/python/run_tests.sh) ==" \
        bash clients/python/run_tests.sh
    beside asan-build "== asan build (build-asan) ==" bash scripts/build.sh asan
fi
for kind in release asan; do
    [ "$which" = all ] || [ "$which" = "$kind" ] || continue
    dir=build; [ "$kind" = asan ] && dir=build-asan
    if [ "$kind" = asan ] && [ -n "$with_release" ]; then
        collect asan-build
        [ "$(cat "$logs/asan-build.rc")" = 0 ] || continue # no ASan build: no ASan suites
    elif [ "$kind" = asan ]; then
        echo "== $kind build ($dir) =="
        bash scripts/build.sh "$kind"
    fi
    echo "== $kind tests =="
    (cd "$dir" && ctest --output-on-failure --timeout 900) || status=1
    if [ "$kind" = release ] && [ -n "$with_release" ]; then
        collect fuzzers
        collect python
    fi
done
if [ "$which" = fuzz ]; then
    echo "== fuzzers (${FUZZ_SECONDS:-10} s each) =="
    bash scripts/fuzz.sh "${FUZZ_SECONDS:-10}" || status=1
fi
if [ "$which" = python ]; then
    echo "== Python client (clients/python/run_tests.sh) =="
    [ -x build/rl-router ] || bash scripts/build.sh release
    bash clients/python/run_tests.sh || status=1
fi
if [ "$which" = all ] || [ "$which" = chaos ]; then
    echo "== chaos scenarios (scripts/chaos.sh) =="
    bash scripts/chaos.sh || status=1
fi
if [ "$which" = all ] || [ "$which" = netns ]; then
    echo "== across hosts: network namespaces (scripts/netns.sh) =="
    [ -x build/rl-chaos ] || bash scripts/build.sh release
    # As the chaos scenarios: a run that fails (exit 1) is run once more and passes if that
    # run passes, with the first run's output above it (a shared machine may stall).
    code=0
    bash scripts/netns.sh || code=$?
    if [ "$code" = 1 ] && [ "${CHAOS_RETRY:-1}" -gt 0 ]; then
        echo "netns: the first run failed (above); once more"
        code=0
        bash scripts/netns.sh || code=$?
        [ "$code" != 0 ] || echo "netns: PASS on a second run (the first run's verdict above)"
    fi
    [ "$code" = 0 ] || status=1
fi
exit $status
