#!/usr/bin/env bash
# scripts/kube.sh — a throwaway Kubernetes control plane for Tether's tests.
#
# Usage:
#   scripts/kube.sh start [NAME]      start (or reuse) cluster NAME; print its kubeconfig's path
#   scripts/kube.sh stop [NAME]       stop it: every process it started ends and is reaped
#   scripts/kube.sh env [NAME]        print `export KUBECONFIG=...` for eval
#   scripts/kube.sh status [NAME]     say whether it is running
#   scripts/kube.sh restart-apiserver NAME   kill -9 its kube-apiserver, start it again, wait until ready
#
# NAME is a short word (a-z, 0-9, -) such as `chaoskube`. Without one (or
# with `default`) the commands act on the default cluster: state in
# .data/kube, API server on 30443. Each other NAME is a cluster of its own,
# with its own processes, certificates and etcd: state in .data/kube-NAME and
# a base port derived from NAME (31000-32596, a multiple of 4). Every
# cluster's ports lie below the ephemeral ports, so that a test may restart
# or stop its own cluster without disturbing the one other tests share, and
# no outgoing connection can hold a cluster's port when it binds it. Only
# `restart-apiserver` requires a NAME: the default
# cluster is shared, and never restarted under its users.
#
# What runs, all on 127.0.0.1 only:
#   - etcd, kube-apiserver, kube-controller-manager and kube-scheduler, built
#     from the Go modules go.etcd.io/etcd/server/v3 and k8s.io/kubernetes as
#     ordinary dependencies of tools/kube (its go.mod pins the versions);
#   - kwok (sigs.k8s.io/kwok, `go install`ed at $kwok_version) as the nodes:
#     one node, kwok-node-0, Ready and untainted; pods on it go Running
#     without containers, and `pods/exec` runs the command on this machine,
#     in a scratch folder, with an empty environment (kwok's ClusterExec).
#
# The binaries are built once into a cache keyed on the versions
#   ${XDG_CACHE_HOME:-$HOME/.cache}/tether/kube/<key>/
# (the key hashes the Go version, kwok's version, tools/kube/go.sum and the
# tools' sources), shared by every cluster. A cold build takes about 10
# minutes on 2 cores and about 4.5 GB of memory; a warm start takes seconds.
#
# `start` is idempotent: a running control plane is reused. A new one (after
# `stop`) starts from an empty etcd with new certificates and a new token.
# The kubeconfig's path is the LAST line of stdout, and the only thing printed
# there; progress and errors go to stderr. So
#   KUBECONFIG=$(scripts/kube.sh start | tail -n 1)
# works. The kubeconfig authenticates with a bearer token (a static token of
# the API server, user tether-admin, group system:masters) and trusts the
# cluster's own CA.
#
# `restart-apiserver NAME` is a crash of the API server alone: its supervisor
# SIGKILLs it, waits TETHER_KUBE_DOWN_SECONDS (default 0), and starts it again
# on the same port, certificates and etcd (so every object survives); the
# command returns once the cluster is ready again, and fails if it is not
# running. The other processes keep running and reconnect. Each call restarts
# it once more; a cluster that is not running is an error, not started.
#
# The processes run under one supervisor (this script, `_supervise`), in a
# session of their own: when any of them dies (other than by
# restart-apiserver) the supervisor ends the others,
# and `stop` ends the supervisor, which ends and reaps them. The supervisor
# itself is the child of whoever reaps orphans (a caller that is a child
# subreaper, such as tools/kube's test, reaps it; otherwise pid 1).
#
# Environment:
#   TETHER_KUBE_DIR   state folder (default .data/kube, or .data/kube-NAME, in
#                     the project, git-ignored): kubeconfig, certificates,
#                     etcd's data, logs (*.log), the port in use (port)
#   TETHER_KUBE_PORT  the API server's port (default 30443, or NAME's derived
#                     port); etcd uses the next two ports, kwok's kubelet
#                     server the one after. A port another program holds is
#                     an error, except in CI (below)
#   CI                when `true` and TETHER_KUBE_PORT is unset, a derived
#                     port another program holds is not an error: the cluster
#                     takes the next free block of four ports above it (and
#                     env, status and the kubeconfig name the port it uses)
#   TETHER_KUBE_START_TIMEOUT  seconds `start` (and restart-apiserver) waits
#                     for readiness (default 90)
#   TETHER_KUBE_DOWN_SECONDS   how long restart-apiserver keeps it down (default 0)
set -euo pipefail

