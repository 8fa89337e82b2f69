#!/usr/bin/env bash
# Planned moves (docs/OPERATIONS.md, "Planned moves"; figures in docs/BENCHMARKS.md): the clean
# stop of a node holding KEYS live keys. One ZooKeeper (scripts/zk.sh), 4096 shards, two nodes
# and a router; rl-bench puts 2 x KEYS keys through the router (one CHECK each, users in order:
# each node ends up with about KEYS of them, fixed_window 100 per 1h so none is swept); then
# SIGTERM to node a, which hands every shard to b. Reports, per run:
#   stop       SIGTERM to exit (wall clock, the node's whole clean stop: drain, deregister)
#   drain      its log's "clean stop: leaving" to "every shard handed off"
#   keys/s     keys handed off / drain
#   freeze     per shard, export to the new owner's acknowledgement of its last message
#              (p50, p99, max over the shards; from its debug log)
# and checks that b holds every key afterwards and that a exited 0.
#   bench/handoff.sh             (RUNS=3 KEYS=1000000 by default)
# Environment: RUNS, KEYS, RL_BIN_DIR (use the binaries there instead of build/).
source "$(dirname "$0")/lib.sh"
runs=${RUNS:-3}
keys=${KEYS:-1000000}
if [ -n "${RL_BIN_DIR:-}" ]; then
    bin=$RL_BIN_DIR
else
    cmake --build "$bin" -j2 --target rl-node rl-router rl-bench rl-cli >/dev/null
fi
work=$(mktemp -d)
zkport=$(low_port)
trap 'bench_cleanup; bash "$top/scripts/zk.sh" stop "$work/zk" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
bash "$top/scripts/zk.sh" start "$work/zk" "$zkport" >/dev/null
machine
echo "nproc: $(nproc); load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "command: RUNS=$runs KEYS=$keys bench/handoff.sh"

stat_of() { # PORT KEY
    "$bin/rl-cli" --target "127.0.0.1:$1" stats 2>/dev/null | awk -v k="$2" '$1 == k || $1 == k":" {print $NF}' | head -1
}
ms_of() { # "HH:MM:SS.mmm" -> ms of the day
    awk -F'[:.]' '{printf "%d", (($1 * 60 + $2) * 60 + $3) * 1000 + $4}' <<<"$1"
}

for run in $(seq 1 "$runs"); do
    name=ho$run
    pa=$(low_port); pb=$(low_port); pr=$(low_port)
    cat > "$work/$name.conf" <<CONF
[cluster]
name = $name
zookeeper = 127.0.0.1:$zkport
session_timeout = 4s
shards = 4096
[node a]
listen = 127.0.0.1:$pa
memory = 2gb
drain_timeout = 60s
[node b]
listen = 127.0.0.1:$pb
memory = 2gb
[router]
deadline = 1s
[service bench]
limit = fixed_window 100 per 1h
CONF
    "$bin/rl-node" --config "$work/$name.conf" --name a --listen 127.0.0.1:$pa --log-level debug \
        2>"$work/$name-a.log" &
    pid_a=$!
    pids+=($pid_a)
    "$bin/rl-node" --config "$work/$name.conf" --name b --listen 127.0.0.1:$pb \
        2>"$work/$name-b.log" &
    pids+=($!)
    wait_port "$pa"
    wait_port "$pb"
    "$bin/rl-router" --config "$work/$name.conf" --listen 127.0.0.1:$pr 2>"$work/$name-r.log" &
    pids+=($!)
    wait_port "$pr"
    sleep 2
    "$bin/rl-bench" --target "127.0.0.1:$pr" --sequential --keys $((2 * keys)) \
        --requests $((2 * keys)) --connections 4 --pipeline 256 >"$work/$name-bench.txt"
    ka=$(stat_of "$pa" keys); kb=$(stat_of "$pb" keys)
    t0=$(date +%s%N)
    kill -TERM "$pid_a"
    status=0
    wait "$pid_a" || status=$?
    t1=$(date +%s%N)
    kb2=$(stat_of "$pb" keys)
    stop_ms=$(( (t1 - t0) / 1000000 ))
    leave=$(grep -m1 "clean stop: leaving" "$work/$name-a.log" | cut -d' ' -f1)
    done_l=$(grep -m1 "every shard handed off\|drain_timeout reached" "$work/$name-a.log")
    drain_ms=$(( $(ms_of "$(cut -d' ' -f1 <<<"$done_l")") - $(ms_of "$leave") ))
    moved=$(grep -o "[0-9]* keys, [0-9]* bytes)" <<<"$done_l" | cut -d' ' -f1)
    bytes=$(grep -o "[0-9]* bytes)" <<<"$done_l" | cut -d' ' -f1)
    freeze=$(sed -n '/clean stop: leaving/,$p' "$work/$name-a.log" | grep -o "frozen [0-9.]* ms" | awk '{print $2}' | sort -g |
        awk '{a[NR] = $1} END {if (NR == 0) {print "-"; exit}
             p50 = a[int((NR + 1) * 0.5)]; i = int(NR * 0.99 + 0.5); if (i < 1) i = 1;
             printf "p50 %.1f ms, p99 %.1f ms, max %.1f ms over %d shards", p50, a[i], a[NR], NR}')
    rate=$(awk -v k="${moved:-0}" -v ms="$drain_ms" 'BEGIN {printf "%.0f", (ms > 0 ? k * 1000 / ms : 0)}')
    failed=$(grep -c "not handed\|given up\|drain_timeout reached" "$work/$name-a.log" || true)
    echo "RESULT run $run: node a held $ka keys (b $kb); SIGTERM to exit ${stop_ms} ms (exit $status);" \
        "drain ${drain_ms} ms; ${moved:-?} keys ($bytes bytes) handed off = $rate keys/s;" \
        "freeze $freeze; b holds $kb2 keys after; failure lines in a's log: $failed"
    bench_cleanup
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
