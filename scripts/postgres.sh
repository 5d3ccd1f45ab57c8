#!/usr/bin/env bash
# scripts/postgres.sh — a throwaway PostgreSQL for Tether's development and tests.
#
# Usage:
#   scripts/postgres.sh start     NAME  start (or reuse) cluster NAME; print Tether's URL
#   scripts/postgres.sh stop      NAME  stop cluster NAME (its data is kept)
#   scripts/postgres.sh url       NAME  print Tether's URL of cluster NAME
#   scripts/postgres.sh admin-url NAME  print the superuser's URL (tests make databases with it)
#   scripts/postgres.sh env       NAME  print `export DATABASE_URL=...` for eval
#   scripts/postgres.sh status    NAME  say whether cluster NAME is running
#   scripts/postgres.sh destroy   NAME  stop cluster NAME and delete its data (tests' clusters of one run)
#
# NAME is a short word such as `dev` or `test`. Each NAME is its own cluster:
#   - data in the project-local folder .data/NAME (git-ignored); when this
#     script runs as root and the `postgres` user cannot reach the project
#     folder, in /tmp/tether-pg-<uid>-NAME-<hash of the project path> instead;
#   - listening on 127.0.0.1 only (unless TETHER_PG_LISTEN_EXTRA adds
#     addresses), on a port fixed per NAME (dev 55432,
#     test 55433, any other name a port in 55500-55999 derived from it), or on
#     TETHER_PG_PORT when set (a port held by another program is an error,
#     except in CI: see below); its unix socket lives inside the data folder;
#   - trust authentication on 127.0.0.1 only (and TETHER_PG_TRUST_CIDR's
#     networks, if set); superuser `postgres`; a role
#     `tether` that is not a superuser (no CREATEDB, no CREATEROLE) and owns
#     the database `tether`: Tether connects as that role, so a leaked URL
#     gives its own schema and nothing else of the server;
#   - for `test`, fsync and synchronous commits off: fast, and fine to lose;
#   - for `bench`, pg_stat_statements preloaded (when installed).
#
# The URL (postgres://tether@127.0.0.1:PORT/tether?sslmode=disable) is always
# the LAST line of stdout, and the only thing printed there; progress and
# errors go to stderr. So `DATABASE_URL=$(scripts/postgres.sh start test)`
# works, and so does `eval "$(scripts/postgres.sh env dev)"`. `admin-url`
# prints the superuser's URL (database `postgres`), which the tests use to
# make a database per test, owned by `tether`.
#
# If DATABASE_URL is already set, `start`, `url` and `env` do nothing but
# print it: the caller brought its own database. `stop`, `status`,
# `destroy` and `admin-url` ignore DATABASE_URL and always act on the local
# cluster NAME.
#
# Never uses, and never needs, the system's own PostgreSQL cluster (port 5432).
#
# Environment:
#   DATABASE_URL     if set, used as is (see above)
#   TETHER_PG_PORT   port to listen on, instead of the one derived from NAME
#   CI               when `true` and TETHER_PG_PORT is unset, a derived port
#                    that another program holds is not an error: the cluster
#                    takes the next free port from 1000 above it (and `url`
#                    reports the port the cluster actually uses)
#   TETHER_PG_BIN    folder holding initdb and pg_ctl, instead of searching
#   TETHER_PG_STOP_MODE  pg_ctl's shutdown mode for `stop`: fast (default),
#                    or immediate, which is a crash: the server stops without
#                    a checkpoint and replays its WAL at the next start
#   TETHER_PG_LISTEN_EXTRA  addresses to listen on besides 127.0.0.1,
#                    comma-separated, on the same port (for `start`). The
#                    tests' simulated hosts (test/harness/hosts.go) live in
#                    network namespaces of their own and reach the cluster on
#                    their bridge's address. Each address must exist when the
#                    cluster starts; a running cluster that lacks one is an
#                    error (stop it first). Give it at every start.
#   TETHER_PG_TRUST_CIDR  networks, comma-separated (10.200.7.0/24), whose
#                    clients are trusted like 127.0.0.1's: no password (for
#                    `start`). Only for test networks that exist on this
#                    machine alone, such as the simulated hosts' bridge.
set -euo pipefail

