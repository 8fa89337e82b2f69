#!/usr/bin/env bash
# Instructions per decision of the router and of the node, counted by valgrind's callgrind
# (user space only: the kernel's part, about half of the router's CPU on loopback, is not
# in them; docs/BENCHMARKS.md, "Instructions per decision"). Unlike CPU time they do not
# move with the machine's other tenants, so a change of a few per cent can be seen in one
# run. The loads of bench/router_cpu.sh:
#   binary  rl-bench through the router, 8 connections x 64 pipelined, 100,000 keys of a
#           token_bucket rule (made first): router and node instructions per decision,
#           router / node;
#   resp    redis-benchmark CL.THROTTLE (inline gcra, random keys), 4 x 64, against rl-bench's
#           binary CHECKs of the same limit as a rule with the same load: router + node;
#   grpc    h2load ShouldRateLimit (one descriptor, envoy_config), 8 x 64, against binary
#           CHECKs of one key, 8 x 64: router + node.
# Both processes run under callgrind (about 50 times slower); each load runs once unmeasured
# (connections, keys, HPACK tables), then the counters are zeroed (callgrind_control -z), the
# measured part runs (REQUESTS decisions, default 40000), and the counters are dumped.
# Prints, for each, the instructions per decision and the router's split by object
# (libnghttp2, libprotobuf-c, libc, rl-router...). Work done by the clock, not per request,
# is taken out and shown apart: under valgrind a second holds 50 times fewer requests, so the
# node's sweep (a slice per tick) and the router's hot-key counting (every request of the
# first 65,536 in 10 s, then 1 in 16) would count 50 times their share.
#   bench/router_instr.sh [BIN]        BIN: a build directory (default build/, rebuilt)
#   ONLY="binary grpc" bench/router_instr.sh      TOP=20: each process's 20 costliest functions
source "$(dirname "$0")/lib.sh"
bin=$(cd "${1:-$bin}" && pwd)
only=${ONLY:-binary resp grpc}
nreq=${REQUESTS:-40000}
[ "$bin" != "$top/build" ] || build_release
for c in valgrind callgrind_control callgrind_annotate redis-benchmark h2load; do
    command -v $c >/dev/null || { echo "router_instr.sh: $c is missing (valgrind, redis-tools, nghttp2-client)" >&2; exit 2; }
