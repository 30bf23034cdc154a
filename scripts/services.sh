#!/usr/bin/env bash
# services.sh starts and stops the real servers kiev's tests run against.
#
#   scripts/services.sh up            install (if needed) and start every service
#   scripts/services.sh down [NAME..] stop the services this script started
#                                     (only those NAMEs, if given)
#   scripts/services.sh env           print the export lines the tests read:
#                                     eval "$(scripts/services.sh env)"
#
# A service that already answers on its port is used as it is; only where
# none answers does the script start one, under $KIEV_SERVICES_DIR
# (default /tmp/kiev-services), and record its PID there so that `down`
# stops only what `up` started. Everything binds to 127.0.0.1.
#
# `up` installs every missing Debian package in one apt-get run, and starts
# the services side by side: those that need no package (FerretDB, whose
# first build takes a minute and a half) while apt runs, the others after
# it. If $KIEV_SERVICES_STARTED names a file, `up` adds to it the name of
# each service that it started itself (not one that already answered), so
# that `make test` can stop those and leave the others alone.
#
# Each line it prints starts with the seconds since $KIEV_T0 (the start of
# `make test`), or since the script started.
#
# Each service is a set of functions named <service>_up, <service>_down and
# <service>_env, and optionally <service>_packages, which prints the Debian
# packages it needs that are not installed; add a service by writing its
# functions and listing it in SERVICES.
set -euo pipefail

SERVICES=(redis mariadb zookeeper zookeeper_ensemble etcd ferretdb chromium nginx dnsmasq)
STATE_DIR=${KIEV_SERVICES_DIR:-/tmp/kiev-services}
T0=${KIEV_T0:-$(date +%s)}

log() { printf 'services: [%3ds] %s\n' "$(($(date +%s) - T0))" "$*" >&2; }
die() { log "$*"; exit 1; }

# started NAME notes in $KIEV_SERVICES_STARTED, if set, that this run of
# `up` started NAME.
started() {
	if [[ -n ${KIEV_SERVICES_STARTED:-} ]]; then
		echo "$1" >>"$KIEV_SERVICES_STARTED"
	fi
}

# alive PID succeeds if PID is a running process; a zombie counts as dead
# (PID 1 on these machines does not reap orphans, so kill -0 is not enough).
alive() {
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) }            # the state is the field after "(comm) "
	[[ ${stat%% *} != Z ]]
}

# stop_pidfile FILE sends SIGTERM to the PID in FILE, waits up to 10 s for it
# to end, then SIGKILLs it, and removes FILE.
stop_pidfile() {
	local file=$1 pid i
	[[ -f $file ]] || return 0
	pid=$(<"$file")
	if [[ $pid =~ ^[0-9]+$ ]] && alive "$pid"; then
		kill -TERM "$pid" 2>/dev/null || true
		for ((i = 0; i < 100; i++)); do
			alive "$pid" || break
			sleep 0.1
		done
		if alive "$pid"; then
			log "PID $pid ignored SIGTERM; killing it"
			kill -KILL "$pid" 2>/dev/null || true
		fi
	fi
	rm -f "$file"
}

# apt_install PACKAGE... installs Debian packages in one apt-get run,
# without letting their maintainer scripts start any daemon. It prints a
# line as the download ends, as unpacking starts and as each PACKAGE is set
# up; apt's full output goes to $STATE_DIR/apt.log, whose end it prints if
# apt fails.
apt_install() {
	local created_policy="" rc=0 t=$SECONDS
	export DEBIAN_FRONTEND=noninteractive
	if [[ ! -e /usr/sbin/policy-rc.d ]]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 755 /usr/sbin/policy-rc.d
		created_policy=1
	fi
	# Refresh the package lists only when apt does not know a package.
	if ! apt-cache show "$@" >/dev/null 2>&1; then
		log "apt: apt-get update"
		apt-get update -qq || rc=$?
	fi
	if ((rc == 0)); then
		log "apt: installing $*"
		: >"$STATE_DIR/apt.log"
		apt-get install -y -q --no-install-recommends "$@" 2>&1 | apt_progress "$@" || rc=$?
	fi
	if [[ -n $created_policy ]]; then
		rm -f /usr/sbin/policy-rc.d
	fi
	if ((rc == 0)); then
		log "apt: installed $* in $((SECONDS - t))s"
	else
		log "apt: failed (exit $rc); the end of $STATE_DIR/apt.log:"
		tail -n 30 "$STATE_DIR/apt.log" >&2 || true
	fi
	return "$rc"
}