# --- small helpers ----------------------------------------------------------

prog=scripts/postgres.sh
log() { printf '%s: %s\n' "$prog" "$*" >&2; }
die() {
	printf '%s: error: %s\n' "$prog" "$*" >&2
	exit 1
}
usage() {
	sed -n '3,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

[[ $# -eq 2 ]] || usage
cmd=$1
name=$2
[[ $name =~ ^[a-z0-9][a-z0-9_-]{0,30}$ ]] ||
	die "cluster name '$name' must be a short lower-case word such as dev or test"
case $cmd in start | stop | url | admin-url | env | status | destroy) ;; *) usage ;; esac

# The project root is the folder above this script, whatever the caller's cwd.
project_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)

# Connection and client settings from the caller's environment must not
# leak into the commands below (they would point psql at another server).
unset PGHOST PGHOSTADDR PGPORT PGUSER PGDATABASE PGSERVICE PGSERVICEFILE PGOPTIONS PGPASSWORD PGSSLMODE

# --- port and URL -------------------------------------------------------------

# port_for NAME: dev and test have fixed ports; anything else gets a stable
# port in 55500-55999 from a checksum of its name.
port_for() {
	case $1 in
	dev) echo 55432 ;;
	test) echo 55433 ;;
	*)
		local sum
		sum=$(printf '%s' "$1" | cksum | cut -d' ' -f1)
		echo $((55500 + sum % 500))
		;;
	esac
}

port=${TETHER_PG_PORT:-$(port_for "$name")}
# shellcheck disable=SC2015 # die if either test fails
[[ $port =~ ^[0-9]+$ ]] && ((port >= 1024 && port <= 65535)) ||
	die "TETHER_PG_PORT='$port' is not a port number in 1024-65535"
# Extra addresses to listen on, and networks to trust (see the header).
listen_extra=${TETHER_PG_LISTEN_EXTRA:-}
trust_cidr=${TETHER_PG_TRUST_CIDR:-}
[[ -z $listen_extra || $listen_extra =~ ^[0-9a-fA-F.:]+(,[0-9a-fA-F.:]+)*$ ]] ||
	die "TETHER_PG_LISTEN_EXTRA='$listen_extra' is not a comma-separated list of IP addresses"
[[ -z $trust_cidr || $trust_cidr =~ ^[0-9a-fA-F.:]+/[0-9]+(,[0-9a-fA-F.:]+/[0-9]+)*$ ]] ||
	die "TETHER_PG_TRUST_CIDR='$trust_cidr' is not a comma-separated list of networks (such as 10.200.7.0/24)"
listen_addresses=127.0.0.1${listen_extra:+,$listen_extra}
# app_role is the role Tether connects as: it owns the database `tether`
# and nothing more.
app_role=tether
url_for() { echo "postgres://$app_role@127.0.0.1:$1/tether?sslmode=disable"; }
admin_url_for() { echo "postgres://postgres@127.0.0.1:$1/postgres?sslmode=disable"; }
url=$(url_for "$port")

# print_url prints the URL as the last (and only) line of stdout.
print_url() {
	if [[ $cmd == env ]]; then
		printf "export DATABASE_URL='%s'\n" "${1//\'/\'\\\'\'}"
	else
		printf '%s\n' "$1"
	fi
}

# A caller that brought its own database gets it back untouched.
if [[ $cmd == start || $cmd == url || $cmd == env ]] && [[ -n ${DATABASE_URL:-} ]]; then
	[[ $cmd == start ]] && log "DATABASE_URL is set; using it, not starting a local cluster"
	print_url "$DATABASE_URL"
	exit 0
fi

# --- who runs the server ------------------------------------------------------

