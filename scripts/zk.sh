#!/usr/bin/env bash
# A throwaway local ZooKeeper server from Debian's package, for the demo and benchmarks.
#   scripts/zk.sh start DIR PORT   start one (data and log in DIR), wait until it answers
#   scripts/zk.sh stop DIR         stop the one started in DIR
# docs/REGIONS.md ("Trying it on one machine") runs two of them for two regions.
# Environment: ZK_4LW (four-letter words allowed, default ruok,srvr; bench/zk_fleet.sh adds
# mntr), ZK_MAX_CNXNS (connections per client address, default ZooKeeper's 60; 0: no limit).
set -euo pipefail
cmd=${1:?usage: zk.sh start DIR PORT | stop DIR}
dir=${2:?DIR}
case "$cmd" in
start)
    port=${3:?PORT}
    mkdir -p "$dir/data"
    cat > "$dir/zoo.cfg" <<CFG
tickTime=200
minSessionTimeout=400
maxSessionTimeout=60000
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=${ZK_4LW:-ruok,srvr}
maxClientCnxns=${ZK_MAX_CNXNS:-60}
CFG
    cat > "$dir/log4j.properties" <<'CFG'
log4j.rootLogger=WARN, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} zookeeper %p %m%n
CFG
    java -Xmx256m -Dzookeeper.admin.enableServer=false -Dlog4j.configuration="file:$dir/log4j.properties" \
        -cp "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar" \
        org.apache.zookeeper.server.ZooKeeperServerMain "$dir/zoo.cfg" > "$dir/zookeeper.log" 2>&1 &
    echo $! > "$dir/zookeeper.pid"
    for _ in $(seq 1 150); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            exec 3<>"/dev/tcp/127.0.0.1/$port"
            printf 'ruok' >&3
            if [ "$(head -c 4 <&3 2>/dev/null)" = imok ]; then
                exec 3<&-
                exit 0
            fi
            exec 3<&-
        fi
        kill -0 "$(cat "$dir/zookeeper.pid")" 2>/dev/null || { cat "$dir/zookeeper.log" >&2; exit 1; }
        sleep 0.2
    done
    echo "zk.sh: ZooKeeper did not answer on port $port within 30 s" >&2
    exit 1
    ;;
stop)
    [ -f "$dir/zookeeper.pid" ] || exit 0
    pid=$(cat "$dir/zookeeper.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$dir/zookeeper.pid"
    ;;
*) echo "usage: zk.sh start DIR PORT | stop DIR" >&2; exit 2 ;;
esac