prog=scripts/kube.sh
log() { printf '%s: %s\n' "$prog" "$*" >&2; }
die() {
	printf '%s: error: %s\n' "$prog" "$*" >&2
	exit 1
}
usage() {
	sed -n '4,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

project_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
self=$project_root/scripts/kube.sh
tools=$project_root/tools/kube
kwok_version=v0.8.0
binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)

# --- the command line, the cluster's name, state folder and ports -----------------

[[ $# -ge 1 ]] || usage
cmd=$1
name=${2:-default}
case $cmd in
_supervise)
	[[ $# -eq 2 && -n ${bindir:-} && -n ${TETHER_KUBE_PORT:-} ]] || die "_supervise is internal to $prog"
	name=default # the state folder and TETHER_KUBE_PORT say which cluster
	;;
start | stop | env | status) [[ $# -le 2 ]] || usage ;;
restart-apiserver)
	[[ $# -eq 2 ]] || usage
	[[ $name != default ]] || die "restart-apiserver needs the NAME of a cluster of your own: the default cluster is shared"
	;;
*) usage ;;
esac
[[ $name =~ ^[a-z0-9][a-z0-9-]{0,31}$ ]] || die "NAME '$name' is not a short word of a-z, 0-9 and -"

# port_for NAME: the default cluster's base port, or one derived from NAME:
# 31000-32596, a multiple of 4 above 31000, so that the blocks of four ports
# of two names never overlap. They lie below Linux's ephemeral ports
# (32768-60999 by default), so that no outgoing connection of this machine
# (one of the cluster's own, starting at the same moment) can hold one of
# them as its local port when a process of the cluster binds it.
port_for() {
	if [[ $1 == default ]]; then
		echo 30443
		return
	fi
	local sum
	sum=$(printf '%s' "$1" | cksum | cut -d' ' -f1)
	echo $((31000 + 4 * (sum % 400)))
}

if [[ $cmd == _supervise ]]; then
	state=$2
elif [[ $name == default ]]; then
	state=${TETHER_KUBE_DIR:-$project_root/.data/kube}
else
	state=${TETHER_KUBE_DIR:-$project_root/.data/kube-$name}
fi
port_derived=true
[[ -n ${TETHER_KUBE_PORT:-} ]] && port_derived=false
port=${TETHER_KUBE_PORT:-$(port_for "$name")}
timeout=${TETHER_KUBE_START_TIMEOUT:-90}
[[ $timeout =~ ^[0-9]+$ ]] || die "TETHER_KUBE_START_TIMEOUT='$timeout' is not a number of seconds"
down_seconds=${TETHER_KUBE_DOWN_SECONDS:-0}
[[ $down_seconds =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "TETHER_KUBE_DOWN_SECONDS='$down_seconds' is not a number of seconds"
kubeconfig=$state/kubeconfig

# set_port PORT: the API server's port, and the ports derived from it.
set_port() {
	port=$1
	# shellcheck disable=SC2015 # die if either test fails
	[[ $port =~ ^[0-9]+$ ]] && ((port >= 1024 && port <= 65532)) ||
		die "TETHER_KUBE_PORT='$port' is not a port number in 1024-65532"
	etcd_port=$((port + 1))
	etcd_peer_port=$((port + 2))
	kwok_port=$((port + 3))
	server=https://127.0.0.1:$port
}
set_port "$port"

export GOTOOLCHAIN=local

# --- the binaries -----------------------------------------------------------------

# cache_key: a hash of everything the binaries are built from.
cache_key() {
	{
		go version
		echo "kwok $kwok_version"
		cat "$tools/go.sum"
		cat "$tools"/cmd/*/main.go
	} | sha256sum | cut -c1-16
}

# ensure_binaries: set bindir to a folder holding the five binaries and kwok's
# stock stages, building them on a cold machine.
ensure_binaries() {
	command -v go >/dev/null 2>&1 || die "go not found in PATH (the control plane is built from Go modules)"
	local cache=${XDG_CACHE_HOME:-$HOME/.cache}/tether/kube key tmp b ok=true
	key=$(cache_key)
	bindir=$cache/$key
	for b in "${binaries[@]}"; do [[ -x $bindir/$b ]] || ok=false; done
	[[ -d $bindir/stages ]] || ok=false
	$ok && return 0
	mkdir -p "$cache"
	# One build at a time per cache; a second caller waits, then finds it.
	exec 8>"$cache/build.lock"
	flock 8
	ok=true
	for b in "${binaries[@]}"; do [[ -x $bindir/$b ]] || ok=false; done
	[[ -d $bindir/stages ]] || ok=false
	if ! $ok; then
		log "building the control plane into $bindir (cold: about 10 minutes, 4.5 GB of memory)"
		tmp=$bindir.tmp.$$
		rm -rf "$tmp"
		mkdir -p "$tmp/stages"
		(cd "$tools" && go build -trimpath -o "$tmp/" ./cmd/...) >&2 ||
			die "building etcd and Kubernetes from tools/kube failed (see above)"
		GOBIN=$tmp go install "sigs.k8s.io/kwok/cmd/kwok@$kwok_version" >&2 ||
			die "go install sigs.k8s.io/kwok/cmd/kwok@$kwok_version failed (see above)"
		# kwok's stock Stages live in its module, not in its binary.
		local kwok_dir
		kwok_dir=$(go mod download -json "sigs.k8s.io/kwok@$kwok_version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
		[[ -d $kwok_dir/kustomize/stage ]] || die "kwok's module has no kustomize/stage folder ($kwok_dir)"
		cp "$kwok_dir/kustomize/stage/node/fast/node-initialize.yaml" \
			"$kwok_dir/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml" \
			"$kwok_dir/kustomize/stage/pod/fast/pod-ready.yaml" \
			"$kwok_dir/kustomize/stage/pod/fast/pod-complete.yaml" "$tmp/stages/"
		rm -rf "$bindir"
		mv "$tmp" "$bindir"
	fi
	exec 8>&-
}

# --- is it running? ---------------------------------------------------------------

# supervisor_pid: print the live supervisor's pid, or fail. The pid file can
# outlive a crash and its pid be reused: the process must be this script's
# supervisor of this state folder, and not a zombie.
supervisor_pid() {
	local pid
	pid=$(cat "$state/supervisor.pid" 2>/dev/null || true)
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	alive "$pid" || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "_supervise $state" || return 1
	echo "$pid"
}

# alive PID: the process exists and is not a zombie.
alive() {
	[[ -r /proc/$1/status ]] || return 1
	! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null
}

port_busy() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# api PATH: GET PATH from the API server as tether-admin; prints the body.
api() {
	curl -fsS --max-time 5 --cacert "$state/ca.crt" -H "Authorization: Bearer $(cat "$state/admin.token")" "$server$1"
}

# ready: the API server is ready, a kwok node is Ready, and the default
# namespace's service account exists (the controllers are working).
ready() {
	[[ $(api /readyz 2>/dev/null) == ok ]] || return 1
	api /api/v1/nodes/kwok-node-0 2>/dev/null | tr -d ' \n' | grep -q '"type":"Ready","status":"True"' || return 1
	api /api/v1/namespaces/default/serviceaccounts/default >/dev/null 2>&1
}

print_kubeconfig() {
	if [[ ${cmd:-} == env ]]; then
		printf "export KUBECONFIG='%s'\n" "${kubeconfig//\'/\'\\\'\'}"
	else
		printf '%s\n' "$kubeconfig"
	fi
}

# --- setting up a fresh state folder ---------------------------------------------

# fresh_state: new certificates, tokens, kubeconfigs and kwok's config; no data.
fresh_state() {
	command -v openssl >/dev/null 2>&1 || die "openssl not found (it makes the cluster's certificates)"
	command -v curl >/dev/null 2>&1 || die "curl not found (it checks the cluster's readiness)"
	rm -rf "$state/etcd" "$state/exec" "$state"/*.log
	mkdir -p "$state/exec"
	chmod 700 "$state"
	(
		cd "$state"
		openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj /CN=tether-test-ca \
			-keyout ca.key -out ca.crt 2>/dev/null
		openssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver \
			-keyout server.key -out server.csr 2>/dev/null
		printf '%s\n' 'subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kwok-node-0' \
			'extendedKeyUsage=serverAuth' >server.ext
		openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
			-extfile server.ext -out server.crt 2>/dev/null
		openssl genrsa -out sa.key 2048 2>/dev/null
		openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
		rm -f server.csr server.ext ca.srl
	) || die "openssl could not make the cluster's certificates"
	# One static token per client; all of them cluster administrators (a
	# throwaway cluster on loopback).
	local who
	: >"$state/tokens.csv"
	for who in admin kube-controller-manager kube-scheduler kwok; do
		head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$state/$who.token"
		printf '%s,tether-%s,tether-%s,"system:masters"\n' "$(cat "$state/$who.token")" "$who" "$who" >>"$state/tokens.csv"
		write_kubeconfig "$state/$who.kubeconfig" "$(cat "$state/$who.token")"
	done
	chmod 600 "$state"/*.token "$state"/*.kubeconfig "$state/tokens.csv" "$state"/*.key
	mv "$state/admin.kubeconfig" "$kubeconfig"
	write_kwok_config
}

# write_kubeconfig FILE TOKEN
write_kubeconfig() {
	cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: tether-test
  cluster:
    server: $server
    certificate-authority: $state/ca.crt
users:
- name: tether-admin
  user:
    token: $2
contexts:
- name: tether-test
  context:
    cluster: tether-test
    user: tether-admin
    namespace: default
current-context: tether-test
EOF
}

# write_kwok_config: kwok's options, kwok's stock node and pod Stages, the
# project's own Stages (tools/kube/stages) and a ClusterExec for every
# namespace.
write_kwok_config() {
	{
		cat <<EOF
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  manageAllNodes: true
  nodeIP: 127.0.0.1
  nodePort: $kwok_port
  serverAddress: 127.0.0.1:$kwok_port
  enableDebuggingHandlers: true
  tlsCertFile: $state/server.crt
  tlsPrivateKeyFile: $state/server.key
  cidr: 10.0.0.1/24
  podPlayStageParallelism: 16
  nodePlayStageParallelism: 4
  nodeLeaseParallelism: 4
  nodeLeaseDurationSeconds: 40
  podsOnNodeSyncParallelism: 4
  enablePodsOnNodeSyncListPager: true
  enablePodsOnNodeSyncStreamWatch: true
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterExec
metadata:
  name: local
spec:
  execs:
  - local:
      workDir: $state/exec
      envs:
      - name: PATH
        value: /usr/local/bin:/usr/bin:/bin
      - name: HOME
        value: $state/exec
EOF
		local f
		for f in "$bindir"/stages/*.yaml "$tools"/stages/*.yaml; do
			echo ---
			cat "$f"
		done
	} >"$state/kwok.yaml"
}

# --- the supervisor ---------------------------------------------------------------

# supervise: run the five processes as children; when one ends, or on
# SIGTERM, end the others and reap them all. SIGUSR1 (restart-apiserver)
# kills the API server alone and starts it again.
supervise() {
	local pids=() names=() b=$bindir apiserver=1
	echo $$ >"$state/supervisor.pid"
	rm -f "$state/restart-apiserver"
	run() {
		local name=$1
		shift
		"$@" </dev/null >>"$state/$name.log" 2>&1 &
		pids+=($!)
		names+=("$name")
	}
	shutdown() {
		trap - TERM INT USR1
		local i p
		for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null || true; done
		for ((i = 0; i < 100; i++)); do
			local left=false
			for p in "${pids[@]}"; do alive "$p" && left=true; done
			$left || break
			sleep 0.1
		done
		for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
		wait 2>/dev/null || true
		rm -f "$state/supervisor.pid"
		exit 0
	}
	local api_args=(--etcd-servers "http://127.0.0.1:$etcd_port"
		--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$port"
		--tls-cert-file "$state/server.crt" --tls-private-key-file "$state/server.key"
		--client-ca-file "$state/ca.crt" --token-auth-file "$state/tokens.csv"
		--service-account-issuer https://kubernetes.default.svc
		--service-account-key-file "$state/sa.pub" --service-account-signing-key-file "$state/sa.key"
		--service-cluster-ip-range 10.96.0.0/16 --authorization-mode Node,RBAC
		--kubelet-preferred-address-types InternalIP --endpoint-reconciler-type none --profiling=false)
	# restart_apiserver: take the request (its file holds the down time),
	# SIGKILL the API server, wait, start it again in its place.
	restart_apiserver() {
		local old=${pids[apiserver]} down
		down=$(cat "$state/restart-apiserver" 2>/dev/null || true)
		rm -f "$state/restart-apiserver"
		kill -KILL "$old" 2>/dev/null || true
		wait "$old" 2>/dev/null || true
		echo "supervisor: kube-apiserver $old killed (restart-apiserver); down for ${down:-0}s" >>"$state/supervisor.log"
		sleep "${down:-0}"
		"$b/kube-apiserver" "${api_args[@]}" </dev/null >>"$state/kube-apiserver.log" 2>&1 &
		pids[apiserver]=$!
		echo "${pids[apiserver]}" >"$state/kube-apiserver.pid"
	}
	trap shutdown TERM INT
	# restart-apiserver's signal only wakes the wait below; the request is
	# its file.
	trap : USR1
	run etcd "$b/etcd" --name default --data-dir "$state/etcd" \
		--listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
		--listen-peer-urls "http://127.0.0.1:$etcd_peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
		--initial-cluster "default=http://127.0.0.1:$etcd_peer_port" --unsafe-no-fsync
	run kube-apiserver "$b/kube-apiserver" "${api_args[@]}"
	echo "${pids[apiserver]}" >"$state/kube-apiserver.pid"
	run kube-controller-manager "$b/kube-controller-manager" --kubeconfig "$state/kube-controller-manager.kubeconfig" \
		--controllers='*' --leader-elect=false --bind-address 127.0.0.1 --secure-port 0 \
		--service-account-private-key-file "$state/sa.key" --root-ca-file "$state/ca.crt" --profiling=false
	run kube-scheduler "$b/kube-scheduler" --kubeconfig "$state/kube-scheduler.kubeconfig" \
		--leader-elect=false --bind-address 127.0.0.1 --secure-port 0 --profiling=false
	# kwok runs the commands of `pods/exec`: it gets an environment of its
	# own, not the caller's.
	run kwok env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$state/exec" \
		"$b/kwok" --kubeconfig "$state/kwok.kubeconfig" --config "$state/kwok.yaml"
	local ended p
	while :; do
		if [[ -e $state/restart-apiserver ]]; then
			restart_apiserver
			continue
		fi
		# A trapped signal (USR1) ends the wait early; so does a child's end.
		wait -n || true
		[[ -e $state/restart-apiserver ]] && continue
		ended=-1
		for p in "${!pids[@]}"; do
			if ! alive "${pids[p]}"; then
				ended=$p
				break
			fi
		done
		((ended >= 0)) && break
	done
	echo "supervisor: ${names[ended]} ended; stopping the others" >>"$state/supervisor.log"
	shutdown
}

# --- commands ---------------------------------------------------------------------

# create_node: the one kwok node.
create_node() {
	local body
	body='{"apiVersion":"v1","kind":"Node","metadata":{"name":"kwok-node-0",
"annotations":{"node.alpha.kubernetes.io/ttl":"0","kwok.x-k8s.io/node":"fake"},
"labels":{"kubernetes.io/hostname":"kwok-node-0","kubernetes.io/os":"linux","kubernetes.io/arch":"amd64","type":"kwok"}},
"status":{"allocatable":{"cpu":"32","memory":"256Gi","ephemeral-storage":"1Ti","pods":"110"},
"capacity":{"cpu":"32","memory":"256Gi","ephemeral-storage":"1Ti","pods":"110"}}}'
	curl -fsS --max-time 5 --cacert "$state/ca.crt" -H "Authorization: Bearer $(cat "$state/admin.token")" \
		-H 'Content-Type: application/json' -X POST --data "$body" "$server/api/v1/nodes" >/dev/null
}

# failed_start WHY: show the logs' tails, stop everything, fail.
failed_start() {
	local f
	for f in "$state"/*.log; do
		[[ -s $f ]] || continue
		printf '%s: --- last lines of %s ---\n' "$prog" "$f" >&2
		tail -n 15 "$f" >&2
	done
	stop_cluster
	die "$1"
}

# choose_port: for a new cluster, a base port whose four ports are free:
# the one asked for, or in CI the next free block above a derived one.
choose_port() {
	local p tries=0
	while :; do
		local busy=''
		for p in "$port" "$etcd_port" "$etcd_peer_port" "$kwok_port"; do
			port_busy "$p" && busy=$p && break
		done
		[[ -z $busy ]] && return 0
		if ! $port_derived || [[ ${CI:-} != true ]] || ((++tries > 50)); then
			die "port $busy on 127.0.0.1 is in use by another program; set TETHER_KUBE_PORT to another base port"
		fi
		log "port $busy is in use; CI=true: trying $((port + 4))"
		set_port $((port + 4))
	done
}

start_cluster() {
	if supervisor_pid >/dev/null && ready; then
		log "control plane already running on $server"
		return 0
	fi
	if supervisor_pid >/dev/null; then
		log "a control plane is running but not ready; restarting it"
		stop_cluster
	fi
	ensure_binaries
	choose_port
	fresh_state
	echo "$port" >"$state/port"
	log "starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok on 127.0.0.1:$port"
	TETHER_KUBE_PORT=$port bindir=$bindir setsid "$self" _supervise "$state" </dev/null >>"$state/supervisor.log" 2>&1 9>&- 8>&- &
	echo $! >"$state/supervisor.pid"
	wait_ready || failed_start "the control plane was not ready within ${timeout}s (logs in $state)"
	log "control plane ready on $server"
}

# wait_ready: wait until the control plane is ready (making the node once
# the API server answers), or fail.
wait_ready() {
	local deadline=$((SECONDS + timeout)) node=false
	while ((SECONDS < deadline)); do
		supervisor_pid >/dev/null || failed_start "the control plane stopped while starting (logs in $state)"
		if ! $node && [[ $(api /readyz 2>/dev/null) == ok ]]; then
			if api /api/v1/nodes/kwok-node-0 >/dev/null 2>&1 || create_node 2>/dev/null; then
				node=true
			fi
		fi
		$node && ready && return 0
		sleep 0.2
	done
	ready
}

# restart_apiserver: ask the supervisor to restart the API server (a file
# with the down time, then SIGUSR1, repeated until it is taken), wait for
# the new process, then for the cluster to be ready.
restart_apiserver() {
	local pid old i
	pid=$(supervisor_pid) || die "cluster $name is not running (scripts/kube.sh start $name)"
	old=$(cat "$state/kube-apiserver.pid" 2>/dev/null || true)
	echo "$down_seconds" >"$state/restart-apiserver"
	for ((i = 0; ; i++)); do
		kill -USR1 "$pid" 2>/dev/null || true
		sleep 0.2
		[[ ! -e $state/restart-apiserver && $(cat "$state/kube-apiserver.pid" 2>/dev/null) != "$old" ]] && break
		alive "$pid" || die "the supervisor of cluster $name ended (logs in $state)"
		((i < 50 + ${down_seconds%.*} * 5)) || die "the supervisor of cluster $name did not restart its API server"
	done
	log "kube-apiserver of $name restarted (pid $(cat "$state/kube-apiserver.pid")); waiting for readiness"
	local deadline=$((SECONDS + timeout))
	until ready; do
		((SECONDS < deadline)) || die "cluster $name was not ready within ${timeout}s of its API server's restart (logs in $state)"
		supervisor_pid >/dev/null || die "cluster $name stopped while its API server restarted (logs in $state)"
		sleep 0.2
	done
	log "cluster $name ready on $server"
}

stop_cluster() {
	local pid i
	pid=$(supervisor_pid) || {
		log "control plane not running"
		return 0
	}
	kill -TERM "$pid"
	for ((i = 0; i < 150; i++)); do
		alive "$pid" || break
		sleep 0.1
	done
	if alive "$pid"; then
		log "supervisor $pid did not stop within 15s; killing its session"
		kill -KILL -- "-$pid" 2>/dev/null || true
	fi
	rm -f "$state/supervisor.pid"
	log "control plane stopped"
}

if [[ $cmd == _supervise ]]; then
	supervise
	exit 0
fi

mkdir -p "$state"
exec 9>"$state/lock"
flock 9
# A running cluster keeps the port it started on.
if supervisor_pid >/dev/null && [[ -r $state/port ]]; then
	set_port "$(cat "$state/port")"
fi
case $cmd in
start)
	start_cluster
	print_kubeconfig
	;;
stop) stop_cluster ;;
restart-apiserver) restart_apiserver ;;
env) print_kubeconfig ;;
status)
	if supervisor_pid >/dev/null && ready; then
		echo "running on $server (kubeconfig $kubeconfig)"
	else
		echo "not running"
		exit 1
	fi
	;;
esac