# PostgreSQL refuses to run as root. As root we run initdb, pg_ctl and the
# server as the `postgres` system user; otherwise as ourselves.
is_root=false
[[ $(id -u) -eq 0 ]] && is_root=true
pg_user=postgres

# as_pg CMD ARGS...: run a command as the user that owns the cluster. As
# root it runs from / so that PostgreSQL's tools do not trip over a current
# folder the postgres user may not enter (such as /root); every path we pass
# is absolute. File descriptor 9 holds our lock (see the end of this file):
# it is closed for the command, or the server started through it would
# inherit the lock and hold it for as long as it runs.
as_pg() {
	if ! $is_root; then
		"$@" 9>&-
	elif command -v runuser >/dev/null 2>&1; then
		(cd / && runuser -u "$pg_user" -- "$@") 9>&-
	else
		# su runs a shell; pass the command as positional arguments so that
		# nothing in it is re-parsed.
		(cd / && su -s /bin/sh "$pg_user" -c 'exec "$@"' -- sh "$@") 9>&-
	fi
}

# --- finding (or installing) the PostgreSQL binaries ----------------------------

# pg_bin_version DIR: major version of the binaries in DIR (e.g. 15).
pg_bin_version() {
	"$1/pg_ctl" --version 2>/dev/null | sed -n 's/^pg_ctl (PostgreSQL) \([0-9]*\).*/\1/p'
}

# find_bindir [MAJOR]: print a folder holding initdb and pg_ctl. With MAJOR,
# only binaries of that major version qualify. Order: TETHER_PG_BIN, PATH,
# then the distributions' versioned folders, newest version first.
find_bindir() {
	local want=${1:-} candidates=() d
	[[ -n ${TETHER_PG_BIN:-} ]] && candidates+=("$TETHER_PG_BIN")
	if command -v initdb >/dev/null 2>&1; then
		candidates+=("$(dirname "$(readlink -f "$(command -v initdb)")")")
	fi
	# Debian/Ubuntu, RHEL/PGDG and Homebrew lay out versioned folders.
	while IFS= read -r d; do
		candidates+=("$d")
	done < <(
		{ ls -d /usr/lib/postgresql/*/bin /usr/pgsql-*/bin /opt/homebrew/opt/postgresql@*/bin \
			/usr/local/opt/postgresql@*/bin 2>/dev/null || true; } | sort -t/ -k4 -V -r
	)
	for d in "${candidates[@]}"; do
		[[ -x $d/initdb && -x $d/pg_ctl ]] || continue
		if [[ -z $want || $(pg_bin_version "$d") == "$want" ]]; then
			echo "$d"
			return 0
		fi
	done
	return 1
}

# install_postgres: as root on a Debian-like system, install the server.
# (On Debian this also creates and may start a system cluster on port 5432;
# we neither use nor need it.)
install_postgres() {
	if ! $is_root || ! command -v apt-get >/dev/null 2>&1; then
		die "PostgreSQL server binaries (initdb, pg_ctl) not found in PATH or /usr/lib/postgresql/*/bin.
  Install PostgreSQL (Debian/Ubuntu: sudo apt-get install postgresql), or set
  TETHER_PG_BIN to the folder holding initdb, or set DATABASE_URL to a server you run."
	fi
	log "PostgreSQL not found; installing it with apt-get (this takes a minute)"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update >&2 || log "apt-get update failed; trying with the package lists we have"
	apt-get install -y --no-install-recommends postgresql >&2 </dev/null ||
		die "apt-get install postgresql failed"
}

# --- where the data lives -------------------------------------------------------

# The per-user, per-project fallback folder under /tmp.
tmp_datadir() {
	local hash
	if command -v sha256sum >/dev/null 2>&1; then
		hash=$(printf '%s' "$project_root" | sha256sum | cut -c1-10)
	else
		hash=$(printf '%s' "$project_root" | cksum | cut -d' ' -f1)
	fi
	echo "/tmp/tether-pg-$(id -u)-${name}-${hash}"
}

