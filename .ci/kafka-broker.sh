#!/usr/bin/env bash
# A real single-node Apache Kafka 4.x broker (KRaft, broker+controller in one JVM) for
# tests and CI, from the jars Maven Central serves: no Docker, no tarball.
#
#   .ci/kafka-broker.sh up       fetch jars (cached), format fresh storage, start, wait until a
#                                transactional round trip works, print the bootstrap address
#                                on stdout (everything else goes to stderr)
#   .ci/kafka-broker.sh stop     SIGTERM (controlled shutdown), SIGKILL after 30 s
#   .ci/kafka-broker.sh status   "running <bootstrap> pid N" (exit 0) or "stopped" (exit 1)
#   .ci/kafka-broker.sh clean    stop, then delete the broker's data and logs
#   .ci/kafka-broker.sh fetch    only fetch the jars into the cache
#
#   export KSRUNNER_TEST_BOOTSTRAP=$(.ci/kafka-broker.sh up)
#
# Three-node mode (KSRUNNER_KAFKA_NODES=3; the fault tests' cluster): three JVMs, each broker and
# controller (a static three-voter KRaft quorum), node K (1..3) listening on KSRUNNER_KAFKA_PORT+2(K-1)
# (controller: that + 1; KSRUNNER_KAFKA_CONTROLLER_PORT is not used), its data in
# KSRUNNER_KAFKA_DIR/node-K; internal topics and the default replication factor 3, min ISR 2.
# up, stop, status, clean and fetch act on every node; `up` prints the three addresses, comma-separated.
# Besides, in either mode:
#   .ci/kafka-broker.sh stop-node K   SIGTERM node K (controlled shutdown), SIGKILL after 30 s
#   .ci/kafka-broker.sh kill-node K   SIGKILL node K
#   .ci/kafka-broker.sh start-node K  start node K again on its data; wait until its port is open
#
# Needs Java 17+ and Maven 3.8+ (mvn reaches Maven Central). Environment:
#   KSRUNNER_KAFKA_VERSION    org.apache.kafka:kafka_2.13 version (default 4.4.0)
#   KSRUNNER_KAFKA_LOG4J2     log4j2 version; must match the log4j-core kafka-server brings
#                             (default 2.25.5, the one of Kafka 4.4.0)
#   KSRUNNER_CACHE            cache root (default $HOME/.cache/ksrunner); jars go to
#                             $KSRUNNER_CACHE/kafka-<version>/libs
#   KSRUNNER_KAFKA_HOST       listen address (default 127.0.0.1; keep it on loopback)
#   KSRUNNER_KAFKA_PORT       broker port (default 19092)
#   KSRUNNER_KAFKA_CONTROLLER_PORT  controller port (default 19093)
#   KSRUNNER_KAFKA_DIR        data, logs, config, pid (default $KSRUNNER_CACHE/kafka-broker-<port>; three
#                             nodes: $KSRUNNER_CACHE/kafka-cluster-<port>)
#   KSRUNNER_KAFKA_NODES      1 (default) or 3
#   KSRUNNER_KAFKA_KEEP_DATA  1: `up` keeps existing data instead of formatting fresh storage
#   KSRUNNER_KAFKA_HEAP       JVM heap options (default "-Xms256m -Xmx768m")
#   KSRUNNER_KAFKA_READY_TIMEOUT  seconds `up` waits for readiness (default 120)
#   KSRUNNER_KAFKA_EXTRA_CONFIG   a file of server properties appended to the generated
#                             server.properties (a key given there overrides the generated one:
#                             e.g. listeners with a SASL_SSL listener beside PLAINTEXT, which
#                             stays the inter-broker listener and the one `up` probes)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KDIR=$HERE/kafka
VERSION=${KSRUNNER_KAFKA_VERSION:-4.4.0}
LOG4J2=${KSRUNNER_KAFKA_LOG4J2:-2.25.5}
CACHE=${KSRUNNER_CACHE:-${HOME:-/tmp}/.cache/ksrunner}
HOST=${KSRUNNER_KAFKA_HOST:-127.0.0.1}
NODES=${KSRUNNER_KAFKA_NODES:-1}
[[ $NODES == 1 || $NODES == 3 ]] || { echo "KSRUNNER_KAFKA_NODES=$NODES: want 1 or 3" >&2; exit 2; }
BASE_PORT=${KSRUNNER_KAFKA_PORT:-19092}
if [[ $NODES == 1 ]]; then
  ROOT=${KSRUNNER_KAFKA_DIR:-$CACHE/kafka-broker-$BASE_PORT}
  HEAP=${KSRUNNER_KAFKA_HEAP:--Xms256m -Xmx768m}
