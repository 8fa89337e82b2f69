#!/usr/bin/env bash
# Runs rl-chaos over every shipped scenario (tools/chaos/scenarios/*.ini) against the
# Release build, one after the other, and prints one line per scenario and a closing
# "chaos: N passed, N failed" line. Exit 0 only if every scenario passed.
#   scripts/chaos.sh                 every scenario at its own duration (the CI suite, ~3 min;
#                                    kill-under-abuse among them: a refusal outlives its node)
#   scripts/chaos.sh node-kill ...   just these
#   CHAOS_ARGS="--duration 60s --rate 4000" scripts/chaos.sh   longer runs (bench/chaos.sh)
# A failing scenario's whole output (live lines, violations with the events around them,
# then its processes' warnings and handoff lines) is printed; CHAOS_OUT=DIR keeps every output and JSON verdict there. A scenario that
# fails is run once more (CHAOS_RETRY=0: never) and counts as passed if that run passes,
# with the first run's verdict printed and named at the end: a shared machine may stall.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh release >/dev/null
out=${CHAOS_OUT:-$(mktemp -d)}
mkdir -p "$out"
if [ $# -gt 0 ]; then
    names=("$@")
else
    names=()
    for f in tools/chaos/scenarios/*.ini; do names+=("$(basename "$f" .ini)"); done
fi
passed=0
failed=0
failures=()
flaky=()
run() { # run NAME SUFFIX
    # Each run's processes write their logs under a directory of its own, kept (RL_KEEP_TMP)
    # only until the run is judged: a failing run's node and router logs are summed up below.
    local tmp="$out/$1$2.tmp" code=0
    mkdir -p "$tmp"
    # shellcheck disable=SC2086
    TMPDIR="$tmp" RL_KEEP_TMP=1 build/rl-chaos run "$1" --json "$out/$1$2.json" ${CHAOS_ARGS:-} \
        >"$out/$1$2.out" 2>&1 || code=$?
    if [ "$code" -ne 0 ]; then
        logs "$tmp" >>"$out/$1$2.out"
    fi
    rm -rf "$tmp"
    return "$code"
}
logs() { # logs DIR: the warnings and the handoff lines of each process's log, its last 40
    local f
    for f in "$1"/rl-test-*/*.log; do
        [ -e "$f" ] || continue
        echo "log $(basename "$f") (warn, error, handoff; the last 40):"
        grep -E ' (warn|error):|handoff|joining|leaving|registered|signal' "$f" |
            grep -v 'rule(s) with failure' | tail -40 |
            sed 's/^/  /' || true
    done
}
for s in "${names[@]}"; do
    start=$(date +%s)
    code=0
    run "$s" "" || code=$?
    if [ "$code" -eq 0 ]; then
        passed=$((passed + 1))
        verdict=PASS
    elif [ "$code" -eq 130 ]; then
        echo "chaos: interrupted"
        exit 130
    elif [ "$code" -eq 1 ] && [ "${CHAOS_RETRY:-1}" -gt 0 ] && run "$s" .retry; then
        # A shared 2-core machine can stall a process past a deadline now and then: a
        # scenario that fails once and passes on a second run is reported, not failed.
        passed=$((passed + 1))
        flaky+=("$s")
        verdict="PASS on a second run (the first run's verdict below)"
    else
        failed=$((failed + 1))
        failures+=("$s")
        verdict=FAIL
    fi
    printf '%-24s %s (%ss)  %s\n' "$s" "$verdict" "$(($(date +%s) - start))" \
        "$(grep -m1 '^ *worst latency' "$out/$s.out" | sed 's/^ *//' || true)"
    if [ "$verdict" = FAIL ]; then
        sed 's/^/    /' "$out/$s.out"
    elif [ -e "$out/$s.retry.out" ]; then
        sed -n '/^invariant/,$p' "$out/$s.out" | sed 's/^/    /'
    fi
done
[ -n "${CHAOS_OUT:-}" ] || rm -rf "$out"
[ ${#flaky[@]} -eq 0 ] || echo "chaos: passed only on a second run: ${flaky[*]}"
echo "chaos: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