# choose_datadir: .data/NAME, unless we are root and the postgres user cannot
# get into the project folder (e.g. it lives under /root, mode 700).
choose_datadir() {
	local dir=$project_root/.data/$name
	# shellcheck disable=SC2016 # $1 is expanded by the inner sh
	if $is_root && id "$pg_user" >/dev/null 2>&1 &&
		! as_pg sh -c 'cd "$1"' sh "$project_root" 2>/dev/null; then
		local alt
		alt=$(tmp_datadir)
		log "user $pg_user cannot enter $project_root; keeping cluster '$name' in $alt instead"
		dir=$alt
	fi
	echo "$dir"
}

# --- is our cluster running? ------------------------------------------------------

# running_pid DATADIR: print the PID of the postmaster that serves DATADIR and
# succeed, or fail if none does. postmaster.pid can outlive a crash (kill -9,
# power loss, a container restart), and its PID may since have been reused by
# an unrelated process, so a live PID alone is not proof: the process must
# also be a postgres whose working directory is DATADIR (the postmaster
# chdirs into its data directory).
running_pid() {
	local dir=$1 pid
	[[ -f $dir/postmaster.pid ]] || return 1
	pid=$(head -n1 "$dir/postmaster.pid" 2>/dev/null || true)
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	kill -0 "$pid" 2>/dev/null || return 1
	if [[ -d /proc/$pid ]]; then
		local cwd
		cwd=$(readlink "/proc/$pid/cwd" 2>/dev/null || true)
		# An unreadable cwd (another user's process, when not root) is not
		# proof of staleness; fall back to the process name.
		if [[ -n $cwd ]]; then
			[[ $cwd == "$(cd "$dir" && pwd -P)" ]] || return 1
		else
			grep -qa postgres "/proc/$pid/cmdline" 2>/dev/null || return 1
		fi
	else
		ps -p "$pid" -o comm= 2>/dev/null | grep -q postgres || return 1
	fi
	echo "$pid"
}

# running_port DATADIR: the port a running postmaster listens on (line 4 of
# postmaster.pid).
running_port() {
	sed -n 4p "$1/postmaster.pid" 2>/dev/null || true
}

# port_busy PORT: does anything accept TCP connections on 127.0.0.1:PORT?
port_busy() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# leftover_pids DATADIR: live processes (not zombies) whose working folder is
# DATADIR: the children of a postmaster that was killed, which exit on their
# own within moments. Only visible through /proc; elsewhere prints nothing.
leftover_pids() {
	local real p
	real=$(cd "$1" 2>/dev/null && pwd -P) || return 0
	for p in /proc/[0-9]*; do
		[[ $(readlink "$p/cwd" 2>/dev/null) == "$real" ]] || continue
		grep -q '^State:[[:space:]]*Z' "$p/status" 2>/dev/null && continue
		echo "${p#/proc/}"
	done
}

# port_owner PORT: best effort " (name, pid N[, ...])" of the program listening
# on PORT, naming its data folder when it is another PostgreSQL, such as the
# cluster of another checkout of this project. Prints nothing if unknown.
port_owner() {
	command -v ss >/dev/null 2>&1 || return 0
	local line pname pid cwd
	line=$(ss -ltnpH "sport = :$1" 2>/dev/null | head -n1)
	pname=$(sed -n 's/.*users:(("\([^"]*\)".*/\1/p' <<<"$line")
	pid=$(sed -n 's/.*pid=\([0-9]*\).*/\1/p' <<<"$line")
	[[ -n $pname && -n $pid ]] || return 0
	cwd=$(readlink "/proc/$pid/cwd" 2>/dev/null || true)
	if [[ $pname == postgres* && -n $cwd ]]; then
		printf ' (%s, pid %s, data folder %s)' "$pname" "$pid" "$cwd"
	else
		printf ' (%s, pid %s)' "$pname" "$pid"
	fi
}

