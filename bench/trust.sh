#!/usr/bin/env bash
# What the trust checks cost a node (docs/BENCHMARKS.md, "Ownership check and AUTH"): one
# rl-node in a ZooKeeper cluster, token_bucket over 1M keys, pipelined, decisions/s, for
#   base    a baseline revision (default 657668b, before nodes checked ownership),
#   owner   this checkout: every CHECK's shard checked against the node's table,
#   secret  this checkout with [cluster] secret_file: the same, plus AUTH on connect and
#           the ZooKeeper digest ACLs.
# Rounds alternate base, owner, secret so all see the same machine conditions.
#   bench/trust.sh [REV]          (RUNS=3 rounds by default)
# The node is pinned to core 0 and rl-bench to core 1; ZooKeeper is Debian's, started here.
source "$(dirname "$0")/lib.sh"
rev=${1:-657668b}
runs=${RUNS:-3}
bash "$top/scripts/build.sh" release >/dev/null
work=$(mktemp -d)
base=$work/base
git -C "$top" worktree add --detach "$base" "$rev" >/dev/null
cleanup() {
    bench_cleanup
    bash "$top/scripts/zk.sh" stop "$work/zk" >/dev/null 2>&1 || true
    git -C "$top" worktree remove --force "$base" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
(cd "$base" && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null &&
    cmake --build build -j"$(nproc)" --target rl-node >/dev/null)
machine
zport=$(free_port)
bash "$top/scripts/zk.sh" start "$work/zk" "$zport"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/secret"
chmod 600 "$work/secret"

port=$(free_port)
conf() { # NAME EXTRA
    cat > "$work/$1.conf" <<CONF
[cluster]
name = trust-$1
zookeeper = 127.0.0.1:$zport
$2
[node n]
listen = 127.0.0.1:$port
memory = 4g
[service bench]
limit = token_bucket 100 per 1m
CONF
}
conf base ""
conf owner ""
conf secret "secret_file = $work/secret"

declare -A results
for round in $(seq 1 "$runs"); do
    for side in base owner secret; do
        nodebin=$bin/rl-node; tok=()
        [ "$side" = base ] && nodebin=$base/build/rl-node
        [ "$side" = secret ] && tok=(--token-file "$work/secret")
        taskset -c 0 "$nodebin" --config "$work/$side.conf" --name n 2>>"$work/node-$side.log" &
        node=$!; pids=($node)
        wait_port "$port"
        # Registered, and (this checkout) owning every shard: a CHECK is ALLOWED.
        for _ in $(seq 1 100); do
            "$bin/rl-cli" --target 127.0.0.1:$port "${tok[@]}" check bench warm >/dev/null 2>&1 && break
            sleep 0.1
        done
        taskset -c 1 "$bin/rl-bench" --target 127.0.0.1:$port "${tok[@]}" --service bench \
            --keys 1000000 --sequential --requests 1000000 --connections 4 --pipeline 256 \
            --json > /dev/null
        out=$(taskset -c 1 "$bin/rl-bench" --target 127.0.0.1:$port "${tok[@]}" --service bench \
            --keys 1000000 --connections 4 --pipeline 256 --duration 5 --json | tail -1)
        t=$(echo "$out" | json decisions_per_s)
        errs=$(echo "$out" | json errors)
        echo "$side round $round: $t decisions/s (errors ${errs:-0}, p50 $(echo "$out" | json p50_us) us)"
        results[$side]+="$t "
        kill "$node"; wait "$node" 2>/dev/null || true; pids=()
    done
done
b=$(printf '%s\n' ${results[base]} | median)
for side in base owner secret; do
    m=$(printf '%s\n' ${results[$side]} | median)
    echo "RESULT $side: median $m decisions/s over $runs rounds ($(awk -v a=$m -v b=$b 'BEGIN {printf "%.3f", a/b}') of base $rev)"
done
