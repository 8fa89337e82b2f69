#!/usr/bin/env bash
# What a node's loss costs, measured (docs/BENCHMARKS.md, "What a loss costs, measured"): the
# two figures of issue 33, tried as an operator would, on one machine. Not a test: nothing is
# asserted here (tests/integration/check_loss.c counts the kill case as one; the fast-batch
# share is a latency figure a busy machine moves).
# One ZooKeeper (scripts/zk.sh), and per round a fresh cluster (session 2 s, 64 shards) of three
# nodes a, b, c and two routers (deadline 50 ms), then bench/loss_driver.py as the client:
#   kill   300 users of `token_bucket 20 per 1d` brought to their limit, one client asking for
#          all of them as fast as it can through both routers, `kill -9` of node b and 6 s
#          more: the answers that were not LIMITED, in all and for the worst user
#   stop   the same client asking for users of every node in batches of 50 (pipelined,
#          the Python client's check_many), node b stopped (SIGSTOP) for 3 s: the share of
#          batches answered in under 10 ms while it is stopped (and in the second before)
# RUNS rounds of each (default 5), medians (and the range) printed.
#   bench/loss.sh                              this tree's build/ (built if missing)
#   BIN=/tmp/base333/build bench/loss.sh       this tree's build/, then another build's
#                                              rl-node and rl-router, the same client
source "$(dirname "$0")/lib.sh"
runs=${RUNS:-5}
py=${PYTHON:-/usr/bin/python3}
[ -x "$py" ] || py=python3
[ -x "$bin/rl-node" ] && [ -x "$bin/rl-router" ] ||
    cmake --build "$bin" -j2 --target rl-node rl-router >/dev/null
builds=("$bin")
[ -n "${BIN:-}" ] && builds+=("$BIN")
for b in "${builds[@]}"; do
    [ -x "$b/rl-node" ] && [ -x "$b/rl-router" ] || { echo "missing $b/rl-node or rl-router" >&2; exit 1; }
done
scratch
zkport=$(low_port)
trap 'bench_cleanup; bash "$top/scripts/zk.sh" stop "$work/zk" || true; rm -rf "$work"' EXIT
bash "$top/scripts/zk.sh" start "$work/zk" "$zkport" >/dev/null
seq_no=0

# cluster BUILD: a fresh cluster (its own name in ZooKeeper) from BUILD; sets $rp0 $rp1 $pid_b.
cluster() {
    local b=$1 n p
    seq_no=$((seq_no + 1))
    cat > "$work/c$seq_no.conf" <<CONF
[cluster]
name = loss$seq_no
zookeeper = 127.0.0.1:$zkport
session_timeout = 2000ms
shards = 64
[router]
deadline = 50ms
[clients]
adjust = no
[service day]
limit = token_bucket 20 per 1d
[service wide]
limit = token_bucket 1000000 per 1s
CONF
    for n in a b c; do
        p=$(low_port)
        "$b/rl-node" --config "$work/c$seq_no.conf" --name $n --listen 127.0.0.1:$p \
            2>>"$work/node-$n.log" &
        pids+=($!)
        [ $n = b ] && pid_b=$!
        wait_port "$p"
    done
    rp0=$(low_port)
    "$b/rl-router" --config "$work/c$seq_no.conf" --listen 127.0.0.1:$rp0 2>>"$work/router.log" &
    pids+=($!)
    rp1=$(low_port)
    while [ "$rp1" = "$rp0" ]; do rp1=$(low_port); done
    "$b/rl-router" --config "$work/c$seq_no.conf" --listen 127.0.0.1:$rp1 2>>"$work/router.log" &
    pids+=($!)
    wait_port "$rp0"
    wait_port "$rp1"
}

machine
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "command: RUNS=$runs${BIN:+ BIN=$BIN} bench/loss.sh"
for b in "${builds[@]}"; do
    : > "$work/out.json"
    for i in $(seq 1 "$runs"); do
        for c in kill stop; do
            cluster "$b"
            "$py" "$top/bench/loss_driver.py" $c "$rp0" "$rp1" "$pid_b" >>"$work/out.json" ||
                echo "round $i ($c) failed" >&2
            bench_cleanup
        done
    done
    echo "build: $b ($(git -C "$b/.." rev-parse --short HEAD 2>/dev/null || echo '?'))," \
        "load average now: $(cut -d' ' -f1-3 /proc/loadavg)"
    "$py" - "$work/out.json" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
k = [r for r in rows if r["case"] == "kill"]
s = [r for r in rows if r["case"] == "stop"]
def fig(xs, f="{:,.0f}"):
    if not xs:
        return "-"
    return f"{f.format(statistics.median(xs))} ({f.format(min(xs))}–{f.format(max(xs))})"
print(f"kill -9 under abuse, {len(k)} rounds: not LIMITED in 6 s "
      f"{fig([r['not_limited'] for r in k])}, worst user {fig([r['worst_user'] for r in k])}, "
      f"answers {fig([r['answers'] for r in k])}")
for r in k:
    print("  ", json.dumps(r))
print(f"SIGSTOP 3 s, {len(s)} rounds: batches under 10 ms while stopped "
      f"{fig([100 * r['fast_stopped'] for r in s], '{:.1f}%')}, in the second before "
      f"{fig([100 * r['fast_before'] for r in s], '{:.1f}%')}, batches while stopped "
      f"{fig([r['batches_stopped'] for r in s])}")
for r in s:
    print("  ", json.dumps(r))
PY
done