# remove_stale_locks DATADIR: after a crash, postmaster.pid and the socket
# lock file may remain. Called only when running_pid found no live server.
# Removing postmaster.pid also removes PostgreSQL's own guard against two
# servers on one data folder, so first wait for the dead server's children.
remove_stale_locks() {
	local dir=$1 f i
	[[ -e $dir/postmaster.pid ]] || return 0
	for ((i = 0; i < 100; i++)); do
		[[ -z $(leftover_pids "$dir") ]] && break
		sleep 0.1
	done
	[[ -z $(leftover_pids "$dir") ]] ||
		die "processes $(leftover_pids "$dir" | xargs) still use $dir but no server owns it; stop them first"
	for f in "$dir/postmaster.pid" "$dir"/.s.PGSQL.*.lock; do
		[[ -e $f ]] || continue
		log "removing stale $(basename "$f") left by a server that is gone"
		rm -f "$f"
	done
	# A stale socket file would make the new server's bind fail.
	rm -f "$dir"/.s.PGSQL.[0-9]* 2>/dev/null || true
}

# pgtool NAME: path of client tool NAME (psql, pg_isready), preferring the
# one beside the server binaries.
pgtool() {
	if [[ -x $bindir/$1 ]]; then
		echo "$bindir/$1"
	else
		command -v "$1" || die "$1 not found (install the PostgreSQL client)"
	fi
}

# wait_accepting: wait until the server accepts connections on our port.
wait_accepting() {
	local i
	for ((i = 0; i < 100; i++)); do
		if "$(pgtool pg_isready)" -q -h 127.0.0.1 -p "$port" -d postgres -U postgres 2>/dev/null; then
			return 0
		fi
		sleep 0.1
	done
	return 1
}

# psql_admin SQL: run SQL as the superuser over TCP (trust auth).
psql_admin() {
	"$(pgtool psql)" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d postgres -Atc "$1"
}

# ensure_app_database: the role `tether` (not a superuser) and the database
# `tether` it owns; created once, kept across restarts. A database made by an
# older version of this script, owned by the superuser, is handed over with
# everything in it.
ensure_app_database() {
	if [[ $(psql_admin "SELECT 1 FROM pg_roles WHERE rolname = '$app_role'") != 1 ]]; then
		log "creating role $app_role (not a superuser)"
		psql_admin "CREATE ROLE $app_role LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE" >&2
	fi
	if [[ $(psql_admin "SELECT 1 FROM pg_database WHERE datname = 'tether'") != 1 ]]; then
		log "creating database tether, owned by $app_role"
		psql_admin "CREATE DATABASE tether OWNER $app_role" >&2
	elif [[ $(psql_admin "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'tether'") != "$app_role" ]]; then
		log "handing database tether and its objects to $app_role"
		psql_admin "ALTER DATABASE tether OWNER TO $app_role" >&2
		# Tables (their indexes and sequences follow) and functions of the
		# public schema; REASSIGN OWNED cannot take a superuser's objects.
		"$(pgtool psql)" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d tether -c "
			DO \$\$ DECLARE r record; BEGIN
			FOR r IN SELECT c.oid::regclass AS o FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
				WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm') LOOP
				EXECUTE format('ALTER TABLE %s OWNER TO $app_role', r.o);
			END LOOP;
			FOR r IN SELECT p.oid::regprocedure AS o FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
				WHERE n.nspname = 'public' LOOP
				EXECUTE format('ALTER FUNCTION %s OWNER TO $app_role', r.o);
			END LOOP;
			END \$\$" >&2 ||
			log "could not hand every object of database tether to $app_role; if Tether cannot migrate, drop the database (throwaway data) and start again"
	fi
}

# --- commands -----------------------------------------------------------------------

# `start` on a machine without PostgreSQL installs it first: installing
# creates the postgres user, which decides where the data can live.
if [[ $cmd == start ]] && ! find_bindir >/dev/null; then
	install_postgres
	find_bindir >/dev/null || die "PostgreSQL installed but initdb/pg_ctl still not found"
fi

datadir=$(choose_datadir)

