#!/usr/bin/env bash
# The node's events log under abuse (docs/BENCHMARKS.md, "Under abuse"): one client (rl-bench,
# one connection) cycling 1,000 users in order against one rl-node on
# `fixed_window 1 per 100ms`, so every user opens and closes a throttling episode each window.
#   bench/events_log.sh            (RUNS rounds, 3 by default; DURATION seconds, 10; BIN=build dir)
# Prints per round the bytes the node wrote to its events log per second, its lines, and the
# file's mode; then the medians. Runs against any build (BIN=/path/to/build): when the binary
# knows events_log_max_size, rotation is turned off (events_log_max_size = 0) so every byte
# written stays in one file and is counted; events_log_rate stays at its default. ROTATE=1
# keeps the default rotation instead and reports the bytes left on disk (PATH and PATH.N).
source "$(dirname "$0")/lib.sh"
bin=${BIN:-$bin}
runs=${RUNS:-3}
duration=${DURATION:-10}
tmp=$(mktemp -d)
trap 'bench_cleanup; rm -rf "$tmp"' EXIT

bounds=no
if grep -q events_log_max_size "$bin/rl-node"; then
    bounds=yes
fi

machine
echo "binaries: $bin ($("$bin/rl-node" --version 2>&1 | head -1)); events log bounds: $bounds"
for round in $(seq 1 "$runs"); do
    rm -f "$tmp"/events.jsonl*
    port=$(free_port)
    {
        printf '[cluster]\nname = evlog\nevents_log = %s/events.jsonl\n' "$tmp"
        if [ "$bounds" = yes ] && [ "${ROTATE:-0}" != 1 ]; then
            printf 'events_log_max_size = 0\n'
        fi
        printf '[node n1]\nlisten = 127.0.0.1:%s\n' "$port"
        printf '[service abuse]\nlimit = fixed_window 1 per 100ms\n'
    } >"$tmp/evlog.conf"
    (umask 022 && exec "$bin/rl-node" --config "$tmp/evlog.conf" --name n1 --log-level error \
        2>"$tmp/node.log") &
    node_pid=$!
    pids+=($node_pid)
    wait_port "$port"
    out=$("$bin/rl-bench" --target "127.0.0.1:$port" --connections 1 --pipeline 64 \
        --keys 1000 --sequential --service abuse --duration "$duration" --json | tail -1)
    sleep 1.5 # the node writes its buffer once a second
    bytes=$(cat "$tmp"/events.jsonl* | wc -c)
    lines=$(cat "$tmp"/events.jsonl* | wc -l)
    summaries=$(cat "$tmp"/events.jsonl* | grep -c '^{"dropped"' || true)
    mode=$(stat -c %a "$tmp/events.jsonl")
    files=$(ls "$tmp"/events.jsonl* | wc -l)
    rps=$(echo "$out" | json decisions_per_s)
    echo "RESULT events_log bytes_per_s $((bytes / duration)) lines $lines summaries $summaries" \
         "files $files mode $mode decisions_per_s ${rps:-?}"
    bench_cleanup
done | tee "$tmp/results"
echo "median bytes/s: $(awk '/^RESULT/ {print $4}' "$tmp/results" | median)"
echo "median lines:   $(awk '/^RESULT/ {print $6}' "$tmp/results" | median)"
