#!/usr/bin/env bash
# Hot keys shed at the router (docs/BENCHMARKS.md, "Hot keys and the deny cache"). Two nodes
# (static membership) and three routers over them in the same run: `deny_cache = on`,
# `deny_cache = off`, and both `deny_cache` and `hot_keys` off; measured alternately.
#   (a) one user sends half of all traffic, far over its limit (token_bucket 10 per 1s),
#       the other half spread over a million users well under theirs; both halves open loop
#       at RATE/2 each. Counted: the CHECKs the nodes answered (their STATS `checks`, before
#       and after), so the share of the hot user's requests that reached a node.
#   (b) the cluster's decisions/s, closed loop through the router, with users drawn uniform
#       and Zipf(1.1) over a million users (limit token_bucket 100 per 1s burst 100).
#   (c) the cost on requests neither answers: uniform traffic, no key over its limit,
#       through a router with both on (the defaults) and one with both off.
#   bench/hotkey.sh   (RUNS=5 by default; RATE=40000; SECS=4)
source "$(dirname "$0")/lib.sh"
bash "$top/scripts/build.sh" release >/dev/null
work=$(mktemp -d)
pa=$(free_port); pb=$(free_port); ron=$(free_port); roff=$(free_port); rnone=$(free_port)
rate=${RATE:-40000}
secs=${SECS:-4}
machine
echo "load: $(uptime)"

conf() { # ROUTER_PORT on|off [on|off: hot_keys]
    cat <<CONF
[cluster]
name = hot
shards = 4096
[router]
listen = 127.0.0.1:$1
deadline = 500ms
deny_cache = $2
hot_keys = ${3:-on}
[clients]
adjust = no
[node a]
listen = 127.0.0.1:$pa
memory = 1g
[node b]
listen = 127.0.0.1:$pb
memory = 1g
[service whale]
limit = token_bucket 10 per 1s
[service bench]
limit = token_bucket 1000 per 1s
[service zb]
limit = token_bucket 100 per 1s
CONF
}
conf "$ron" on > "$work/on.conf"
conf "$roff" off > "$work/off.conf"
conf "$rnone" off off > "$work/none.conf"
"$bin/rl-node" --config "$work/on.conf" --name a 2>>"$work/node-a.log" & pids+=($!)
"$bin/rl-node" --config "$work/on.conf" --name b 2>>"$work/node-b.log" & pids+=($!)
"$bin/rl-router" --config "$work/on.conf" 2>>"$work/router-on.log" & pids+=($!)
"$bin/rl-router" --config "$work/off.conf" 2>>"$work/router-off.log" & pids+=($!)
"$bin/rl-router" --config "$work/none.conf" 2>>"$work/router-none.log" & pids+=($!)
for p in $pa $pb $ron $roff $rnone; do wait_port "$p"; done
sleep 0.3

node_checks() {
    local s=0 v
    for p in $pa $pb; do
        v=$("$bin/rl-cli" --target 127.0.0.1:$p stats | awk '$1 == "checks" {print $2}')
        s=$((s + v))
    done
    echo $s
}
bench() { # PORT ARGS...
    local p=$1
    shift
    "$bin/rl-bench" --target 127.0.0.1:$p --connections 4 --pipeline 64 "$@" --json | tail -1
}

# (a) half the traffic from one user far over its limit.
half=$((rate / 2))
declare -A share sent
for i in $(seq 1 "$runs"); do
    for mode in on off; do
        port=$ron; [ $mode = off ] && port=$roff
        before=$(node_checks)
        bench "$port" --service whale --keys 1 --rate $half --duration "$secs" > "$work/w.json" &
        bpid=$!
        bench "$port" --service bench --keys 1000000 --rate $half --duration "$secs" > "$work/b.json"
        wait $bpid
        after=$(node_checks)
        w=$(json decisions < "$work/w.json"); b=$(json decisions < "$work/b.json")
        wl=$(json limited < "$work/w.json")
        hot=$((after - before - b))
        s=$(awk -v h=$hot -v w=$w 'BEGIN {printf "%.4f", h / w}')
        share[$mode]+="$s "
        echo "run $i cache $mode: whale sent $w (limited $wl), others $b; nodes answered $((after - before)): whale's share reaching a node $s"
    done
done
for mode in on off; do
    echo "RESULT (a) cache $mode: median share of the hot user's requests answered by a node $(printf '%s\n' ${share[$mode]} | median)"
done

# (b) decisions/s, uniform vs Zipf(1.1), cache on vs off.
declare -A dps
for i in $(seq 1 "$runs"); do
    for mode in on off; do
        port=$ron; [ $mode = off ] && port=$roff
        for dist in uniform zipf; do
            o=$(bench "$port" --service zb --keys 1000000 --dist $dist --zipf-s 1.1 --duration "$secs")
            d=$(echo "$o" | json decisions_per_s)
            dps[$mode-$dist]+="$d "
            echo "run $i cache $mode $dist: $d decisions/s (limited $(echo "$o" | json limited))"
        done
    done
done
# (c) what the two cost a request they do not answer: uniform traffic (no key over its
#     limit) through the default router (both on) and through one with both off.
declare -A unif
for i in $(seq 1 "$runs"); do
    for mode in on none; do
        port=$ron; [ $mode = none ] && port=$rnone
        d=$(bench "$port" --service bench --keys 1000000 --duration "$secs" | json decisions_per_s)
        unif[$mode]+="$d "
        echo "run $i uniform, router $mode: $d decisions/s"
    done
done
for mode in on off; do
    u=$(printf '%s\n' ${dps[$mode-uniform]} | median); z=$(printf '%s\n' ${dps[$mode-zipf]} | median)
    echo "RESULT (b) cache $mode: uniform $u/s, zipf(1.1) $z/s, zipf/uniform $(awk -v a=$z -v b=$u 'BEGIN {printf "%.2f", a/b}')"
done
a=$(printf '%s\n' ${unif[on]} | median); b=$(printf '%s\n' ${unif[none]} | median)
echo "RESULT (c) uniform, no key limited: deny_cache+hot_keys on $a/s, both off $b/s, ratio $(awk -v a=$a -v b=$b 'BEGIN {printf "%.3f", a/b}')"
echo "router (on) STATS: $("$bin/rl-cli" --target 127.0.0.1:$ron stats | grep -E '^deny_' | tr '\n' ' ')"
echo "load: $(uptime)"
bench_cleanup