else
  ROOT=${KSRUNNER_KAFKA_DIR:-$CACHE/kafka-cluster-$BASE_PORT}
  HEAP=${KSRUNNER_KAFKA_HEAP:--Xms128m -Xmx512m}
fi
READY_TIMEOUT=${KSRUNNER_KAFKA_READY_TIMEOUT:-120}

JARS=$CACHE/kafka-$VERSION
LIBS=$JARS/libs

# node K: sets the node's id, ports, directories and files. One node: the broker of the
# single-node interface (its directory is ROOT itself).
node() {
  NODE=$1
  if [[ $NODES == 1 ]]; then
    PORT=$BASE_PORT
    CPORT=${KSRUNNER_KAFKA_CONTROLLER_PORT:-19093}
    WORK=$ROOT
  else
    PORT=$(( BASE_PORT + 2 * (NODE - 1) ))
    CPORT=$(( PORT + 1 ))
    WORK=$ROOT/node-$NODE
  fi
  DATA=$WORK/data
  LOGS=$WORK/logs
  CONF=$WORK/server.properties
  PIDFILE=$WORK/kafka.pid
  LOG_OPTS=(-Dlog4j2.configurationFile="$KDIR/log4j2.properties" -Dkafka.logs.dir="$LOGS")
}
node 1
# BOOTSTRAP: every node's address, comma-separated
BOOTSTRAP=
for k in $(seq 1 "$NODES"); do
  BOOTSTRAP+=${BOOTSTRAP:+,}$HOST:$(( BASE_PORT + (NODES > 1 ? 2 * (k - 1) : 0) ))
done
JAVA=${JAVA_HOME:+$JAVA_HOME/bin/}java
JAVAC=${JAVA_HOME:+$JAVA_HOME/bin/}javac
# as bin/kafka-run-class.sh, plus a short JIT warm-up for a faster start on 2 cores
JVM_OPTS=(-server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35
  -XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15 -Djava.awt.headless=true)

T0=$(date +%s.%N)
log() { printf '[kafka-broker %6.1fs] %s\n' "$(elapsed)" "$*" >&2; }
elapsed() { awk -v a="$(date +%s.%N)" -v b="$T0" 'BEGIN{printf "%.1f", a-b}'; }
die() { log "ERROR: $*"; exit 1; }

fetch() {
  if [[ -f $LIBS/.complete ]]; then
    log "jars cached in $LIBS"
    return
  fi
  command -v mvn >/dev/null || die "mvn not found (needs Maven 3.8+)"
  mkdir -p "$JARS"
  local tmp
  tmp=$(mktemp -d "$JARS/libs.tmp.XXXXXX")
  log "fetching org.apache.kafka:kafka_2.13:$VERSION + log4j2 $LOG4J2 runtime jars"
  if ! mvn -q -B -f "$KDIR/pom.xml" -Dkafka.version="$VERSION" -Dlog4j2.version="$LOG4J2" \
      dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$tmp" >"$JARS/mvn.log" 2>&1; then
    cat "$JARS/mvn.log" >&2
    rm -rf "$tmp"
    die "mvn dependency:copy-dependencies failed"
  fi
  [[ -f $tmp/kafka_2.13-$VERSION.jar ]] || { rm -rf "$tmp"; die "kafka_2.13-$VERSION.jar missing after fetch"; }
  touch "$tmp/.complete"
  # another process may have won the race; keep whichever landed first
  if ! mv -T "$tmp" "$LIBS" 2>/dev/null; then rm -rf "$tmp"; fi
  log "$(find "$LIBS" -name '*.jar' | wc -l) jars, $(du -sh "$LIBS" | cut -f1) in $LIBS"
}

# compiles ReadyCheck.java once per (source, version) into the cache
readycheck_classes() {
  local sum dir
  sum=$(sha256sum "$KDIR/ReadyCheck.java" | cut -c1-12)
  dir=$JARS/readycheck-$sum
  if [[ ! -f $dir/ReadyCheck.class ]]; then
    local tmp
    tmp=$(mktemp -d "$JARS/readycheck.tmp.XXXXXX")
    "$JAVAC" -nowarn -d "$tmp" -cp "$LIBS/*" "$KDIR/ReadyCheck.java" >&2
    mv -T "$tmp" "$dir" 2>/dev/null || rm -rf "$tmp"
  fi
  echo "$dir"
}

