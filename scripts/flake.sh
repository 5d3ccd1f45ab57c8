#!/usr/bin/env bash
# scripts/flake.sh — run one Python client test again and again against a
# live Tether (local provider, 1 s janitor, 3 s owner TTL: the settings of
# test/e2e/python_test.go), keeping the evidence of every failure.
#
# Usage:
#   scripts/flake.sh [RUNS] [PYTEST_NODE]
#     RUNS         how many runs (default 200); the loop goes on after a failure
#     PYTEST_NODE  default clients/python/tests/test_provider.py::test_owner_death_ends_its_sandboxes
#
# It starts its own Postgres cluster (FLAKE_CLUSTER, default `flake`, on
# TETHER_PG_PORT if set) and its own Tether (bin/tether, built first) on a
# free port, and stops both at the end. FLAKE_CPU_PERCENT (cgroup v1 or v2,
# as root) holds Tether and its sandboxes to that share of one CPU, as a
# loaded machine would. Output goes to FLAKE_DIR (default .data/flake-<time>):
#   summary.txt        one line per run: number, pass/FAIL, seconds
#   run-N/             for a failed run: pytest's output, the tail of
#                      Tether's log over the run, and the tenant's events
#                      (GET /v1/events) since the run began
#   tether.log         Tether's whole log
# The last line printed is the tally, e.g. "200 runs: 200 passed, 0 failed".
set -euo pipefail

runs=${1:-200}
node=${2:-clients/python/tests/test_provider.py::test_owner_death_ends_its_sandboxes}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$root"
out=${FLAKE_DIR:-$root/.data/flake-$(date -u +%Y%m%dT%H%M%S)}
mkdir -p "$out"
python=/usr/bin/python3
[[ -x $python ]] || python=$(command -v python3)

go build -o bin/tether ./cmd/api
cluster=${FLAKE_CLUSTER:-flake}
db=$(scripts/postgres.sh start "$cluster" | tail -n 1)
admin=$(scripts/postgres.sh admin-url "$cluster" | tail -n 1)
dbname=flake_$$
psql -q "$admin" -c "CREATE DATABASE $dbname OWNER tether" >/dev/null
url=$(sed "s#/tether?#/$dbname?#" <<<"$db")

