#!/usr/bin/env bash
# tests/kafka/broker.sh - one Apache Kafka broker (KRaft, a single node that
# is both broker and controller) on free loopback ports with a scratch data
# dir, for the kafka-labelled tests, the bench and anyone who wants a real
# broker for a while.  The jars come from Maven Central through
# tests/kafka/pom.xml (`fetch`, which scripts/deps.sh runs; cached).
#
#   broker.sh fetch              download the jars unless cached
#   broker.sh start STATE_DIR    start a broker; STATE_DIR/broker.addr gets
#                                "127.0.0.1:PORT" once it answers metadata
#   broker.sh down STATE_DIR     stop it, keep ports and data (a crash/restart)
#   broker.sh up STATE_DIR       start it again on the same ports and data
#   broker.sh stop STATE_DIR     stop it and remove its data dir
#
# STATE_DIR keeps what the commands share: broker.addr, broker.pid, the
# data dir's path (broker.data), broker.log (kept for a post-mortem).
#
# A broker never outlives whoever started it: a watchdog polls the process
# named by RUNNEL_KAFKA_WATCH_PID (default: start's parent, e.g. ctest) and
# kills the broker and removes its data dir when that process is gone, so
# a killed ctest leaves nothing behind.
#
# Environment: RUNNEL_TEST_KAFKA_BROKERS (start only records it: an external
# broker), RUNNEL_KAFKA_HOME (jar cache, default
# ${XDG_CACHE_HOME:-$HOME/.cache}/runnel/kafka-VERSION), RUNNEL_KAFKA_JAVA_OPTS
# (replaces the small-heap JVM flags), RUNNEL_KAFKA_START_SEC (readiness
# deadline, default 120), RUNNEL_KAFKA_DATA_PARENT (where the scratch data
# dir goes, default $TMPDIR or /tmp).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
pom=$here/pom.xml
version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$pom")
home=${RUNNEL_KAFKA_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/runnel/kafka-$version}
libs=$home/libs

say() { echo "kafka-broker: $*" >&2; }

fetch() {
	# The stamp names the pom's content: a pom change fetches again.
	local sum
	sum=$(sha256sum "$pom" | cut -c1-16)
	if [ -f "$libs/.stamp-$sum" ]; then
		return 0
	fi
	command -v mvn >/dev/null || { say "mvn not found (scripts/deps.sh installs maven)"; return 1; }
	mkdir -p "$home"
	local tmp
	tmp=$(mktemp -d "$home/libs.XXXXXX")
	say "fetching Apache Kafka $version jars into $libs"
	if ! mvn -q -B -f "$pom" dependency:copy-dependencies -DincludeScope=runtime \
		-DoutputDirectory="$tmp" >"$home/mvn.log" 2>&1; then
		tail -20 "$home/mvn.log" >&2
		rm -rf "$tmp"
		return 1
	fi
	touch "$tmp/.stamp-$sum"
	rm -rf "$libs"
	mv "$tmp" "$libs"
}

