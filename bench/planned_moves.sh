#!/usr/bin/env bash
# Planned moves (docs/BENCHMARKS.md, "Planned moves"): the latency of requests for shards that
# do not move while the other nodes are stopped cleanly (SIGTERM: they hand their shards off)
# and restarted in turn, against the same run with nothing restarted. Not a test: nothing is
# asserted (a latency on a shared machine is a figure, not a verdict).
# One ZooKeeper (scripts/zk.sh) and per round a fresh cluster of three nodes a, b, c (256
# shards, session 2 s) and one router (deadline 200 ms); two loads through the router:
#   other  bench/planned_moves_driver.py: RATE_OTHER CHECKs/s (default 500), one at a time, of
#          users of [service other] whose shard node a owns: rendezvous keeps them on a while b
#          and c leave and come back, so these requests never meet a moving shard
#   all    rl-bench --rate RATE_ALL (default 4000) over 10,000 users of [service bench]
#          (fixed_window 100 per 1s): every shard, moving ones included
# for SECONDS (default 14); in the rolling round b is stopped (SIGTERM, waited for) at 3 s
# and started again, then c at 8 s. RUNS rounds of each (default 3); every round's figures
# printed, and the router's move counters.
#   bench/planned_moves.sh
source "$(dirname "$0")/lib.sh"
runs=${RUNS:-3}
secs=${SECONDS_RUN:-14}
rate_other=${RATE_OTHER:-500}
rate_all=${RATE_ALL:-4000}
py=${PYTHON:-/usr/bin/python3}
[ -x "$py" ] || py=python3
[ -x "$bin/rl-node" ] && [ -x "$bin/rl-router" ] && [ -x "$bin/rl-bench" ] && [ -x "$bin/rl-cli" ] ||
    cmake --build "$bin" -j2 --target rl-node rl-router rl-bench rl-cli >/dev/null
scratch
zkport=$(low_port)
trap 'bench_cleanup; bash "$top/scripts/zk.sh" stop "$work/zk" || true; rm -rf "$work"' EXIT
bash "$top/scripts/zk.sh" start "$work/zk" "$zkport" >/dev/null
seq_no=0
declare -A nport npid

# start_node N: rl-node N on its port, in the background.
start_node() {
    "$bin/rl-node" --config "$conf" --name "$1" --listen "127.0.0.1:${nport[$1]}" \
        2>>"$work/node-$1.log" &
    npid[$1]=$!
    pids+=($!)
    wait_port "${nport[$1]}"
}

# stop_node N: SIGTERM, waited for (the clean stop hands every shard off first).
stop_node() {
    kill -TERM "${npid[$1]}"
    wait "${npid[$1]}" 2>/dev/null || echo "node $1 exited $?" >&2
}

cluster() {
    seq_no=$((seq_no + 1))
    conf=$work/c$seq_no.conf
    cat > "$conf" <<CONF
[cluster]
name = pm$seq_no
zookeeper = 127.0.0.1:$zkport
session_timeout = 2000ms
shards = 256
[router]
deadline = 200ms
[service other]
limit = token_bucket 1000000 per 1s
[service bench]
limit = fixed_window 100 per 1s
CONF
    for n in a b c; do
        nport[$n]=$(low_port)
        start_node $n
    done
    rport=$(low_port)
    "$bin/rl-router" --config "$conf" --listen "127.0.0.1:$rport" 2>>"$work/router.log" &
    pids+=($!)
    wait_port "$rport"
    for _ in $(seq 1 100); do
        [ "$("$bin/rl-cli" --target "127.0.0.1:$rport" stats | awk '$1 == "members" {print $2}')" = 3 ] && break
        sleep 0.1
    done
    # users of [service other] owned by node a
    : > "$work/users"
    for i in $(seq 0 199); do
        "$bin/rl-cli" hash other "user$i" --config "$conf" | grep -q "^owner: a " &&
            echo "user$i" >> "$work/users" || true
    done
}

round() { # round quiet|rolling
    cluster
    "$bin/rl-bench" --target "127.0.0.1:$rport" --service bench --keys 10000 --rate "$rate_all" \
        --connections 4 --duration "$secs" --json > "$work/all.json" 2>/dev/null &
    local lg=$!
    "$py" "$top/bench/planned_moves_driver.py" "$rport" "$secs" "$rate_other" "$work/users" \
        > "$work/other.json" &
    local dr=$!
    if [ "$1" = rolling ]; then
        sleep 3; stop_node b; start_node b
        sleep 3; stop_node c; start_node c
    fi
    wait "$dr" "$lg" || true
    local st
    st=$("$bin/rl-cli" --target "127.0.0.1:$rport" stats)
    echo "$1 other: $(cat "$work/other.json") users=$(wc -l < "$work/users")"
    echo "$1 all: p50_us=$(json p50_us < "$work/all.json") p99_us=$(json p99_us < "$work/all.json")" \
        "max_us=$(json max_us < "$work/all.json") fail_open=$(echo "$st" | awk '$1 == "fail_open" {print $2}')" \
        "moved=$(echo "$st" | awk '$1 == "moved" {print $2}')" \
        "held_for_move=$(echo "$st" | awk '$1 == "held_for_move" {print $2}')" \
        "move_redirected=$(echo "$st" | awk '$1 == "move_redirected" {print $2}')" \
        "move_expired=$(echo "$st" | awk '$1 == "move_expired" {print $2}')"
    bench_cleanup
}

machine
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "commit: $(tree_rev)"
echo "command: RUNS=$runs SECONDS_RUN=$secs RATE_OTHER=$rate_other RATE_ALL=$rate_all bench/planned_moves.sh"
for i in $(seq 1 "$runs"); do
    round quiet
    round rolling
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