write_config() {
  mkdir -p "$DATA" "$LOGS"
  local quorum rf=1 isr=1 k
  if [[ $NODES == 1 ]]; then
    quorum="controller.quorum.bootstrap.servers=$HOST:$CPORT"
  else
    # a static quorum of the three controllers; internal topics on all three, writes need two
    quorum="controller.quorum.voters="
    for k in $(seq 1 "$NODES"); do
      quorum+="${k}@$HOST:$(( BASE_PORT + 2 * (k - 1) + 1 ))"
      [[ $k == "$NODES" ]] || quorum+=","
    done
    rf=3 isr=2
  fi
  cat > "$CONF" <<CONF
# generated by .ci/kafka-broker.sh: $NODES-node KRaft test cluster (this is node $NODE), loopback only
process.roles=broker,controller
node.id=$NODE
$quorum
listeners=PLAINTEXT://$HOST:$PORT,CONTROLLER://$HOST:$CPORT
advertised.listeners=PLAINTEXT://$HOST:$PORT,CONTROLLER://$HOST:$CPORT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$DATA
num.partitions=1
default.replication.factor=$rf
min.insync.replicas=$isr
num.recovery.threads.per.data.dir=1
num.network.threads=2
num.io.threads=4
# internal topics: replication 1 and min ISR 1 on a single node, 3 and 2 on three
offsets.topic.replication.factor=$rf
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$isr
# test speed: few internal partitions (defaults: 50), no initial rebalance delay (default: 3 s)
offsets.topic.num.partitions=4
transaction.state.log.num.partitions=4
group.initial.rebalance.delay.ms=0
# KIP-848 consumer groups: heartbeat every second (default 5 s), so reassignments are quick
group.consumer.min.heartbeat.interval.ms=500
group.consumer.heartbeat.interval.ms=1000
# topics are created explicitly, as the runner does (and kfake in tests does)
auto.create.topics.enable=false
CONF
  if [[ -n ${KSRUNNER_KAFKA_EXTRA_CONFIG:-} ]]; then
    [[ -r $KSRUNNER_KAFKA_EXTRA_CONFIG ]] || die "KSRUNNER_KAFKA_EXTRA_CONFIG: cannot read $KSRUNNER_KAFKA_EXTRA_CONFIG"
    { echo "# from KSRUNNER_KAFKA_EXTRA_CONFIG=$KSRUNNER_KAFKA_EXTRA_CONFIG (later keys override earlier ones)"
      cat "$KSRUNNER_KAFKA_EXTRA_CONFIG"; echo; } >> "$CONF"
  fi
}

# format [CLUSTER_ID]: formats node $NODE's storage (a new cluster id unless given)
format() {
  write_config
  # a cluster id is 16 random bytes, base64url without padding (what StorageTool random-uuid prints);
  # it may start with '-', so it is passed as --cluster-id=ID, never as a separate argument
  local cid=${1:-}
  [[ -n $cid ]] || cid=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
  local standalone=(--standalone)
  [[ $NODES == 1 ]] || standalone=() # static voters: the quorum is in the config
  log "formatting $DATA (cluster.id=$cid)"
  "$JAVA" -Xmx256m -XX:TieredStopAtLevel=1 "${LOG_OPTS[@]}" -cp "$LIBS/*" kafka.tools.StorageTool \
    format --cluster-id="$cid" -c "$CONF" "${standalone[@]}" >"$LOGS/format.log" 2>&1 \
    || { cat "$LOGS/format.log" >&2; die "storage format failed"; }
  CLUSTER_ID=$cid
}

pid_of() { [[ -f $PIDFILE ]] && cat "$PIDFILE"; }

# running: the pid file names a live JVM running kafka.Kafka with our config
running() {
  local pid
  pid=$(pid_of) || return 1
  [[ -r /proc/$pid/cmdline ]] || return 1
  local cmdline
  cmdline=$(tr '\0' ' ' < "/proc/$pid/cmdline")
  [[ $cmdline == *"kafka.Kafka $CONF"* ]]
}

port_busy() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

start() {
  for p in "$PORT" "$CPORT"; do
    port_busy "$p" && die "$HOST:$p is already in use by another process (set KSRUNNER_KAFKA_PORT / KSRUNNER_KAFKA_CONTROLLER_PORT)"
  done
  log "starting Kafka $VERSION node $NODE on $HOST:$PORT (controller $HOST:$CPORT, $WORK)"
  # shellcheck disable=SC2086
  nohup "$JAVA" $HEAP "${JVM_OPTS[@]}" "${LOG_OPTS[@]}" -cp "$LIBS/*" \
    kafka.Kafka "$CONF" >"$LOGS/stdout.log" 2>&1 </dev/null &
  echo $! > "$PIDFILE"
}

# wait_port DEADLINE: waits until node $NODE's port is open
wait_port() {
  until port_busy "$PORT"; do
    running || { log "node $NODE exited; tail of $LOGS/stdout.log:"; tail -n 40 "$LOGS/stdout.log" >&2; return 1; }
    (( $(date +%s) < $1 )) || { log "port $PORT not open after ${READY_TIMEOUT}s"; return 1; }
    sleep 0.2
  done
}