# A loopback port nobody listens on a moment ago (the bind may still race:
# start retries with new ports when the broker cannot bind).
free_port() {
	local used="" p local_addr st
	# /proc/net/tcp*: local address "IP:PORT" (hex) in field 2, state in
	# field 4 (0A = LISTEN).  Hex through bash: Debian's awk is mawk.
	while read -r _ local_addr _ st _; do
		[ "$st" = "0A" ] || continue
		used+="$((16#${local_addr##*:}))"$'\n'
	done < <(cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | grep -v '^ *sl')
	# Below the kernel's ephemeral range: a stopped broker comes back on the
	# same ports, and an outgoing connection of any process on this machine
	# could otherwise take one of them meanwhile.
	local lo hi
	read -r lo hi </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || lo=32768
	[ "${lo:-0}" -gt 12000 ] 2>/dev/null || lo=32768
	for _ in $(seq 1 200); do
		p=$((10000 + RANDOM % (lo - 10000)))
		if ! grep -qx "$p" <<<"$used"; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

java_opts() {
	if [ -n "${RUNNEL_KAFKA_JAVA_OPTS:-}" ]; then
		echo "$RUNNEL_KAFKA_JAVA_OPTS"
	else
		# Small heap, one GC thread, C1 only: the broker serves a few
		# thousand tiny messages and should start in seconds on 2 cores.
		echo "-Xms64m -Xmx384m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:-UsePerfData -Xss512k" \
			"-Djava.awt.headless=true -Dorg.slf4j.simpleLogger.defaultLogLevel=warn"
	fi
}

write_config() {
	local data=$1 port=$2 cport=$3
	cat >"$data/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$data/log
num.partitions=1
auto.create.topics.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=2
num.recovery.threads.per.data.dir=1
background.threads=2
log.segment.bytes=16777216
EOF
}

# Runs the broker in the background and waits until it answers metadata.
# 0 ready, 1 it died (maybe a port race), 2 deadline passed.
launch() {
	local state=$1 data=$2 port=$3
	local -a opts
	read -r -a opts <<<"$(java_opts)"
	# setsid: the broker leaves the caller's process group (ctest kills
	# groups on timeout; the watchdog and `stop` own the broker's end).
	setsid java "${opts[@]}" -cp "$libs/*" kafka.Kafka "$data/server.properties" \
		</dev/null >>"$state/broker.log" 2>&1 &
	local pid=$!
	echo "$pid" >"$state/broker.pid"
	local deadline=$((SECONDS + ${RUNNEL_KAFKA_START_SEC:-120}))
	while [ $SECONDS -lt $deadline ]; do
		if ! kill -0 "$pid" 2>/dev/null; then
			return 1
		fi
		if timeout 5 kcat -b "127.0.0.1:$port" -L -m 2 2>/dev/null | grep -q ' 1 brokers:'; then
			return 0
		fi
		sleep 0.2
	done
	return 2
}

kill_broker() {
	local state=$1 pid
	pid=$(cat "$state/broker.pid" 2>/dev/null || true)
	[ -n "$pid" ] || return 0
	if kill -TERM "$pid" 2>/dev/null; then
		# A clean stop takes a second or two; SIGKILL after 10 s.
		for _ in $(seq 1 100); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$state/broker.pid"
}

start_watchdog() {
	local state=$1 data=$2 watch=$3
	(
		trap '' HUP INT
		while kill -0 "$watch" 2>/dev/null; do
			sleep 1
		done
		pid=$(cat "$state/broker.pid" 2>/dev/null || true)
		[ -z "$pid" ] || kill -KILL "$pid" 2>/dev/null || true
		rm -rf "$data"
		rm -f "$state/broker.addr" "$state/broker.pid" "$state/broker.data" "$state/broker.watchdog"
	) </dev/null >/dev/null 2>&1 &
	echo $! >"$state/broker.watchdog"
}

cmd_start() {
	local state=$1
	mkdir -p "$state"
	rm -f "$state/broker.addr"
	if [ -n "${RUNNEL_TEST_KAFKA_BROKERS:-}" ]; then
		say "using the external broker $RUNNEL_TEST_KAFKA_BROKERS"
		echo "$RUNNEL_TEST_KAFKA_BROKERS" >"$state/broker.addr"
		return 0
	fi
	fetch
	command -v java >/dev/null || { say "java not found (scripts/deps.sh installs openjdk-17-jre-headless)"; return 1; }
	local data
	data=$(mktemp -d "${RUNNEL_KAFKA_DATA_PARENT:-${TMPDIR:-/tmp}}/runnel-kafka-XXXXXX")
	echo "$data" >"$state/broker.data"
	: >"$state/broker.log"
	start_watchdog "$state" "$data" "${RUNNEL_KAFKA_WATCH_PID:-$PPID}"
	local t0=$SECONDS rc=1 port cport
	for attempt in 1 2 3; do
		port=$(free_port)
		cport=$(free_port)
		[ "$port" != "$cport" ] || continue
		rm -rf "$data/log"
		write_config "$data" "$port" "$cport"
		# A random cluster id that does not start with '-' (argparse).
		local cid
		cid=A$(head -c15 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=' | cut -c1-21)
		local -a opts
		read -r -a opts <<<"$(java_opts)"
		if ! java "${opts[@]}" -cp "$libs/*" kafka.tools.StorageTool format \
			--cluster-id="$cid" -c "$data/server.properties" >>"$state/broker.log" 2>&1; then
			say "formatting the data dir failed"
			tail -20 "$state/broker.log" >&2
			cmd_stop "$state"
			return 1
		fi
		rc=0
		launch "$state" "$data" "$port" || rc=$?
		[ $rc -eq 1 ] || break
		say "broker exited during start (attempt $attempt), trying other ports"
		rm -f "$state/broker.pid"
	done
	if [ $rc -ne 0 ]; then
		say "broker not ready (rc $rc); last log lines:"
		tail -30 "$state/broker.log" >&2
		cmd_stop "$state"
		return 1
	fi
	echo "$port $cport" >"$data/ports"
	echo "127.0.0.1:$port" >"$state/broker.addr.tmp"
	mv "$state/broker.addr.tmp" "$state/broker.addr"
	say "Apache Kafka $version ready at 127.0.0.1:$port after $((SECONDS - t0)) s (data $data)"
}

cmd_down() {
	local state=$1
	kill_broker "$state"
}

cmd_up() {
	local state=$1 data port cport
	data=$(cat "$state/broker.data")
	read -r port cport <"$data/ports"
	# The old sockets may linger a moment: retry the bind until the deadline.
	local rc=1 deadline=$((SECONDS + 30))
	while [ $SECONDS -lt $deadline ]; do
		rc=0
		launch "$state" "$data" "$port" || rc=$?
		[ $rc -eq 1 ] || break
		sleep 0.5
	done
	if [ $rc -ne 0 ]; then
		say "broker did not come back (rc $rc)"
		tail -30 "$state/broker.log" >&2
		return 1
	fi
}

cmd_stop() {
	local state=$1 data wd
	wd=$(cat "$state/broker.watchdog" 2>/dev/null || true)
	[ -z "$wd" ] || kill "$wd" 2>/dev/null || true
	kill_broker "$state"
	data=$(cat "$state/broker.data" 2>/dev/null || true)
	case "$data" in
	*/runnel-kafka-*) rm -rf "$data" ;;
	esac
	rm -f "$state/broker.addr" "$state/broker.data" "$state/broker.watchdog"
}

case "${1:-}" in
fetch) fetch ;;
start | down | up | stop)
	[ $# -eq 2 ] || { echo "usage: $0 $1 STATE_DIR" >&2; exit 2; }
	"cmd_$1" "$2"
	;;
*)
	echo "usage: $0 fetch | start|down|up|stop STATE_DIR" >&2
	exit 2
	;;
esac
