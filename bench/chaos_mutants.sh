#!/usr/bin/env bash
# Shows that rl-chaos catches broken builds: each mutant below is a one-line sabotage of the
# product, built in a throwaway worktree of HEAD, then run under the scenario that should
# catch it. A mutant passes this script when rl-chaos FAILS with the named invariant
# violated; the script exits 0 only if every mutant was caught (docs/CHAOS.md).
#   bench/chaos_mutants.sh            every mutant (~2 min each: a build and a scenario)
#   bench/chaos_mutants.sh deadline   one of them
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
bash "$top/scripts/build.sh" release >/dev/null
work=$(mktemp -d)
cleanup() {
    git -C "$top" worktree remove --force "$work/tree" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

# Each mutant: name, file, sed expression, scenario, invariant that must fail.
names=(deadline stale-members inherit-counts wrong-policy)
files=(router/forward.c router/table.c "node/limiter.c node/limiter_int.h" router/forward.c)
exprs=(
    's/r->conf->deadline_ms/(30 * r->conf->deadline_ms)/g'
    '/^rl_router_set_members(/,/^}/ s/    if (r->closing) {/    if (r->closing || n < r->view.nmembers) {/'
    's/if (x->e == NULL || x->e->epoch != epoch) {/if (x->e == NULL) {/; s/if (e->epoch != epoch) {/if (0) {/'
    '/^fill_failure(/,/^}/ s/RL_WIRE_FAIL_CLOSED/RL_WIRE_FAIL_OPEN/'
)
scenarios=(node-pause-short node-kill node-flap node-kill)
invariants=(liveness convergence fresh-start policy)
want=("$@")
caught=0
missed=0
for i in "${!names[@]}"; do
    name=${names[$i]} file=${files[$i]} expr=${exprs[$i]}
    scenario=${scenarios[$i]} invariant=${invariants[$i]}
    if [ ${#want[@]} -gt 0 ] && [[ ! " ${want[*]} " =~ " $name " ]]; then
        continue
    fi
    git -C "$top" worktree remove --force "$work/tree" >/dev/null 2>&1 || true
    git -C "$top" worktree add --detach "$work/tree" HEAD >/dev/null 2>&1
    for f in $file; do # one file, or several separated by spaces
        sed -i "$expr" "$work/tree/$f"
    done
    if git -C "$work/tree" diff --quiet; then
        echo "mutant $name: the sed expression changed nothing in $file (stale mutant)" >&2
        exit 2
    fi
    echo "== mutant $name: $(git -C "$work/tree" diff --stat | tail -1)"
    git -C "$work/tree" diff -U0 | grep '^[-+][^-+]' | sed 's/^/    /'
    (cd "$work/tree" && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null &&
        cmake --build build -j"$(nproc)" --target rl-node rl-router >/dev/null)
    # The tool itself is this checkout's; only the cluster under test is the mutant. A
    # scenario that passes is run once more: whether an inherited count shows depends on
    # where the epoch-aligned windows fall in the run.
    if "$top/build/rl-chaos" run "$top/tools/chaos/scenarios/$scenario.ini" \
        --build "$work/tree/build" >"$work/out" 2>&1 &&
        "$top/build/rl-chaos" run "$top/tools/chaos/scenarios/$scenario.ini" \
            --build "$work/tree/build" >"$work/out" 2>&1; then
        echo "   NOT CAUGHT: $scenario passed twice"
        missed=$((missed + 1))
    elif grep -Eq "^$invariant +NO " "$work/out"; then
        echo "   caught by $scenario: $(grep -E "^$invariant +NO " "$work/out")"
        grep -m2 "^  $invariant violated" "$work/out" | cut -c1-400 | sed 's/^/   /'
        caught=$((caught + 1))
    else
        echo "   $scenario failed, but not on $invariant:"
        sed 's/^/    /' "$work/out" | tail -25
        missed=$((missed + 1))
    fi
done
echo "mutants: $caught passed, $missed failed"
[ "$missed" -eq 0 ]