wait_ready() {
  local deadline classes k
  deadline=$(( $(date +%s) + READY_TIMEOUT ))
  classes=$(readycheck_classes)
  for k in $(seq 1 "$NODES"); do
    node "$k"
    wait_port "$deadline" || return 1
  done
  node 1
  log "port(s) of $BOOTSTRAP open; probing a transactional round trip"
  if ! "$JAVA" -Xmx128m -XX:TieredStopAtLevel=1 -Dlog4j2.configurationFile="$KDIR/log4j2.properties" \
      -Dkafka.logs.dir="$LOGS/readycheck" -cp "$classes:$LIBS/*" \
      ReadyCheck "$BOOTSTRAP" "$(( (deadline - $(date +%s)) * 1000 ))" >&2; then
    log "not ready; tail of $LOGS/stdout.log:"; tail -n 40 "$LOGS/stdout.log" >&2
    return 1
  fi
  for k in $(seq 1 "$NODES"); do
    node "$k"
    log "ready on $BOOTSTRAP: node $k pid $(pid_of), RSS $(ps -o rss= -p "$(pid_of)" | awk '{printf "%.0f MiB", $1/1024}')"
  done
}

# stop_node [SIG]: stops node $NODE: SIGTERM (controlled shutdown; SIGKILL after 30 s) or SIG
stop_node() {
  local sig=${1:-TERM}
  if ! running; then
    rm -f "$PIDFILE"
    log "node $NODE not running"
    return 0
  fi
  local pid
  pid=$(pid_of)
  log "stopping node $NODE, pid $pid (SIG$sig)"
  kill -"$sig" "$pid" 2>/dev/null || true
  for _ in $(seq 1 150); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "still alive after 30 s: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$PIDFILE"
  log "node $NODE stopped"
}

stop() {
  local k
  for k in $(seq 1 "$NODES"); do
    node "$k"
    stop_node
  done
}

# start_node K: starts node K again on its data and waits until its port is open
start_node() {
  node "$1"
  [[ -f $DATA/meta.properties ]] || die "node $1 has no data in $DATA (run up first)"
  if running; then
    log "node $1 already running (pid $(pid_of))"
    return
  fi
  write_config
  start
  wait_port $(( $(date +%s) + READY_TIMEOUT )) || die "node $1 did not open its port (logs in $LOGS)"
  log "node $1 up on $HOST:$PORT, pid $(pid_of)"
}

# node_arg K: checks a node number
node_arg() {
  [[ ${1:-} =~ ^[0-9]+$ ]] && (( $1 >= 1 && $1 <= NODES )) || { echo "want a node number, 1 to $NODES" >&2; exit 2; }
}

up() {
  if running; then
    log "already running (pid $(pid_of))"
    wait_ready
    echo "$BOOTSTRAP"
    return
  fi
  fetch
  local k pids=()
  # one cluster id for every node; the nodes format at once (a JVM each)
  CLUSTER_ID=
  [[ $NODES == 1 ]] || CLUSTER_ID=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
  for k in $(seq 1 "$NODES"); do
    node "$k"
    if [[ ${KSRUNNER_KAFKA_KEEP_DATA:-} == 1 && -f $DATA/meta.properties ]]; then
      write_config
      log "keeping data in $DATA"
    else
      rm -rf "$DATA" "$LOGS"
      format "$CLUSTER_ID" &
      pids+=($!)
    fi
  done
  for k in "${pids[@]}"; do
    wait "$k" || die "formatting the storage failed"
  done
  for k in $(seq 1 "$NODES"); do
    node "$k"
    start
  done
  if ! wait_ready; then
    stop
    die "broker did not become ready (logs in $ROOT)"
  fi
  echo "$BOOTSTRAP"
}

case "${1:-}" in
  up) up ;;
  stop) stop ;;
  status)
    if [[ $NODES == 1 ]]; then
      if running; then echo "running $BOOTSTRAP pid $(pid_of)"; else echo "stopped"; exit 1; fi
    else
      up_nodes=0
      for k in $(seq 1 "$NODES"); do
        node "$k"
        if running; then echo "node $k running $HOST:$PORT pid $(pid_of)"; up_nodes=$((up_nodes + 1)); else echo "node $k stopped"; fi
      done
      (( up_nodes > 0 )) || exit 1
    fi ;;
  clean) stop; rm -rf "$ROOT" ;;
  fetch) fetch ;;
  stop-node) node_arg "${2:-}"; node "$2"; stop_node ;;
  kill-node) node_arg "${2:-}"; node "$2"; stop_node KILL ;;
  start-node) node_arg "${2:-}"; start_node "$2" ;;
  *) echo "usage: $0 {up|stop|status|clean|fetch|stop-node K|kill-node K|start-node K}" >&2; exit 2 ;;
esac