# apt_progress PACKAGE... copies apt-get's output to $STATE_DIR/apt.log and
# prints the lines that show its progress.
apt_progress() {
	local line pkg unpacking="" triggers=""
	while IFS= read -r line; do
		printf '%s\n' "$line" >>"$STATE_DIR/apt.log"
		case $line in
		*" newly installed, "*) log "apt: ${line%, * to remove*}" ;;
		"Need to get "*) log "apt: ${line,}" ;;
		"Fetched "*) log "apt: ${line,}" ;;
		"Unpacking "*)
			if [[ -z $unpacking ]]; then
				log "apt: unpacking"
				unpacking=1
			fi
			;;
		"Setting up "*)
			pkg=${line#Setting up }
			pkg=${pkg%% *}
			pkg=${pkg%%:*}
			if [[ " $* " == *" $pkg "* ]]; then
				log "apt: set up $pkg"
			fi
			;;
		"Processing triggers for "*)
			if [[ -z $triggers ]]; then
				log "apt: processing triggers"
				triggers=1
			fi
			;;
		esac
	done
}

# tcp_open HOST PORT succeeds if something accepts connections there.
tcp_open() {
	(exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
}

# wait_port HOST PORT NAME waits up to 30 s for the port to open.
wait_port() {
	local i
	for ((i = 0; i < 300; i++)); do
		tcp_open "$1" "$2" && return 0
		sleep 0.1
	done
	log "$3: nothing answers on $1:$2 after 30 s"
	return 1
}

# --- Redis and MariaDB ---------------------------------------------------------
# Both run on every machine before the session starts; if one has stopped,
# it is started again with the machine's own command, and left running.

REDIS_HOST=127.0.0.1
REDIS_PORT=6379

redis_packages() {
	tcp_open "$REDIS_HOST" "$REDIS_PORT" || command -v redis-server >/dev/null || echo redis-server
}

redis_up() {
	if tcp_open "$REDIS_HOST" "$REDIS_PORT"; then
		log "redis: already answering on $REDIS_HOST:$REDIS_PORT"
		return 0
	fi
	mkdir -p /var/lib/redis /var/log/redis
	log "redis: starting on $REDIS_HOST:$REDIS_PORT"
	redis-server --daemonize yes --bind 127.0.0.1 -::1 --port "$REDIS_PORT" --save "" \
		--appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log
	wait_port "$REDIS_HOST" "$REDIS_PORT" redis
}

redis_down() { :; } # not ours to stop

redis_env() {
	echo "export KIEV_REDIS=$REDIS_HOST:$REDIS_PORT"
	echo "export KIEV_REDIS_SERVER=$(command -v redis-server || echo /usr/bin/redis-server)"
}

MARIADB_HOST=127.0.0.1
MARIADB_PORT=3306

mariadb_up() {
	if tcp_open "$MARIADB_HOST" "$MARIADB_PORT"; then
		log "mariadb: already answering on $MARIADB_HOST:$MARIADB_PORT"
		return 0
	fi
	log "mariadb: starting"
	start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
	wait_port "$MARIADB_HOST" "$MARIADB_PORT" mariadb
}

mariadb_down() { :; } # not ours to stop

mariadb_env() {
	echo "export KIEV_MYSQL='root:@tcp($MARIADB_HOST:$MARIADB_PORT)/test'"
}

# --- ZooKeeper ---------------------------------------------------------------

ZK_HOST=127.0.0.1
ZK_PORT=2181
ZK_JAR=/usr/share/java/zookeeper.jar
# slf4j-simple gives ZooKeeper a log binding (Debian's classpath has none, so
# the server would log nothing); it writes to stderr, that is to $ZK_DIR/log.
ZK_CLASSPATH=/etc/zookeeper/conf:$ZK_JAR:/usr/share/java/slf4j-simple.jar
ZK_DIR=$STATE_DIR/zookeeper

# zk_4lw HOST PORT WORD prints the ZooKeeper server's answer to a
# four-letter word, through bash's /dev/tcp (no nc needed).
zk_4lw() {
	local host=$1 port=$2 word=$3
	( # a subshell, so that the socket and the exit stay in it
		exec 3<>"/dev/tcp/$host/$port" || exit 1
		printf '%s' "$word" >&3
		timeout 2 cat <&3
	) 2>/dev/null
}

# zk_ruok succeeds if a ZooKeeper on HOST PORT answers ruok with imok.
zk_ruok() {
	[[ $(zk_4lw "${1:-$ZK_HOST}" "${2:-$ZK_PORT}" ruok) == imok ]]
}

# zk_ready succeeds if that ZooKeeper also serves sessions: srvr shows its
# Mode (ruok answers imok a moment before that).
zk_ready() {
	zk_ruok "$@" && [[ $(zk_4lw "${1:-$ZK_HOST}" "${2:-$ZK_PORT}" srvr) == *$'\n'Mode:* ]]
}

zookeeper_packages() {
	zk_ruok && return 0
	[[ -f $ZK_JAR ]] || echo zookeeper
	command -v java >/dev/null || echo default-jre-headless
}

zookeeper_up() {
	if zk_ruok; then
		log "zookeeper: already answering on $ZK_HOST:$ZK_PORT"
		return 0
	fi
	[[ -f $ZK_JAR ]] || die "zookeeper: $ZK_JAR is missing (Debian's zookeeper package)"
	command -v java >/dev/null || die "zookeeper: no java command (Debian's default-jre-headless)"
	mkdir -p "$ZK_DIR/data"
	stop_pidfile "$ZK_DIR/pid" # a stale server of ours that stopped answering
	cat >"$ZK_DIR/zoo.cfg" <<EOF
tickTime=500
initLimit=10
syncLimit=5
dataDir=$ZK_DIR/data
clientPort=$ZK_PORT
clientPortAddress=$ZK_HOST
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=*
EOF
	log "zookeeper: starting on $ZK_HOST:$ZK_PORT (state in $ZK_DIR)"
	setsid java -Xmx256m -XX:+UseSerialGC \
		-Dorg.slf4j.simpleLogger.showDateTime=true \
		-cp "$ZK_CLASSPATH" org.apache.zookeeper.server.quorum.QuorumPeerMain \
		"$ZK_DIR/zoo.cfg" >"$ZK_DIR/log" 2>&1 </dev/null &
	echo $! >"$ZK_DIR/pid"
	started zookeeper
	local pid=$! i
	for ((i = 0; i < 300; i++)); do # 30 s
		if zk_ready; then
			log "zookeeper: ready (PID $pid)"
			return 0
		fi
		alive "$pid" || break
		sleep 0.1
	done
	log "zookeeper: not serving within 30 s; the end of $ZK_DIR/log:"
	tail -n 40 "$ZK_DIR/log" >&2 || true
	stop_pidfile "$ZK_DIR/pid"
	return 1
}

zookeeper_down() {
	if [[ -f $ZK_DIR/pid ]]; then
		log "zookeeper: stopping PID $(<"$ZK_DIR/pid")"
	fi
	stop_pidfile "$ZK_DIR/pid"
}

zookeeper_env() {
	echo "export KIEV_ZOOKEEPER=$ZK_HOST:$ZK_PORT"
	echo "export KIEV_ZOOKEEPER_CLASSPATH=$ZK_CLASSPATH"
}

# --- ZooKeeper ensemble --------------------------------------------------------
# Three members on loopback beside the standalone server, for the tests that
# run against an ensemble without stopping its members (the registry's
# conformance suite); the tests that kill, stop and partition members start
# private ensembles of their own (internal/zktest). Member N (1 to 3) takes
# client port 2181+N, quorum port 2890+N and election port 3890+N, and keeps
# its state under $ZKE_DIR/N. Members that already answer are used as they
# are; `up` starts the others and waits for all three to serve, which takes a
# quorum and a leader.

ZKE_MEMBERS=(1 2 3)
ZKE_QUORUM_BASE=2890
ZKE_ELECTION_BASE=3890
ZKE_DIR=$STATE_DIR/zookeeper-ensemble

# zke_port N prints member N's client port.
zke_port() { echo $((ZK_PORT + $1)); }

# zke_addrs prints the members' addresses, comma-separated.
zke_addrs() {
	local n addrs=()
	for n in "${ZKE_MEMBERS[@]}"; do addrs+=("$ZK_HOST:$(zke_port "$n")"); done
	(IFS=,; echo "${addrs[*]}")
}

zookeeper_ensemble_packages() {
	local n
	for n in "${ZKE_MEMBERS[@]}"; do
		if ! zk_ruok "$ZK_HOST" "$(zke_port "$n")"; then
			[[ -f $ZK_JAR ]] || echo zookeeper
			command -v java >/dev/null || echo default-jre-headless
			return 0
		fi
	done
}

# zke_start N writes member N's config and starts it.
zke_start() {
	local n=$1 m dir=$ZKE_DIR/$1
	mkdir -p "$dir/data"
	stop_pidfile "$dir/pid" # a stale member of ours that stopped answering
	echo "$n" >"$dir/data/myid"
	{
		cat <<EOF
tickTime=500
initLimit=10
syncLimit=5
dataDir=$dir/data
clientPort=$(zke_port "$n")
clientPortAddress=$ZK_HOST
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=*
EOF
		for m in "${ZKE_MEMBERS[@]}"; do
			echo "server.$m=$ZK_HOST:$((ZKE_QUORUM_BASE + m)):$((ZKE_ELECTION_BASE + m))"
		done
	} >"$dir/zoo.cfg"
	setsid java -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
		-Dorg.slf4j.simpleLogger.showDateTime=true \
		-cp "$ZK_CLASSPATH" org.apache.zookeeper.server.quorum.QuorumPeerMain \
		"$dir/zoo.cfg" >"$dir/log" 2>&1 </dev/null &
	echo $! >"$dir/pid"
}

zookeeper_ensemble_up() {
	local n i ours=() waiting=()
	for n in "${ZKE_MEMBERS[@]}"; do
		zk_ruok "$ZK_HOST" "$(zke_port "$n")" || ours+=("$n")
	done
	if ((${#ours[@]} == 0)); then
		log "zookeeper_ensemble: already answering on $(zke_addrs)"
	else
		[[ -f $ZK_JAR ]] || die "zookeeper_ensemble: $ZK_JAR is missing (Debian's zookeeper package)"
		command -v java >/dev/null || die "zookeeper_ensemble: no java command (Debian's default-jre-headless)"
		log "zookeeper_ensemble: starting member(s) ${ours[*]} of $(zke_addrs) (state in $ZKE_DIR)"
		for n in "${ours[@]}"; do zke_start "$n"; done
		started zookeeper_ensemble
	fi
	for ((i = 0; i < 300; i++)); do # 30 s
		waiting=()
		for n in "${ZKE_MEMBERS[@]}"; do
			zk_ready "$ZK_HOST" "$(zke_port "$n")" || waiting+=("$n")
		done
		if ((${#waiting[@]} == 0)); then
			if ((${#ours[@]})); then
				log "zookeeper_ensemble: ready (PIDs $(for n in "${ours[@]}"; do cat "$ZKE_DIR/$n/pid"; done | xargs))"
			fi
			return 0
		fi
		for n in "${ours[@]}"; do
			alive "$(<"$ZKE_DIR/$n/pid")" || break 2
		done
		sleep 0.1
	done
	log "zookeeper_ensemble: member(s) ${waiting[*]} not serving within 30 s, or exited"
	for n in "${ours[@]}"; do
		log "zookeeper_ensemble: the end of $ZKE_DIR/$n/log:"
		tail -n 20 "$ZKE_DIR/$n/log" >&2 || true
	done
	for n in "${ours[@]}"; do stop_pidfile "$ZKE_DIR/$n/pid"; done
	return 1
}

zookeeper_ensemble_down() {
	local n
	for n in "${ZKE_MEMBERS[@]}"; do
		if [[ -f $ZKE_DIR/$n/pid ]]; then
			log "zookeeper_ensemble: stopping member $n, PID $(<"$ZKE_DIR/$n/pid")"
		fi
		stop_pidfile "$ZKE_DIR/$n/pid"
	done
}

zookeeper_ensemble_env() {
	echo "export KIEV_ZOOKEEPER_ENSEMBLE=$(zke_addrs)"
}

# --- etcd --------------------------------------------------------------------
# Debian's etcd-server (3.4) serves the v3 API that the etcd registry's
# client speaks; etcd-client brings etcdctl, for looking at the keys by hand.
# apt_install keeps the package's systemd unit from starting an etcd of its
# own. The shared server keeps its data under $ETCD_DIR; the registry's
# failure tests run private servers of their own (KIEV_ETCD_BIN).

ETCD_HOST=127.0.0.1
ETCD_PORT=2379
ETCD_PEER_PORT=2380
ETCD_BIN=/usr/bin/etcd
ETCD_DIR=$STATE_DIR/etcd

# etcd_healthy succeeds if the etcd on HOST PORT answers GET /health with
# {"health":"true"} (it has a leader), through bash's /dev/tcp.
etcd_healthy() {
	local host=${1:-$ETCD_HOST} port=${2:-$ETCD_PORT}
	[[ $( (
		exec 3<>"/dev/tcp/$host/$port" || exit 1
		printf 'GET /health HTTP/1.0\r\nHost: %s\r\n\r\n' "$host" >&3
		timeout 2 cat <&3
	) 2>/dev/null) == *'"health":"true"'* ]]
}

etcd_packages() {
	etcd_healthy && return 0
	[[ -x $ETCD_BIN ]] || echo etcd-server
	command -v etcdctl >/dev/null || echo etcd-client
}

etcd_up() {
	if etcd_healthy; then
		log "etcd: already answering on $ETCD_HOST:$ETCD_PORT"
		return 0
	fi
	[[ -x $ETCD_BIN ]] || die "etcd: $ETCD_BIN is missing (Debian's etcd-server package)"
	if tcp_open "$ETCD_HOST" "$ETCD_PORT" || tcp_open "$ETCD_HOST" "$ETCD_PEER_PORT"; then
		die "etcd: something that is not a healthy etcd listens on $ETCD_HOST:$ETCD_PORT or :$ETCD_PEER_PORT"
	fi
	mkdir -p "$ETCD_DIR"
	stop_pidfile "$ETCD_DIR/pid" # a stale server of ours that stopped answering
	local client=http://$ETCD_HOST:$ETCD_PORT peer=http://$ETCD_HOST:$ETCD_PEER_PORT
	log "etcd: starting on $ETCD_HOST:$ETCD_PORT (state in $ETCD_DIR)"
	setsid "$ETCD_BIN" --name kiev --data-dir "$ETCD_DIR/data" \
		--listen-client-urls "$client" --advertise-client-urls "$client" \
		--listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
		--initial-cluster "kiev=$peer" --log-level warn >"$ETCD_DIR/log" 2>&1 </dev/null &
	echo $! >"$ETCD_DIR/pid"
	started etcd
	local pid=$! i
	for ((i = 0; i < 300; i++)); do # 30 s
		if etcd_healthy; then
			log "etcd: ready (PID $pid)"
			return 0
		fi
		alive "$pid" || break
		sleep 0.1
	done
	log "etcd: not healthy within 30 s; the end of $ETCD_DIR/log:"
	tail -n 40 "$ETCD_DIR/log" >&2 || true
	stop_pidfile "$ETCD_DIR/pid"
	return 1
}

etcd_down() {
	if [[ -f $ETCD_DIR/pid ]]; then
		log "etcd: stopping PID $(<"$ETCD_DIR/pid")"
	fi
	stop_pidfile "$ETCD_DIR/pid"
}

etcd_env() {
	echo "export KIEV_ETCD=$ETCD_HOST:$ETCD_PORT"
	echo "export KIEV_ETCD_BIN=$ETCD_BIN"
}

# --- FerretDB (MongoDB wire protocol) ---------------------------------------
# MongoDB is not packaged for Debian; FerretDB is a MongoDB-wire server in Go.
# Version v1.24.2 is built from its module once, into a cache keyed by the
# version, and runs on its SQLite backend. The module ships an empty
# build/version/version.txt, with which the binary panics at start, so the
# build writes the version there first. It builds without -trimpath, so that
# it reuses the standard library that kiev's own builds left in the Go cache
# (with it, the cache has to compile the standard library a second time: 97 s
# instead of 58 s on a 2-core machine whose cache held the standard library).

FERRETDB_VERSION=v1.24.2
FERRETDB_HOST=127.0.0.1
FERRETDB_PORT=27017
FERRETDB_DEBUG_PORT=8088
FERRETDB_BIN=${XDG_CACHE_HOME:-$HOME/.cache}/kiev/ferretdb-$FERRETDB_VERSION
FERRETDB_DIR=$STATE_DIR/ferretdb

# go_cmd prints the go command to use: the one on PATH, or /usr/local/go's.
go_cmd() {
	command -v go || { [[ -x /usr/local/go/bin/go ]] && echo /usr/local/go/bin/go; } ||
		die "ferretdb: no go command on PATH or in /usr/local/go/bin"
}

# ferretdb_build builds FerretDB into $FERRETDB_BIN unless it is there,
# printing a line every 30 s while the build runs; the build's output goes
# to $STATE_DIR/ferretdb-build.log, whose end it prints if the build fails.
ferretdb_build() {
	[[ -x $FERRETDB_BIN ]] && return 0
	local go mod src pid t=$SECONDS next=30 buildlog=$STATE_DIR/ferretdb-build.log
	go=$(go_cmd)
	log "ferretdb: downloading module $FERRETDB_VERSION"
	mod=$(cd / && GOFLAGS= GOWORK=off "$go" mod download -json \
		"github.com/FerretDB/FerretDB@$FERRETDB_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p') ||
		die "ferretdb: go mod download github.com/FerretDB/FerretDB@$FERRETDB_VERSION failed"
	[[ -n $mod && -d $mod ]] || die "ferretdb: go mod download found no module directory"
	src=$(mktemp -d "${TMPDIR:-/tmp}/kiev-ferretdb-build.XXXXXX")
	cp -R "$mod/." "$src"
	chmod -R u+w "$src"
	echo "$FERRETDB_VERSION" >"$src/build/version/version.txt"
	mkdir -p "$(dirname "$FERRETDB_BIN")"
	log "ferretdb: building into $FERRETDB_BIN (once; a minute or two)"
	(cd "$src" && GOFLAGS=-mod=mod GOWORK=off exec "$go" build -o "$FERRETDB_BIN.tmp" ./cmd/ferretdb) \
		>"$buildlog" 2>&1 &
	pid=$!
	# Stopped by `up` (an abort), stop the build too.
	trap 'kill "$pid" 2>/dev/null; rm -rf "$src" "$FERRETDB_BIN.tmp"; exit 143' TERM
	while alive "$pid"; do
		sleep 1
		if ((SECONDS - t >= next)); then
			log "ferretdb: still building ($((SECONDS - t))s)"
			next=$((next + 30))
		fi
	done
	if ! wait "$pid"; then
		trap - TERM
		tail -n 30 "$buildlog" >&2 || true
		rm -rf "$src" "$FERRETDB_BIN.tmp"
		die "ferretdb: build failed after $((SECONDS - t))s (the end of $buildlog above)"
	fi
	trap - TERM
	mv "$FERRETDB_BIN.tmp" "$FERRETDB_BIN"
	rm -rf "$src"
	log "ferretdb: built in $((SECONDS - t))s"
}

ferretdb_up() {
	if tcp_open "$FERRETDB_HOST" "$FERRETDB_PORT"; then
		log "ferretdb: already answering on $FERRETDB_HOST:$FERRETDB_PORT"
		return 0
	fi
	ferretdb_build
	mkdir -p "$FERRETDB_DIR/data" "$FERRETDB_DIR/state"
	stop_pidfile "$FERRETDB_DIR/pid" # a stale server of ours that stopped answering
	log "ferretdb: starting on $FERRETDB_HOST:$FERRETDB_PORT (state in $FERRETDB_DIR)"
	setsid "$FERRETDB_BIN" --handler=sqlite --sqlite-url="file:$FERRETDB_DIR/data/" \
		--state-dir="$FERRETDB_DIR/state" \
		--listen-addr="$FERRETDB_HOST:$FERRETDB_PORT" \
		--debug-addr="$FERRETDB_HOST:$FERRETDB_DEBUG_PORT" \
		--telemetry=disable --log-level=WARN >"$FERRETDB_DIR/log" 2>&1 </dev/null &
	echo $! >"$FERRETDB_DIR/pid"
	started ferretdb
	local pid=$! i
	for ((i = 0; i < 300; i++)); do # 30 s
		if tcp_open "$FERRETDB_HOST" "$FERRETDB_PORT"; then
			log "ferretdb: ready (PID $pid)"
			return 0
		fi
		alive "$pid" || break
		sleep 0.1
	done
	log "ferretdb: not serving within 30 s; the end of $FERRETDB_DIR/log:"
	tail -n 40 "$FERRETDB_DIR/log" >&2 || true
	stop_pidfile "$FERRETDB_DIR/pid"
	return 1
}

ferretdb_down() {
	if [[ -f $FERRETDB_DIR/pid ]]; then
		log "ferretdb: stopping PID $(<"$FERRETDB_DIR/pid")"
	fi
	stop_pidfile "$FERRETDB_DIR/pid"
}

ferretdb_env() {
	echo "export KIEV_MONGO=mongodb://$FERRETDB_HOST:$FERRETDB_PORT"
	echo "export KIEV_FERRETDB=$FERRETDB_BIN"
}

# --- Chromium ----------------------------------------------------------------
# Headless Chromium loads the status page in its test; nothing runs.

chromium_packages() {
	command -v chromium >/dev/null || echo chromium
}

chromium_up() {
	command -v chromium >/dev/null || die "chromium: not installed"
	log "chromium: $(chromium --version 2>/dev/null | head -n 1)"
}

chromium_down() { :; }

chromium_env() {
	echo "export KIEV_CHROMIUM=$(command -v chromium || echo /usr/bin/chromium)"
}

# --- nginx -------------------------------------------------------------------
# nginx is the FastCGI peer of the HTTP front's tests. Each test runs a
# private nginx of its own (internal/nginxtest) with a generated config under
# a temporary directory, so `up` only installs Debian's nginx-light and starts
# nothing. apt_install keeps the package from starting nginx on port 80; if
# an nginx answers there anyway, it is not ours, so it is only reported.

NGINX_BIN=/usr/sbin/nginx

nginx_packages() {
	[[ -x $NGINX_BIN ]] || command -v nginx >/dev/null || echo nginx-light
}

nginx_up() {
	local bin
	bin=$(nginx_bin)
	[[ -x $bin ]] || die "nginx: $bin is missing after installing nginx-light"
	log "nginx: $("$bin" -v 2>&1 | head -n 1)"
	if tcp_open 127.0.0.1 80; then
		log "nginx: warning: something listens on port 80 (not started by this script; left alone)"
	fi
}

nginx_down() { :; } # each test stops its own nginx

# nginx_bin prints the nginx binary's path.
nginx_bin() {
	if [[ -x $NGINX_BIN ]]; then
		echo "$NGINX_BIN"
	else
		command -v nginx || echo "$NGINX_BIN"
	fi
}

nginx_env() {
	echo "export KIEV_NGINX=$(nginx_bin)"
}

# --- dnsmasq -----------------------------------------------------------------
# dnsmasq is the DNS server of the dns:// targets' tests. Each test runs a
# private dnsmasq of its own (internal/dnstest) on a free loopback port,
# answering only from a hosts file and an SRV file in a temporary directory,
# so that tests share no state; `up` only installs Debian's dnsmasq-base
# (the binary alone, no service) and starts nothing.

DNSMASQ_BIN=/usr/sbin/dnsmasq

dnsmasq_packages() {
	[[ -x $DNSMASQ_BIN ]] || command -v dnsmasq >/dev/null || echo dnsmasq-base
}

# dnsmasq_bin prints the dnsmasq binary's path.
dnsmasq_bin() {
	if [[ -x $DNSMASQ_BIN ]]; then
		echo "$DNSMASQ_BIN"
	else
		command -v dnsmasq || echo "$DNSMASQ_BIN"
	fi
}

dnsmasq_up() {
	local bin
	bin=$(dnsmasq_bin)
	[[ -x $bin ]] || die "dnsmasq: $bin is missing after installing dnsmasq-base"
	log "dnsmasq: $("$bin" --version 2>&1 | head -n 1)"
}

dnsmasq_down() { :; } # each test stops its own dnsmasq

dnsmasq_env() {
	echo "export KIEV_DNSMASQ=$(dnsmasq_bin)"
}

# --- main --------------------------------------------------------------------

UP_PIDS=() # the services' _up functions that `up` runs in the background

# up installs the Debian packages that the services lack, in one apt-get run,
# and brings the services up side by side: those that need no package at
# once, beside apt, and the others when apt is done. It fails if any fails,
# once all have ended.
up() {
	local s p i need pkgs=() early=() late=() names=() failed=()
	mkdir -p "$STATE_DIR"
	for s in "${SERVICES[@]}"; do
		need=()
		if declare -F "${s}_packages" >/dev/null; then
			mapfile -t need < <("${s}_packages")
		fi
		if ((${#need[@]})); then
			for p in "${need[@]}"; do # the ZooKeeper services share theirs
				[[ " ${pkgs[*]} " == *" $p "* ]] || pkgs+=("$p")
			done
			late+=("$s")
		else
			early+=("$s")
		fi
	done
	trap 'kill -TERM "${UP_PIDS[@]}" 2>/dev/null; wait; exit 143' INT TERM
	for s in "${early[@]}"; do
		"${s}_up" &
		UP_PIDS+=($!)
		names+=("$s")
	done
	if ((${#pkgs[@]})) && ! apt_install "${pkgs[@]}"; then
		failed+=("apt (so not ${late[*]})")
		late=()
	fi
	for s in "${late[@]}"; do
		"${s}_up" &
		UP_PIDS+=($!)
		names+=("$s")
	done
	for i in "${!UP_PIDS[@]}"; do
		wait "${UP_PIDS[i]}" || failed+=("${names[i]}")
	done
	trap - INT TERM
	if ((${#failed[@]})); then
		die "up: failed: ${failed[*]}"
	fi
	log "up: all ready"
}

# down stops the services named, or every service; each stops only what
# this script started and recorded under $STATE_DIR.
down() {
	local s
	(($#)) || set -- "${SERVICES[@]}"
	for s in "$@"; do
		[[ " ${SERVICES[*]} " == *" $s "* ]] || die "down: no service named $s (there are: ${SERVICES[*]})"
	done
	for s in "$@"; do "${s}_down"; done
}

main() {
	local s
	case ${1:-} in
	up)
		up
		;;
	down)
		shift
		down "$@"
		;;
	env)
		for s in "${SERVICES[@]}"; do "${s}_env"; done
		;;
	*)
		die "usage: $0 up | down [SERVICE...] | env"
		;;
	esac
}

main "$@"
