#!/usr/bin/env bash
# Runs the libFuzzer harnesses of tests/fuzz (docs/FUZZING.md) for SECONDS each (default 20):
#   scripts/fuzz.sh [SECONDS]        FUZZ_TARGETS="wire conf" to run a subset
# Builds them with clang (-fsanitize=fuzzer,address,undefined) in build-fuzz/, runs each on
# a copy of its committed seed corpus (the corpus in the repository never grows), and fails
# on any crash, leak, timeout or broken invariant, printing the reproducer's path.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
secs=${1:-20}
targets=${FUZZ_TARGETS:-wire conf assign reqline slices envoycfg rls resp handoff}
build=${FUZZ_BUILD_DIR:-$top/build-fuzz}
command -v clang >/dev/null || { echo "scripts/fuzz.sh: clang is missing (scripts/deps.sh installs it)" >&2; exit 2; }
CC=clang cmake -S . -B "$build" -DRL_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build "$build" -j"$(nproc)" --target $(printf 'fuzz_%s ' $targets) >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
for t in $targets; do
    mkdir -p "$work/$t/corpus" "$work/$t/artifacts"
    cp tests/fuzz/corpus/"$t"/* "$work/$t/corpus/"
    max_len=4096
    [ "$t" = wire ] && max_len=70000
    [ "$t" = resp ] && max_len=70000
    [ "$t" = handoff ] && max_len=20000
    if "$build/tests/fuzz/fuzz_$t" -max_total_time="$secs" -max_len="$max_len" -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$work/$t/artifacts/" \
        "$work/$t/corpus" >"$work/$t/log" 2>&1; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$t/log")
        echo "fuzz_$t: ok, $runs executions in ${secs}s"
    else
        status=1
        echo "fuzz_$t: FAILED" >&2
        grep -E 'ERROR|SUMMARY|#[0-9]+ 0x' "$work/$t/log" | head -20 >&2 || true
        for a in "$work/$t/artifacts"/*; do
            [ -e "$a" ] || continue
            mkdir -p "$top/build-fuzz/crashes"
            cp "$a" "$top/build-fuzz/crashes/"
            echo "reproduce: $build/tests/fuzz/fuzz_$t $top/build-fuzz/crashes/$(basename "$a")" >&2
        done
    fi
done
exit $status
