#!/usr/bin/env bash
# Runs the test command (scripts/test.sh, with the same arguments) on a busy machine: a CPU
# hog (stress-ng, one worker per core at HOG_LOAD percent, 100 by default) runs beside it
# for the whole run and is stopped however the run ends. The tests must pass this way too:
# they wait on what they check, never on the time it takes (docs/ARCHITECTURE.md, "Tests").
#   scripts/busy.sh            every test, beside the hog
#   scripts/busy.sh release    the Release suites only, beside the hog
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
load=${HOG_LOAD:-100}
stress-ng --cpu "$(nproc)" --cpu-load "$load" --timeout 7200s --quiet &
hog=$!
trap 'kill "$hog" 2>/dev/null || true; wait "$hog" 2>/dev/null || true' EXIT
echo "busy: stress-ng --cpu $(nproc) --cpu-load $load beside scripts/test.sh $*" >&2
bash scripts/test.sh "$@"