# url and env: the port of the running cluster (see "CI" in cmd_start), else
# the one derived from NAME.
if [[ $cmd == url || $cmd == env || $cmd == admin-url ]]; then
	if [[ -z ${TETHER_PG_PORT:-} ]] && running_pid "$datadir" >/dev/null; then
		port=$(running_port "$datadir")
		url=$(url_for "$port")
	fi
	[[ $cmd == admin-url ]] && url=$(admin_url_for "$port")
	print_url "$url"
	exit 0
fi
# Cluster operations on the same NAME are serialised, so two `make test`s
# started at once do not both run initdb into the same folder.
lockfile=${datadir%/}.lock

cmd_status() {
	local pid
	if pid=$(running_pid "$datadir"); then
		log "cluster '$name' is running (pid $pid, port $(running_port "$datadir"), data $datadir)"
		return 0
	fi
	log "cluster '$name' is not running (data $datadir)"
	return 3
}

cmd_stop() {
	local pid
	if ! pid=$(running_pid "$datadir"); then
		log "cluster '$name' is not running"
		return 0
	fi
	[[ -n ${bindir:-} ]] || bindir=$(find_bindir "$(cat "$datadir/PG_VERSION" 2>/dev/null)") ||
		bindir=$(find_bindir) || die "pg_ctl not found; kill $pid to stop the server"
	local mode=${TETHER_PG_STOP_MODE:-fast}
	case $mode in fast | immediate) ;; *) die "TETHER_PG_STOP_MODE must be fast or immediate" ;; esac
	log "stopping cluster '$name' (pid $pid, mode $mode)"
	as_pg "$bindir/pg_ctl" -D "$datadir" -m "$mode" -w -t 60 stop >&2
}

# cmd_destroy: stop the cluster (as stop does) and delete its data folder.
cmd_destroy() {
	cmd_stop
	if [[ -d $datadir ]]; then
		log "deleting cluster '$name' ($datadir)"
		rm -rf "$datadir"
	fi
	rm -f "$lockfile"
}

# init_cluster: create a fresh cluster in $datadir.
init_cluster() {
	log "creating cluster '$name' in $datadir ($("$bindir/pg_ctl" --version))"
	rm -rf "$datadir"
	mkdir -p "$(dirname "$datadir")"
	mkdir -m 700 "$datadir"
	$is_root && chown "$pg_user:" "$datadir"
	local out
	if ! out=$(as_pg "$bindir/initdb" -D "$datadir" -U postgres --auth=trust \
		--encoding=UTF8 --locale=C --no-sync 2>&1); then
		printf '%s\n' "$out" >&2
		rm -rf "$datadir"
		die "initdb failed"
	fi
	# Our settings live in their own file, rewritten at every start.
	printf "\n# Added by scripts/postgres.sh\ninclude_if_exists = 'tether.conf'\n" >>"$datadir/postgresql.conf"
}

