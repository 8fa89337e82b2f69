#!/bin/bash
# The bound of docs/REGIONS.md, measured: regions_bound (bench/regions_bound.c) for 2 and 3
# regional clusters on this machine, every user pattern, a fixed window and a token bucket,
# rl-regions every INTERVAL ms with DELAY ms of cross-region latency on its links.
# Usage: bench/regions.sh [BUILD_DIR]; WINDOWS, INTERVAL, DELAY, ALGOS, PATTERNS, REGIONS
# override the matrix. Prints one line per run (allowed/limit per window: mean, max, ...).
set -euo pipefail
build=${1:-build}
windows=${WINDOWS:-30}
interval=${INTERVAL:-2000}
delay=${DELAY:-50}
echo "# $(date -u +%FT%TZ) $(uptime)"
for r in ${REGIONS:-2 3}; do
    for algo in ${ALGOS:-fixed_window token_bucket}; do
        for p in ${PATTERNS:-single spread alternate hop}; do
            "$build/regions_bound" --regions "$r" --algo "$algo" --pattern "$p" \
                --windows "$windows" --interval "$interval" --delay "$delay" | tail -1
        done
    done
done
