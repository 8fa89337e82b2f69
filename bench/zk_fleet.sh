#!/usr/bin/env bash
# What a fleet of routers costs one ZooKeeper, and how fast it converges (docs/SCALING.md).
# One ZooKeeper server, three rl-node processes, and N router-like watchers (build/zkfleet:
# N ZooKeeper sessions in one process, each doing what rl-router's ZooKeeper side does
# through the same code: announce under routers/, watch nodes/, the assignment and the
# rules, rebuild the shard table and its digest on every change). For each N it stops node
# b cleanly KILLS times (its znode goes at once) and starts it again, and kills it with
# SIGKILL once (its znode goes when its session expires), and prints:
#   converge  ms from the stop to the moment the last watcher built the new table (median)
#   first     ms from the stop to the first watcher having read the change back
#   fan-out   ms from the first watcher having read the change back to the last (median)
#   build_us  the mean table build (4096 shards) of a watcher; all N share this machine's
#             cores, so converge - fan-out is mostly N builds queued on one thread
#   kill -9   ms from SIGKILL to every watcher agreeing (session timeout + fan-out)
#   reqs/chg  requests ZooKeeper received per membership change (mntr zk_packets_received
#             over the change, less the sessions' pings measured idle just before), in all
#             and per watcher
#   zk cpu    ms of ZooKeeper's CPU per change; its RSS; the watches and connections it holds
#
#   bench/zk_fleet.sh                    SIZES="100 300 1000" KILLS=3
#   SIZES="1000" MEMBERS=97 bench/zk_fleet.sh     100 members: 3 nodes and 97 that only register
#   ROUTERS=1 SIZES="50" bench/zk_fleet.sh        real rl-router processes (--workers 1)
#                                                  instead of zkfleet, to check that the
#                                                  watchers cost ZooKeeper what routers do;
#                                                  convergence from their logs' "shard table
#                                                  rebuilt" lines (ms resolution); each takes
#                                                  about 80 MB resident, so keep N small
#
# Needs build/zkfleet and build/rl-node (scripts/build.sh release). Stops everything it
# started however it ends.
source "$(dirname "$0")/lib.sh"
SIZES=${SIZES:-100 300 1000}
KILLS=${KILLS:-3}
SESSION_MS=${SESSION_MS:-2000}
MEMBERS=${MEMBERS:-0} # members that serve nothing, on top of the 3 nodes (zkfleet --members)
ROUTERS=${ROUTERS:-0} # 1: real rl-router processes instead of zkfleet's watchers
[ "$ROUTERS" = 1 ] && MEMBERS=0
[ -x "$bin/zkfleet" ] && [ -x "$bin/rl-node" ] || bash "$top/scripts/build.sh" release > /dev/null
work=$(mktemp -d /tmp/rl-zkfleet-XXXXXX)
zkport=$(free_port)
zk_started=0
fleet_cleanup() {
    bench_cleanup
    [ "$zk_started" = 1 ] && bash "$top/scripts/zk.sh" stop "$work/zk"
    rm -rf "$work"
}
trap fleet_cleanup EXIT
trap 'exit 130' INT TERM

ZK_4LW=ruok,srvr,mntr ZK_MAX_CNXNS=0 bash "$top/scripts/zk.sh" start "$work/zk" "$zkport"
zk_started=1
zkpid=$(cat "$work/zk/zookeeper.pid")
cat > "$work/cluster.conf" <<CFG
[cluster]
name = fleet
zookeeper = 127.0.0.1:$zkport
session_timeout = ${SESSION_MS}ms
shards = 4096
CFG
declare -A nport npid
for n in a b c; do
    nport[$n]=$(free_port)
    printf '[node %s]\nlisten = 127.0.0.1:%s\nmemory = 64mb\n' "$n" "${nport[$n]}" >> "$work/cluster.conf"
done
# Routers get a 30 s session as zkfleet's watchers do: fewer pings to subtract per change.
sed "s/^session_timeout = .*/session_timeout = 30s/" "$work/cluster.conf" > "$work/router.conf"
start_node() {
    "$bin/rl-node" --config "$work/cluster.conf" --name "$1" >> "$work/node-$1.log" 2>&1 &
    npid[$1]=$!
    pids+=("$!")
    wait_port "${nport[$1]}" || { tail -20 "$work/node-$1.log" >&2; return 1; }
}
for n in a b c; do start_node "$n"; done

