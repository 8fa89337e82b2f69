#!/usr/bin/env bash
# What a sliding log's length costs an ADJUST and a refused CHECK (bench/slog_bench.c), for
# the working tree and a base revision, built alike (gcc -O2 from node/ of each), RUNS runs
# each alternating; prints each run's table (docs/BENCHMARKS.md, "A long sliding log").
#   bash bench/slog_bench.sh [BASE_REV] (default 9a22cc0: the log walked) ; RUNS=3, SIZES
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-9a22cc0}
runs=${RUNS:-3}
sizes=${SIZES:-1000 100000 1000000}
work=$(mktemp -d /tmp/rl-slogbench-XXXXXX)
trap 'rm -rf "$work"' EXIT
build() { # $1: a directory holding node/ and common/, $2: the program
    gcc -O2 -std=gnu11 -DNDEBUG -I"$1/node" -I"$1/common" -Ibench bench/slog_bench.c \
        "$1/node/algo.c" "$1/node/algo_conc.c" "$1/node/slog.c" -o "$2" -lm
}
mkdir "$work/base"
git archive "$base" node common | tar -x -C "$work/base"
build "$work/base" "$work/base.bin"
build . "$work/current.bin"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load: $(cut -d' ' -f1-3 /proc/loadavg); current: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- node || echo '+changes'), base: $base"
for i in $(seq "$runs"); do
    echo "== run $i: base $base"
    "$work/base.bin" $sizes
    echo "== run $i: current"
    "$work/current.bin" $sizes
done