state=$(mktemp -d /tmp/tether-flake.XXXXXX)
chmod 711 "$state"
key=flake-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
port=$($python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
tether_pid= base= cg=
cleanup() {
	if [[ -n $tether_pid ]] && kill -0 "$tether_pid" 2>/dev/null; then
		# Sandboxes outlive Tether by design: end them while it runs.
		for id in $(curl -fsS -H "Authorization: Bearer $key" "$base/v1/sandboxes?limit=500&released=false" | jq -r '.items[].id' 2>/dev/null); do
			curl -fsS -X DELETE -H "Authorization: Bearer $key" "$base/v1/sandboxes/$id" >/dev/null 2>&1 || true
			curl -fsS -H "Authorization: Bearer $key" "$base/v1/sandboxes/$id?wait=30s" >/dev/null 2>&1 || true
		done
		for _ in $(seq 100); do
			left=$(curl -fsS -H "Authorization: Bearer $key" "$base/v1/sandboxes?limit=500&released=false" | jq '.items | length' 2>/dev/null || echo 0)
			[[ $left == 0 ]] && break
			sleep 0.3
		done
	fi
	if [[ -n $tether_pid ]]; then
		kill "$tether_pid" 2>/dev/null || true
		wait "$tether_pid" 2>/dev/null || true
	fi
	psql -q "$admin" -c "DROP DATABASE IF EXISTS $dbname WITH (FORCE)" >/dev/null 2>&1 || true
	scripts/postgres.sh stop "$cluster" >/dev/null 2>&1 || true
	rm -rf "$state"
	if [[ -n $cg ]]; then
		# Deepest first: the local provider makes its sandboxes' groups below.
		find "$cg" -depth -type d -exec rmdir {} \; 2>/dev/null || true
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

env -i PATH="$PATH" HOME="$HOME" DATABASE_URL="$url" BOOTSTRAP_API_KEY="$key" \
	LISTEN_ADDR="127.0.0.1:$port" PROVIDERS=local,sim LOCAL_STATE_DIR="$state/local" SIM_STATE_DIR="$state/sim" \
	JANITOR_INTERVAL=1s ORPHAN_GRACE=1s DEFAULT_OWNER_TTL=3s EXECUTOR_LEASE=3s \
	bin/tether serve >"$out/tether.log" 2>&1 &
tether_pid=$!
if [[ -n ${FLAKE_CPU_PERCENT:-} ]]; then
	if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
		cg=/sys/fs/cgroup/tether-flake-$$
		mkdir "$cg"
		echo "$((FLAKE_CPU_PERCENT * 1000)) 100000" >"$cg/cpu.max"
	else
		cg=/sys/fs/cgroup/cpu/tether-flake-$$
		mkdir "$cg"
		echo 100000 >"$cg/cpu.cfs_period_us"
		echo "$((FLAKE_CPU_PERCENT * 1000))" >"$cg/cpu.cfs_quota_us"
	fi
	echo "$tether_pid" >"$cg/cgroup.procs"
fi
base=http://127.0.0.1:$port
for _ in $(seq 600); do
	curl -fsS "$base/readyz" >/dev/null 2>&1 && break
	sleep 0.1
done
curl -fsS "$base/readyz" >/dev/null

events_after() { # the tenant's events after event id $1, as JSON lines
	local after=$1
	while :; do
		page=$(curl -fsS -H "Authorization: Bearer $key" "$base/v1/events?after=$after&limit=500") || return 0
		n=$(jq '.items | length' <<<"$page")
		((n > 0)) || return 0
		jq -c '.items[]' <<<"$page"
		after=$(jq -r '.items[-1].id' <<<"$page")
	done
}
last_event() {
	events_after 0 | tail -n 1 | jq -r '.id // 0' 2>/dev/null || echo 0
}

# measure RUN_START: for each owned sandbox made since, how long it outlived
# its owner's lease (ended_at - the lease's expires_at) and how long its
# release took (released_at - ended_at), from the server's own records.
measure() {
	TETHER_URL=$base TETHER_API_KEY=$key $python - "$1" <<'PY'
import json, os, sys, urllib.request
from datetime import datetime
base, key, since = os.environ["TETHER_URL"], os.environ["TETHER_API_KEY"], sys.argv[1]
def get(path):
    req = urllib.request.Request(base + path, headers={"Authorization": "Bearer " + key})
    return json.load(urllib.request.urlopen(req))
def t(s):
    return datetime.fromisoformat(s.replace("Z", "+00:00")) if s else None
owners, cursor = {}, ""
while True:
    page = get("/v1/owners?limit=500" + ("&cursor=" + cursor if cursor else ""))
    owners.update({o["owner"]: t(o["expires_at"]) for o in page["items"]})
    cursor = page.get("next_cursor")
    if not cursor:
        break
for sb in get("/v1/sandboxes?limit=500&created_after=" + since)["items"]:
    if not sb.get("owner"):
        continue
    ended, released = t(sb.get("ended_at")), t(sb.get("released_at"))
    over = (ended - owners[sb["owner"]]).total_seconds() if ended else float("nan")
    rel = (released - ended).total_seconds() if ended and released else float("nan")
    print(f"  {sb['id']} {sb['state']}/{sb.get('reason')} outlived_lease={over:.2f}s release={rel:.2f}s")
PY
}

passed=0 failed=0
for i in $(seq "$runs"); do
	mark=$(last_event)
	[[ -n $mark ]] || mark=0
	logline=$(wc -l <"$out/tether.log")
	start=$(date +%s.%N)
	since=$(date -u +%Y-%m-%dT%H:%M:%S.%NZ)
	if env TETHER_URL="$base" TETHER_API_KEY="$key" TETHER_JANITOR_INTERVAL=1 \
		PYTHONPATH="$root/clients/python" PYTHONDONTWRITEBYTECODE=1 \
		$python -m pytest -q -p no:cacheprovider "$node" >"$out/last.txt" 2>&1; then
		result=pass
		passed=$((passed + 1))
	else
		result=FAIL
		failed=$((failed + 1))
		mkdir -p "$out/run-$i"
		mv "$out/last.txt" "$out/run-$i/pytest.txt"
		tail -n +"$((logline + 1))" "$out/tether.log" >"$out/run-$i/tether.log"
		events_after "$mark" >"$out/run-$i/events.jsonl"
	fi
	took=$(echo "$(date +%s.%N) - $start" | bc)
	printf '%d %s %.1f\n' "$i" "$result" "$took" | tee -a "$out/summary.txt"
	measure "$since" | tee -a "$out/summary.txt" || true
done
echo "evidence in $out"
echo "$runs runs: $passed passed, $failed failed"
