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
# Needs Java 17+ and Maven 3.8+ (mvn reaches Maven Central). Environment:
#   KSRUNNER_KAFKA_VERSION    org.apache.kafka:kafka_2.13 version (default 4.4.0)
#   KSRUNNER_KAFKA_LOG4J2     log4j2 version; must match the log4j-core kafka-server brings
#                             (default 2.25.5, the one of Kafka 4.4.0)
#   KSRUNNER_CACHE            cache root (default $HOME/.cache/ksrunner); jars go to
#                             $KSRUNNER_CACHE/kafka-<version>/libs
#   KSRUNNER_KAFKA_HOST       listen address (default 127.0.0.1; keep it on loopback)
#   KSRUNNER_KAFKA_PORT       broker port (default 19092)
#   KSRUNNER_KAFKA_CONTROLLER_PORT  controller port (default 19093)
#   KSRUNNER_KAFKA_DIR        data, logs, config, pid (default $KSRUNNER_CACHE/kafka-broker-<port>)
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
PORT=${KSRUNNER_KAFKA_PORT:-19092}
CPORT=${KSRUNNER_KAFKA_CONTROLLER_PORT:-19093}
WORK=${KSRUNNER_KAFKA_DIR:-$CACHE/kafka-broker-$PORT}
HEAP=${KSRUNNER_KAFKA_HEAP:--Xms256m -Xmx768m}
READY_TIMEOUT=${KSRUNNER_KAFKA_READY_TIMEOUT:-120}
BOOTSTRAP=$HOST:$PORT

JARS=$CACHE/kafka-$VERSION
LIBS=$JARS/libs
DATA=$WORK/data
LOGS=$WORK/logs
CONF=$WORK/server.properties
PIDFILE=$WORK/kafka.pid
JAVA=${JAVA_HOME:+$JAVA_HOME/bin/}java
JAVAC=${JAVA_HOME:+$JAVA_HOME/bin/}javac
LOG_OPTS=(-Dlog4j2.configurationFile="$KDIR/log4j2.properties" -Dkafka.logs.dir="$LOGS")
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
  cat > "$CONF" <<CONF
# generated by .ci/kafka-broker.sh: single-node KRaft test broker, loopback only
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=$HOST:$CPORT
listeners=PLAINTEXT://$HOST:$PORT,CONTROLLER://$HOST:$CPORT
advertised.listeners=PLAINTEXT://$HOST:$PORT,CONTROLLER://$HOST:$CPORT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$DATA
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
num.recovery.threads.per.data.dir=1
num.network.threads=2
num.io.threads=4
# single node: internal topics with replication 1, min ISR 1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
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

format() {
  write_config
  # a cluster id is 16 random bytes, base64url without padding (what StorageTool random-uuid prints);
  # it may start with '-', so it is passed as --cluster-id=ID, never as a separate argument
  local cid
  cid=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
  log "formatting $DATA (cluster.id=$cid)"
  "$JAVA" -Xmx256m -XX:TieredStopAtLevel=1 "${LOG_OPTS[@]}" -cp "$LIBS/*" kafka.tools.StorageTool \
    format --cluster-id="$cid" -c "$CONF" --standalone >"$LOGS/format.log" 2>&1 \
    || { cat "$LOGS/format.log" >&2; die "storage format failed"; }
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
  log "starting Kafka $VERSION on $BOOTSTRAP (controller $HOST:$CPORT, $WORK)"
  # shellcheck disable=SC2086
  nohup "$JAVA" $HEAP "${JVM_OPTS[@]}" "${LOG_OPTS[@]}" -cp "$LIBS/*" \
    kafka.Kafka "$CONF" >"$LOGS/stdout.log" 2>&1 </dev/null &
  echo $! > "$PIDFILE"
}

wait_ready() {
  local deadline classes
  deadline=$(( $(date +%s) + READY_TIMEOUT ))
  classes=$(readycheck_classes)
  until port_busy "$PORT"; do
    running || { log "broker exited; tail of $LOGS/stdout.log:"; tail -n 40 "$LOGS/stdout.log" >&2; return 1; }
    (( $(date +%s) < deadline )) || { log "port $PORT not open after ${READY_TIMEOUT}s"; return 1; }
    sleep 0.2
  done
  log "port $PORT open; probing a transactional round trip"
  if ! "$JAVA" -Xmx128m -XX:TieredStopAtLevel=1 -Dlog4j2.configurationFile="$KDIR/log4j2.properties" \
      -Dkafka.logs.dir="$LOGS/readycheck" -cp "$classes:$LIBS/*" \
      ReadyCheck "$BOOTSTRAP" "$(( (deadline - $(date +%s)) * 1000 ))" >&2; then
    log "not ready; tail of $LOGS/stdout.log:"; tail -n 40 "$LOGS/stdout.log" >&2
    return 1
  fi
  log "ready on $BOOTSTRAP, pid $(pid_of), RSS $(ps -o rss= -p "$(pid_of)" | awk '{printf "%.0f MiB", $1/1024}')"
}

stop() {
  if ! running; then
    rm -f "$PIDFILE"
    log "not running"
    return 0
  fi
  local pid
  pid=$(pid_of)
  log "stopping pid $pid (SIGTERM: controlled shutdown)"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 150); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "still alive after 30 s: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$PIDFILE"
  log "stopped"
}

up() {
  if running; then
    log "already running (pid $(pid_of))"
    wait_ready
    echo "$BOOTSTRAP"
    return
  fi
  fetch
  if [[ ${KSRUNNER_KAFKA_KEEP_DATA:-} == 1 && -f $DATA/meta.properties ]]; then
    write_config
    log "keeping data in $DATA"
  else
    rm -rf "$DATA" "$LOGS"
    format
  fi
  start
  if ! wait_ready; then
    stop
    die "broker did not become ready (logs in $LOGS)"
  fi
  echo "$BOOTSTRAP"
}

case "${1:-}" in
  up) up ;;
  stop) stop ;;
  status)
    if running; then echo "running $BOOTSTRAP pid $(pid_of)"; else echo "stopped"; exit 1; fi ;;
  clean) stop; rm -rf "$WORK" ;;
  fetch) fetch ;;
  *) echo "usage: $0 {up|stop|status|clean|fetch}" >&2; exit 2 ;;
esac
