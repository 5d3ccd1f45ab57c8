#!/usr/bin/env bash
# scripts/chaos.sh — the long chaos runs (make chaos): each mode of
# test/chaos in a go test of its own, every one to its end whatever the
# others did, with a timeout that fits its storm; then a summary, and a
# clean-up of whatever a run left behind however it ended.
#
# Usage: scripts/chaos.sh [MODE ...]   (default: all five)
#
#   CHAOS_DURATION   how long each storm lasts (a Go duration: 90s, 3m, 1h; default 3m)
#   CHAOS_FLAGS      more flags for every go test (e.g. -chaos.seed=N)
#   TAGS             build tags (make chaos passes the Makefile's: kubernetes,
#                    for TestChaosKube)
#
# Each mode's output is in chaos-results/<start time>/<MODE>.log (git-ignored),
# and a failing mode's replica logs in the folder its failure names. The
# exit status is 0 only if every mode passed.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
export GOTOOLCHAIN=local

duration=${CHAOS_DURATION:-3m}
tags=${TAGS:-kubernetes}
flags=${CHAOS_FLAGS:-}
if (($# > 0)); then
	modes=("$@")
else
	modes=(TestChaos TestChaosNodes TestChaosOwners TestChaosWebhooks TestChaosKube)
fi

# seconds DURATION: a Go duration of s, m and h parts, in whole seconds.
seconds() {
	local d=$1 total=0 n unit
	while [[ $d =~ ^([0-9]+)([smh])(.*)$ ]]; do
		n=${BASH_REMATCH[1]} unit=${BASH_REMATCH[2]} d=${BASH_REMATCH[3]}
		case $unit in s) total=$((total + n)) ;; m) total=$((total + 60 * n)) ;; h) total=$((total + 3600 * n)) ;; esac
	done
	if [[ -n $d ]] || ((total == 0)); then
		echo "scripts/chaos.sh: CHAOS_DURATION=$1 is not a duration such as 90s, 3m or 1h" >&2
		exit 2
	fi
	echo "$total"
}
storm=$(seconds "$duration")
# A storm, the quiet phase and checks (minutes each), and a build: the
# timeout leaves room for all of it, so that go test never panics a run
# before its clean-ups.
timeout=$((3 * storm + 20 * 60))s

# Every process a run starts (replicas, Postgres clusters, a control
# plane, simulated hosts) inherits this, so that what a run killed before
# its clean-ups left can be found and ended.
run=chaos-$$-$(date +%s)
export TETHER_CHAOS_RUN=$run
out=chaos-results/$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$out"

# leftovers prints the pids of this run's processes still alive.
leftovers() {
	local env pid
	for env in /proc/[0-9]*/environ; do
		pid=${env#/proc/}
		pid=${pid%/environ}
		[[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
		if tr '\0' '\n' 2>/dev/null <"$env" | grep -qx "TETHER_CHAOS_RUN=$run"; then
			echo "$pid"
		fi
	done
}

cleanup() {
	local pids
	pids=$(leftovers)
	if [[ -n $pids ]]; then
		echo "scripts/chaos.sh: ending $(wc -w <<<"$pids") processes the runs left" >&2
		# shellcheck disable=SC2086 # a list of pids
		kill -TERM $pids 2>/dev/null
		sleep 3
		pids=$(leftovers)
		# shellcheck disable=SC2086
		[[ -z $pids ]] || kill -KILL $pids 2>/dev/null
	fi
	scripts/postgres.sh stop chaos >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

declare -A status took
for mode in "${modes[@]}"; do
	echo "=== $mode (storm $duration, timeout $timeout; log $out/$mode.log)"
	start=$(date +%s)
	# shellcheck disable=SC2086 # CHAOS_FLAGS is a list of flags
	go test -count=1 -tags "$tags" ./test/chaos -run "^${mode}\$" -chaos.duration="$duration" -timeout "$timeout" -v $flags 2>&1 |
		tee "$out/$mode.log" | grep -E '^(chaos|--- |FAIL|ok|PASS|panic)|logs kept in'
	status[$mode]=${PIPESTATUS[0]}
	took[$mode]=$(($(date +%s) - start))
	cleanup
done

echo
echo "chaos summary (storm $duration; logs in $out):"
failed=0
for mode in "${modes[@]}"; do
	if ((status[$mode] == 0)); then
		result=pass
	else
		result="FAIL (exit ${status[$mode]})"
		failed=1
	fi
	printf '  %-18s %-16s %4ds\n' "$mode" "$result" "${took[$mode]}"
done
exit "$failed"