now_ms() { date +%s%3N; }
# mntr KEY: one of ZooKeeper's monitoring figures.
mntr() {
    exec 3<> "/dev/tcp/127.0.0.1/$zkport"
    printf mntr >&3
    awk -v k="zk_$1" '$1 == k {print $2}' <&3
    exec 3<&-
}
# ZooKeeper's CPU time in ms (utime + stime of the JVM).
zk_cpu_ms() { awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) * 1000 / hz}' "/proc/$zkpid/stat"; }
# wait_agree FILE FROM M: the first "agree" line after line FROM with M members; prints it.
wait_agree() {
    local t
    for t in $(seq 1 600); do
        line=$(tail -n +"$(($2 + 1))" "$1" | awk -v m="$3" '$1 == "agree" && $3 == m' | head -1)
        [ -n "$line" ] && { echo "$line"; return 0; }
        sleep 0.05
    done
    echo "zk_fleet: no agreement on $3 members within 30 s" >&2
    return 1
}

# Routers mode: prints zkfleet's "agree" lines from the routers' logs. Each router logs
# "HH:MM:SS.mmm router info: shard table rebuilt: M members, ..." on every change (UTC);
# when every router's latest line names the same M and that differs from the last agreed,
# it prints "agree - M FIRST LAST FIRST LAST 0" (the notification is the build there).
router_agree_loop() {
    local n=$1 last_m="" day
    day=$(( $(date -u -d "$(date -u +%F)" +%s) * 1000 ))
    while :; do
        line=$(awk -v n="$n" -v day="$day" '
            /shard table rebuilt: / {
                split($1, t, "[:.]")
                ms = day + ((t[1] * 60 + t[2]) * 60 + t[3]) * 1000 + t[4]
                m = $0; sub(/.*rebuilt: /, "", m); sub(/ members.*/, "", m)
                lastm[FILENAME] = m; lastt[FILENAME] = ms
            }
            END {
                k = 0; first = 0; lastv = 0; mm = ""
                for (f in lastm) {
                    if (mm == "") mm = lastm[f]
                    if (lastm[f] != mm) exit
                    if (first == 0 || lastt[f] < first) first = lastt[f]
                    if (lastt[f] > lastv) lastv = lastt[f]
                    k++
                }
                if (k == n) printf "%s %.0f %.0f\n", mm, first, lastv
            }' "$work"/router-*.log 2> /dev/null)
        if [ -n "$line" ]; then
            read -r m first last <<< "$line"
            if [ "$m" != "$last_m" ]; then
                echo "agree - $m $first $last $first $last 0"
                last_m=$m
            fi
        fi
        sleep 0.05
    done
}

machine
echo "load: $(uptime | sed 's/.*load average/load average/')"
echo "ZooKeeper $(mntr version | sed 's/-.*//'), $((3 + MEMBERS)) members (3 nodes + $MEMBERS that only register), 4096 shards, session ${SESSION_MS} ms, ${KILLS} clean stops per size"
printf '%-8s %7s %8s %6s %8s %8s %9s %9s %10s %8s %7s %7s %6s\n' watchers up_ms converge first fan-out build_us kill-9_ms "reqs/chg" "reqs/watch" zkcpu_ms zk_rss watches conns
for size in $SIZES; do
    out=$work/fleet-$size.out
    : > "$out"
    if [ "$ROUTERS" = 1 ]; then
        fpid=
        declare -A rpids=()
        t_up=$(now_ms)
        # ports below the ephemeral range, one after another, skipping any that answers; a
        # router that could not bind (another process's port) is started again on the next
        port=$((20000 + RANDOM % 8000))
        start_router() {
            while (exec 3<> "/dev/tcp/127.0.0.1/$port") 2> /dev/null; do port=$((port + 1)); done
            "$bin/rl-router" --config "$work/router.conf" --listen "127.0.0.1:$port" \
                --workers 1 --name "fleet-$1" --metrics off --log-file "$work/router-$1.log" &
            rpids[$1]=$!
            pids+=("$!")
            port=$((port + 1))
        }
        for i in $(seq 1 "$size"); do start_router "$i"; done
        sleep 1
        for i in $(seq 1 "$size"); do
            kill -0 "${rpids[$i]}" 2> /dev/null || { rm -f "$work/router-$i.log"; start_router "$i"; }
        done
        router_agree_loop "$size" > "$out" &
        fpid=$!
        pids+=("$fpid")
    else
        "$bin/zkfleet" --zk "127.0.0.1:$zkport" --cluster fleet --sessions "$size" --shards 4096 \
            --session-timeout 30000 --members "$MEMBERS" > "$out" 2> "$work/fleet-$size.err" &
        fpid=$!
        pids+=("$fpid")
    fi
    wait_agree "$out" 0 $((3 + MEMBERS)) > /dev/null
    if [ "$ROUTERS" = 1 ]; then
        up=$(( $(awk '$1 == "agree" {print $5; exit}' "$out") - t_up ))
    else
        for _ in $(seq 1 600); do grep -q '^up ' "$out" && break; sleep 0.05; done
        up=$(awk '$1 == "up" {print $3}' "$out")
    fi
    sleep 2
    conv=() fan=() reqs=() cpu=() firsts=()
    for k in $(seq 1 "$KILLS"); do
        # idle: the sessions' pings alone, over 2 s
        p0=$(mntr packets_received) i0=$(now_ms)
        sleep 2
        p1=$(mntr packets_received) i1=$(now_ms)
        c0=$(zk_cpu_ms)
        from=$(wc -l < "$out")
        t0=$(now_ms)
        kill -TERM "${npid[b]}"
        wait "${npid[b]}" 2> /dev/null || true
        read -r _ _ _ first last nfirst nlast build < <(wait_agree "$out" "$from" $((2 + MEMBERS)))
        sleep 1
        p2=$(mntr packets_received) t2=$(now_ms) c1=$(zk_cpu_ms)
        conv+=($((last - t0)))
        fan+=($((nlast - nfirst)))
        firsts+=($((nfirst - t0)))
        reqs+=("$(awk -v a="$p1" -v b="$p0" -v ia="$i1" -v ib="$i0" -v c="$p2" -v ta="$t0" -v tb="$t2" \
            'BEGIN {rate = (a - b) / (ia - ib); printf "%d", (c - a) - rate * (tb - ia)}')")
        cpu+=("$(awk -v a="$c1" -v b="$c0" 'BEGIN {printf "%d", a - b}')")
        from=$(wc -l < "$out")
        start_node b
        wait_agree "$out" "$from" $((3 + MEMBERS)) > /dev/null
    done
    # one crash: the znode goes only when the session expires
    from=$(wc -l < "$out")
    t0=$(now_ms)
    kill -KILL "${npid[b]}"
    wait "${npid[b]}" 2> /dev/null || true
    read -r _ _ _ first last _ _ _ < <(wait_agree "$out" "$from" $((2 + MEMBERS)))
    kill9=$((last - t0))
    watches=$(mntr watch_count) conns=$(mntr num_alive_connections)
    rss=$(( $(rss_kb "$zkpid") / 1024 ))
    start_node b
    wait_agree "$out" "$(wc -l < "$out")" $((3 + MEMBERS)) > /dev/null || true
    mc=$(printf '%s\n' "${conv[@]}" | median)
    mf=$(printf '%s\n' "${fan[@]}" | median)
    m1=$(printf '%s\n' "${firsts[@]}" | median)
    mr=$(printf '%s\n' "${reqs[@]}" | median)
    mz=$(printf '%s\n' "${cpu[@]}" | median)
    printf '%-8s %7s %8s %6s %8s %8s %9s %9s %10.2f %8s %6sM %7s %6s\n' "$size" "$up" "$mc" "$m1" "$mf" \
        "$build" "$kill9" "$mr" "$(awk -v r="$mr" -v n="$size" 'BEGIN {print r / n}')" "$mz" "$rss" \
        "$watches" "$conns"
    kill -TERM "$fpid"
    wait "$fpid" 2> /dev/null || true
    if [ "$ROUTERS" = 1 ]; then
        kill -TERM "${rpids[@]}" 2> /dev/null || true
        wait "${rpids[@]}" 2> /dev/null || true
        rm -f "$work"/router-*.log
    fi
done
echo "medians of ${KILLS} clean stops of node b (converge, first, fan-out, reqs/chg, zk cpu); kill-9: one SIGKILL of b"
echo "load after: $(uptime | sed 's/.*load average/load average/')"