done
scratch
machine
echo "commit: $(tree_rev) ($bin); valgrind $(valgrind --version | sed 's/valgrind-//')"
rls_fixture
conf() { # conf LIMIT: node n, the router with the RESP and gRPC fronts; deadlines for valgrind
    cat <<CONF
[cluster]
envoy_config = edge.yaml
[router]
listen = 127.0.0.1:$rport
resp = 127.0.0.1:$sport
rls = 127.0.0.1:$gport
deadline = 30s
workers = 1
[clients]
adjust = no
[node n]
listen = 127.0.0.1:$nport
memory = 1g
[service bench]
limit = $1
CONF
}
start() { # start LIMIT: node and router under callgrind, on fresh ports (three tries: another
    # process may take a port between its choice and the bind)
    local try p up
    for try in 1 2 3; do
        nport=$(free_port); rport=$(free_port); sport=$(free_port); gport=$(free_port)
        conf "$1" > "$work/x.conf"
        (cd "$work" && exec valgrind -q --tool=callgrind --callgrind-out-file="$work/node.%p" \
            "$bin/rl-node" --config x.conf --name n >/dev/null 2>>"$work/node.log") &
        node=$!; pids+=($node)
        (cd "$work" && exec valgrind -q --tool=callgrind --callgrind-out-file="$work/router.%p" \
            "$bin/rl-router" --config x.conf >/dev/null 2>>"$work/router.log") &
        router=$!; pids+=($router)
        up=1
        for p in $nport $rport $sport $gport; do
            for _ in $(seq 1 600); do
                (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && break
                kill -0 $node 2>/dev/null && kill -0 $router 2>/dev/null || break
                sleep 0.1
            done
            (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || up=0
        done
        if [ $up = 1 ]; then
            sleep 1
            return 0
        fi
        bench_cleanup
    done
    echo "router_instr.sh: the node or the router did not start (logs:)" >&2
    tail -3 "$work/node.log" "$work/router.log" >&2
    exit 1
}
# count N CMD...: runs CMD unmeasured, then again with the counters zeroed before and dumped
# after; prints "router_instructions node_instructions" per decision (N decisions).
count() {
    local n=$1 r n_
    shift
    "$@" > "$work/out" 2>&1
    callgrind_control -z $router >/dev/null 2>&1; callgrind_control -z $node >/dev/null 2>&1
    "$@" > "$work/out" 2>&1
    rm -f "$work"/router.$router.* "$work"/node.$node.*
    callgrind_control -d $router >/dev/null 2>&1; callgrind_control -d $node >/dev/null 2>&1
    r=$(total "$work"/router.$router.*); n_=$(total "$work"/node.$node.*)
    # The node's sweep runs by the clock, a slice per tick: under valgrind, 50 times slower,
    # it does 50 times its share per decision. Not counted (its own line says how much).
    sweep=$(inclusive "$work"/node.$node.* rl_keytab_sweep)
    n_=$((n_ - sweep))
    echo "$((sweep / n))" > "$work/sweep"
    # Likewise the router's hot keys: each request of the first 65,536 of a 10 s period is
    # counted, then 1 in 16 (router/hotkeys.h); at valgrind's pace every one is.
    hot=$(inclusive "$work"/router.$router.* rl_hot_add)
    r=$((r - hot))
    echo "$((hot / n))" > "$work/hot"
    objects "$work"/router.$router.* > "$work/objects"
    if [ "${TOP:-0}" -gt 0 ]; then # TOP=N: each one's N costliest functions, to stderr
        for f in "$work"/router.$router.* "$work"/node.$node.*; do
            echo "$(basename "$f"): the $TOP costliest functions, instructions per decision" >&2
            top_functions "$f" "$n" >&2 || true
        done
    fi
    echo "$((r / n)) $((n_ / n))"
}
top_functions() { # FILE N: the TOP costliest functions of FILE, per decision of N
    callgrind_annotate --inclusive=no --threshold=100 "$1" 2>/dev/null |
        grep -v -E ':(clone|start_thread|worker_main|main|uv_run|__libc_start_call_main|__libc_start_main@@GLIBC_2.34|rl_daemon_run) \[|below main|ld-linux' |
        awk -v n="$2" -v top="$TOP" '/^ *[0-9,]+ .*\[\/[^]]*\]$/ {c = $1; gsub(",", "", c); f = $(NF - 1);
             sub(/.*:/, "", f); o = $NF; sub(/.*\//, "", o); sub(/\]$/, "", o);
             if (++k <= top) printf "  %8.0f %s (%s)\n", c / n, f, o}'
}
inclusive() { # FILE FUNCTION: the instructions of FUNCTION and what it called (0: none)
    callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null |
        awk -v f=":$2 [" '!found && index($0, f) && $0 !~ /=>/ {c = $1; gsub(",", "", c); found = 1}
                          END {print found ? c : 0}'
}
total() { grep -h '^totals:\|^summary:' "$1" | head -1 | awk '{print $2}'; }
objects() { # the router's instructions by object, per cent (after a zeroing, the frames that
    # were on the stack show what ran under them as their own: not counted)
    callgrind_annotate --inclusive=no --threshold=100 "$1" 2>/dev/null |
        grep -v -E ':(clone|start_thread|worker_main|main|uv_run|__libc_start_call_main) \[' |
        awk '/^ *[0-9,]+ .*\[\/[^]]*\]$/ {n = $1; gsub(",", "", n); o = $NF; sub(/.*\//, "", o);
             sub(/\]$/, "", o); sub(/\.so.*/, "", o); s[o] += n; t += n}
             END {for (o in s) if (s[o] / t >= 0.01) printf "%s %.0f%%\n", o, 100 * s[o] / t}' |
        sort -k2 -rn | tr '\n' ',' | sed 's/,$//; s/,/, /g'
}
bench() { # bench KEYS CONNS: rl-bench's CHECKs through the router, N decisions
    echo taskset -c 1 "$bin/rl-bench" --target 127.0.0.1:$rport --service bench --keys "$1" \
        --connections "$2" --pipeline 64 --requests "$nreq" --json
}
for part in $only; do
    case $part in
    binary)
        start "token_bucket 100 per 1h" # no key is full again (and forgotten) while counted
        # every key made first (straight to the node): the counts are of lookups, not inserts
        taskset -c 1 "$bin/rl-bench" --target 127.0.0.1:$nport --service bench --keys 100000 \
            --sequential --requests 100000 --connections 4 --pipeline 256 --json >/dev/null
        read -r rb nb < <(count "$nreq" $(bench 100000 8))
        echo "binary 8x64: router $rb, node $nb instructions per decision, router/node $(awk -v a=$rb -v b=$nb 'BEGIN {printf "%.2f", a/b}') (besides, by the clock: the node's sweep $(cat "$work/sweep"), the router's hot keys $(cat "$work/hot"))"
        echo "  router by object: $(cat "$work/objects")"
        ;;
    resp)
        start "gcra 1000 per 1s burst 1000001"
        read -r rr nr < <(count "$nreq" taskset -c 1 redis-benchmark -p $sport -c 4 -P 64 -n "$nreq" \
            -r 100000 -q CL.THROTTLE 'k:__rand_int__' 1000000 1000 1)
        o=$(cat "$work/objects")
        read -r rb nb < <(count "$nreq" $(bench 100000 4))
        echo "resp CL.THROTTLE 4x64: router $rr, node $nr; binary CHECK: router $rb, node $nb; resp/binary (router + node) $(awk -v a=$((rr + nr)) -v b=$((rb + nb)) 'BEGIN {printf "%.2f", a/b}')"
        echo "  router by object (CL.THROTTLE): $o"
        ;;
    grpc)
        start "fixed_window 4000000000 per 1h"
        read -r rg ng < <(count "$nreq" taskset -c 1 h2load -c 8 -m 64 -t 1 -n "$nreq" -d "$work/req.bin" \
            -H 'content-type: application/grpc' -H 'te: trailers' \
            "http://127.0.0.1:$gport/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
        grep -q "$nreq succeeded" "$work/out" || { echo "router_instr.sh: h2load: not every call succeeded" >&2; cat "$work/out" >&2; exit 1; }
        o=$(cat "$work/objects")
        read -r rb nb < <(count "$nreq" $(bench 1 8))
        echo "grpc ShouldRateLimit 8x64: router $rg, node $ng; binary CHECK of one key: router $rb, node $nb; grpc/binary (router + node) $(awk -v a=$((rg + ng)) -v b=$((rb + nb)) 'BEGIN {printf "%.2f", a/b}')"
        echo "  router by object (ShouldRateLimit): $o"
        ;;
    esac
    bench_cleanup
done