# write_settings: (re)write $datadir/tether.conf for this start.
write_settings() {
	local sockdir=$datadir
	# A unix socket path is limited to 107 bytes; past that, TCP only.
	if ((${#sockdir} + 20 > 107)); then
		log "data folder path too long for a unix socket; listening on TCP only"
		sockdir=
	fi
	{
		echo "# Written by scripts/postgres.sh at every start; edits are lost."
		echo "port = $port"
		echo "listen_addresses = '$listen_addresses'"
		echo "unix_socket_directories = '${sockdir//\'/\'\'}'"
		echo "max_connections = 200"
		echo "shared_buffers = 128MB"
		if [[ $name == test ]]; then
			# Throwaway data: trade durability for speed.
			echo "fsync = off"
			echo "synchronous_commit = off"
			echo "full_page_writes = off"
		fi
		if [[ $name == bench && -f $bindir/../lib/pg_stat_statements.so ]]; then
			# cmd/bench reads each phase's statements (calls, time, rows,
			# WAL) from pg_stat_statements; its overhead lands on the
			# baselines and on Tether alike.
			echo "shared_preload_libraries = 'pg_stat_statements'"
			echo "pg_stat_statements.max = 1000"
		fi
	} >"$datadir/tether.conf"
	$is_root && chown "$pg_user:" "$datadir/tether.conf"
	write_hba
}

# write_hba: trust TETHER_PG_TRUST_CIDR's networks, in a block of
# pg_hba.conf that this script owns and rewrites at every start (PostgreSQL
# 15 has no include in pg_hba.conf).
write_hba() {
	local hba=$datadir/pg_hba.conf begin='# tether-trust-cidr: begin (scripts/postgres.sh)'
	local end='# tether-trust-cidr: end' cidr
	[[ -f $hba ]] || return 0
	{
		awk -v b="$begin" -v e="$end" '$0 == b { skip = 1 } !skip { print } $0 == e { skip = 0 }' "$hba"
		if [[ -n $trust_cidr ]]; then
			echo "$begin"
			for cidr in ${trust_cidr//,/ }; do
				echo "host all all $cidr trust"
			done
			echo "$end"
		fi
	} >"$hba.tmp"
	mv "$hba.tmp" "$hba"
	$is_root && chown "$pg_user:" "$hba"
	return 0
}

cmd_start() {
	local pid have_version=

	if pid=$(running_pid "$datadir"); then
		# Reuse: it is ours and already up.
		local p
		p=$(running_port "$datadir")
		if [[ $p != "$port" && -z ${TETHER_PG_PORT:-} ]]; then
			# Started on another port (see "CI" below): the cluster is
			# ours, so use it where it is.
			port=$p
			url=$(url_for "$port")
		elif [[ $p != "$port" ]]; then
			die "cluster '$name' is already running on port $p, not $port (TETHER_PG_PORT?).
  Stop it first: $prog stop $name"
		fi
		bindir=$(find_bindir "$(cat "$datadir/PG_VERSION")") || bindir=$(find_bindir) ||
			die "cluster '$name' runs (pid $pid) but no pg_isready/psql found"
		log "reusing running cluster '$name' (pid $pid, data $datadir)"
		if [[ -n $listen_extra ]] &&
			! grep -qxF "listen_addresses = '$listen_addresses'" "$datadir/tether.conf" 2>/dev/null; then
			die "cluster '$name' runs, but not listening on $listen_addresses (TETHER_PG_LISTEN_EXTRA).
  Stop it first: $prog stop $name"
		fi
		if [[ -n $trust_cidr ]]; then
			write_hba
			as_pg "$bindir/pg_ctl" -D "$datadir" reload >&2
		fi
	else
		remove_stale_locks "$datadir"

		# Prefer binaries of the version the cluster was made with.
		[[ -f $datadir/PG_VERSION ]] && have_version=$(cat "$datadir/PG_VERSION")
		if [[ -n $have_version ]] && bindir=$(find_bindir "$have_version"); then
			:
		else
			bindir=$(find_bindir) # installed above if it was missing
		fi
		local version
		version=$(pg_bin_version "$bindir")

		if $is_root && ! id "$pg_user" >/dev/null 2>&1; then
			die "running as root, but there is no '$pg_user' user to run PostgreSQL as.
  Create one (useradd --system $pg_user) or run this script as a normal user."
		fi

		# A cluster that ran before starts again on the port it ran on
		# (tether.conf), which may not be the derived one (see below):
		# clients that knew it, such as replicas across a restart, reconnect.
		local last
		last=$(sed -n 's/^port = \([0-9][0-9]*\)$/\1/p' "$datadir/tether.conf" 2>/dev/null || true)
		if [[ -z ${TETHER_PG_PORT:-} && -n $last ]]; then
			port=$last
			url=$(url_for "$port")
		fi

		# Something else on our port. In CI (CI=true), when no port was
		# asked for, nobody types the URL by hand, and the port may be held
		# by a cluster that a developer's checkout on the same machine left
		# running: take a free port instead, and say so. Anywhere else, say
		# what holds the port and stop; do not guess.
		if port_busy "$port" && [[ ${CI:-} == true && -z ${TETHER_PG_PORT:-} ]]; then
			local busy=$port owner
			owner=$(port_owner "$port")
			port=$((port + 1000))
			while port_busy "$port"; do
				((port < busy + 1100)) || die "no free port in $((busy + 1000))-$((busy + 1100))"
				port=$((port + 1))
			done
			url=$(url_for "$port")
			log "CI: port $busy is in use by another program${owner}; using port $port instead"
		fi
		if port_busy "$port"; then
			die "port $port on 127.0.0.1 is already in use by another program$(port_owner "$port").
  Stop that program, or choose another port: TETHER_PG_PORT=NNNNN $prog start $name"
		fi

		# A folder without PG_VERSION is a half-made cluster (initdb was
		# interrupted): start over. A cluster of another major version
		# cannot be started by these binaries: say what to do.
		if [[ ! -f $datadir/PG_VERSION ]]; then
			init_cluster
		elif [[ $have_version != "$version" ]]; then
			die "cluster '$name' in $datadir was made by PostgreSQL $have_version, but only $version is installed.
  It is throwaway data: remove it (rm -rf $datadir) and run this again."
		fi
		if $is_root; then
			# .data must let the server's user through, whatever the umask
			# was when it was made.
			[[ $datadir == "$project_root/.data/$name" ]] && chmod go+x "$project_root/.data"
			# A copy restored by root, or a previous non-root run, may have
			# left files the server's user cannot write.
			chown -R "$pg_user:" "$datadir"
			chmod 700 "$datadir"
		fi

		local logfile=$datadir/server.log attempt
		for attempt in 1 2 3 4 5; do
			write_settings
			log "starting cluster '$name' on 127.0.0.1:$port (log $logfile)"
			# -w waits until the server accepts connections; -l sends the
			# server's output to a file so that pg_ctl returns and the server
			# is fully detached from us (its own session, no zombie, no held
			# pipes).
			if as_pg "$bindir/pg_ctl" -D "$datadir" -l "$logfile" -w -t 60 start </dev/null >&2; then
				break
			fi
			# Our ports lie in the kernel's range for outgoing connections:
			# a client socket that happens to hold the port (nothing
			# listening, so port_busy saw it free) makes the bind fail. With
			# no port asked for, take the next free one and try again.
			if ((attempt < 5)) && [[ -z ${TETHER_PG_PORT:-} ]] &&
				tail -n 20 "$logfile" 2>/dev/null | grep -q "could not bind"; then
				local taken=$port
				port=$((port + 1))
				while port_busy "$port"; do port=$((port + 1)); done
				url=$(url_for "$port")
				log "port $taken was taken while the server started; trying port $port"
				continue
			fi
			log "pg_ctl start failed; last lines of $logfile:"
			tail -n 20 "$logfile" >&2 2>/dev/null || true
			die "could not start cluster '$name'"
		done
	fi

	wait_accepting || die "cluster '$name' does not accept connections on 127.0.0.1:$port (see $datadir/server.log)"
	local addr
	for addr in ${listen_extra//,/ }; do
		"$(pgtool pg_isready)" -q -h "$addr" -p "$port" -d postgres -U postgres ||
			die "cluster '$name' does not accept connections on $addr:$port (TETHER_PG_LISTEN_EXTRA): does this machine have that address? (see $datadir/server.log)"
	done

	ensure_app_database

	log "ready: $url"
	print_url "$url"
}

# Hold the lock for the whole command where flock exists (not for stopping or
# asking about a cluster that was never made: nothing to guard, no file left).
if command -v flock >/dev/null 2>&1 && [[ $cmd == start || -d $datadir ]]; then
	mkdir -p "$(dirname "$lockfile")"
	exec 9>"$lockfile"
	flock -w 120 9 || die "timed out waiting for another $prog on cluster '$name' ($lockfile)"
fi

case $cmd in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
destroy) cmd_destroy ;;
esac
