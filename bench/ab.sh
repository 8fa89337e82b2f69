#!/usr/bin/env bash
# Before/after: runs one bench script against a baseline revision and against this checkout,
# alternating (base, this, base, this...) so that both see the same machine conditions.
#   bench/ab.sh REV node|router [ROUNDS]     (RUNS per script: 3 by default)
# The baseline is checked out with `git worktree` into a temporary directory and built
# there (Release); nothing in this checkout changes. Prints each script's RESULT lines
# prefixed with the side and the round.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
rev=${1:?usage: bench/ab.sh REV node|router [ROUNDS]}
what=${2:?usage: bench/ab.sh REV node|router [ROUNDS]}
rounds=${3:-2}
export RUNS=${RUNS:-3} NO_REDIS=1
base=$(mktemp -d)
trap 'git -C "$top" worktree remove --force "$base" >/dev/null 2>&1 || rm -rf "$base"' EXIT
git -C "$top" worktree add --detach "$base" "$rev" >/dev/null
case "$what" in
node) script=bench/node_bench.sh; args=(latency) ;;
router) script=bench/router_bench.sh; args=() ;;
*) echo "bench/ab.sh: unknown benchmark \"$what\" (node or router)" >&2; exit 2 ;;
esac
for round in $(seq 1 "$rounds"); do
    for side in base this; do
        dir=$top; [ "$side" = base ] && dir=$base
        bash "$dir/$script" "${args[@]}" 2>&1 | grep -E '^(RESULT|throughput run|run )' |
            sed "s/^/$side round $round: /"
    done
done
