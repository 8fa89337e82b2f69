#!/usr/bin/env bash
# Runs rl-chaos over every shipped scenario (tools/chaos/scenarios/*.ini) against the
# Release build, one after the other, and prints one line per scenario and a closing
# "chaos: N passed, N failed" line. Exit 0 only if every scenario passed.
#   scripts/chaos.sh                 every scenario at its own duration (the CI suite, ~3 min)
#   scripts/chaos.sh node-kill ...   just these
#   CHAOS_ARGS="--duration 60s --rate 4000" scripts/chaos.sh   longer runs (bench/chaos.sh)
# A failing scenario's whole output (live lines, violations with the events around them)
# is printed; CHAOS_OUT=DIR keeps every output and JSON verdict there.
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
for s in "${names[@]}"; do
    start=$(date +%s)
    # shellcheck disable=SC2086
    if build/rl-chaos run "$s" --json "$out/$s.json" ${CHAOS_ARGS:-} >"$out/$s.out" 2>&1; then
        passed=$((passed + 1))
        verdict=PASS
    else
        failed=$((failed + 1))
        failures+=("$s")
        verdict=FAIL
    fi
    printf '%-24s %s (%ss)  %s\n' "$s" "$verdict" "$(($(date +%s) - start))" \
        "$(grep -m1 '^ *worst latency' "$out/$s.out" | sed 's/^ *//' || true)"
    if [ "$verdict" = FAIL ]; then
        sed 's/^/    /' "$out/$s.out"
    fi
done
[ -n "${CHAOS_OUT:-}" ] || rm -rf "$out"
echo "chaos: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
