#!/usr/bin/env bash
# Planned moves: the export pass (docs/BENCHMARKS.md, "Planned moves: the export pass"). How
# long a node with many keys keeps the requests of the shards it keeps waiting while it ships
# the others. Not a test: nothing is asserted (a latency on a shared machine is a figure).
# One ZooKeeper (scripts/zk.sh) and per round a fresh cluster (4096 shards, session 2 s) of
# nodes a and b and a router; rl-bench creates KEYS users (default 3,000,000) of [service
# bulk] through the router (half on each node), then bench/move_stalls_driver.py PINGs node a
# every 1 ms, first for QUIET seconds (default 5) with nothing moving, then while node c
# joins and takes a third of a's and b's shards with their counters (until a ships nothing
# more). Prints each phase's PING latency (p50, p99, p99.9, max, PINGs of 5 ms or more),
# node a's keys, the shards it shipped and its STATS handoff_export_turns. RUNS rounds
# (default 3); BIN: the build directory to measure (this tree's build/ by default; an older
# revision's build measures "before").
#   RUNS=3 KEYS=3000000 bench/move_stalls.sh
source "$(dirname "$0")/lib.sh"
runs=${RUNS:-3}
keys=${KEYS:-3000000}
quiet=${QUIET:-5}
target=${BIN:-$bin}
py=${PYTHON:-/usr/bin/python3}
[ -x "$py" ] || py=python3
[ -x "$bin/rl-bench" ] && [ -x "$bin/rl-cli" ] ||
    cmake --build "$bin" -j2 --target rl-node rl-router rl-bench rl-cli >/dev/null
scratch
zkport=$(low_port)
trap 'bench_cleanup; bash "$top/scripts/zk.sh" stop "$work/zk" || true; rm -rf "$work"' EXIT
bash "$top/scripts/zk.sh" start "$work/zk" "$zkport" >/dev/null
seq_no=0
declare -A nport

start_node() {
    "$target/rl-node" --config "$conf" --name "$1" --listen "127.0.0.1:${nport[$1]}" \
        2>>"$work/node-$1.log" &
    pids+=($!)
    wait_port "${nport[$1]}"
}

stat_of() { # stat_of NODE KEY
    "$bin/rl-cli" --target "127.0.0.1:${nport[$1]}" stats | awk -v k="$2" '$1 == k {print $2}'
}

round() {
    seq_no=$((seq_no + 1))
    conf=$work/c$seq_no.conf
    cat > "$conf" <<CONF
[cluster]
name = ms$seq_no
zookeeper = 127.0.0.1:$zkport
session_timeout = 2000ms
shards = 4096
[router]
deadline = 200ms
[service bulk]
limit = fixed_window 100 per 1h
CONF
    for n in a b c; do nport[$n]=$(low_port); done
    start_node a
    start_node b
    rport=$(low_port)
    "$target/rl-router" --config "$conf" --listen "127.0.0.1:$rport" 2>>"$work/router.log" &
    pids+=($!)
    wait_port "$rport"
    for _ in $(seq 1 100); do
        [ "$("$bin/rl-cli" --target "127.0.0.1:$rport" stats | awk '$1 == "members" {print $2}')" = 2 ] && break
        sleep 0.1
    done
    "$bin/rl-bench" --target "127.0.0.1:$rport" --service bulk --keys "$keys" --sequential \
        --requests "$keys" --connections 4 >/dev/null 2>&1
    local akeys p
    akeys=$(stat_of a keys)
    # PINGs of node a until $work/stop exists, first with nothing moving, then while c joins
    rm -f "$work/stop"
    "$py" "$top/bench/move_stalls_driver.py" "${nport[a]}" "$work/stop" > "$work/quiet.json" &
    p=$!
    sleep "$quiet"
    touch "$work/stop"; wait "$p"
    rm -f "$work/stop"
    "$py" "$top/bench/move_stalls_driver.py" "${nport[a]}" "$work/stop" > "$work/move.json" &
    p=$!
    start_node c
    sleep 1
    for _ in $(seq 1 600); do
        [ "$(stat_of a shards_outgoing)" = 0 ] && [ "$(stat_of b shards_outgoing)" = 0 ] &&
            [ "$(stat_of c shards_incoming)" = 0 ] && break
        sleep 0.1
    done
    touch "$work/stop"; wait "$p"
    echo "round $seq_no quiet: $(cat "$work/quiet.json")"
    echo "round $seq_no move:  $(cat "$work/move.json") keys_a=$akeys" \
        "shipped_a=$(stat_of a handoffs_out_done) failed_a=$(stat_of a handoffs_out_failed)" \
        "export_turns_a=$(stat_of a handoff_export_turns)"
    bench_cleanup
}

machine
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "commit: $(tree_rev); binaries: $target"
echo "command: RUNS=$runs KEYS=$keys QUIET=$quiet BIN=$target bench/move_stalls.sh"
for i in $(seq 1 "$runs"); do
    round
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
