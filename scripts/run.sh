#!/usr/bin/env bash
# scripts/run.sh — what `make run` does: install what running needs
# (scripts/deps.sh run), choose the providers, start the dev Postgres
# (scripts/postgres.sh start dev, unless DATABASE_URL is set), build
# bin/tether showing its progress, say how to call it, and run it.
#
# Environment (the Makefile passes its variables):
#   PROVIDERS          the enabled providers, the default first; unset or
#                      empty: decided after scripts/deps.sh (default_providers)
#   LISTEN_ADDR        where Tether listens (default 127.0.0.1:8080)
#   BOOTSTRAP_API_KEY  the API key registered at start (default dev-key-change-me)
#   GO, BIN            the go command (default go) and the binary (default bin/tether)
#
# Tether is built with the build tag nomsgpack (gin without its MessagePack
# codec, which Tether does not use: a quarter of a cold build), and the tag
# kubernetes (the kubernetes provider, and client-go, which would be most of
# a cold build) only when PROVIDERS names kubernetes.
#
# Sourced (`source scripts/run.sh`), it only defines its functions: the
# tests call them.
set -euo pipefail

# default_providers prints the providers to enable when PROVIDERS is not
# set, the default first: local (real bubblewrap sandboxes) where it can
# run, as root with bwrap on PATH, else sim (simulated). It must run after
# scripts/deps.sh, which installs bubblewrap on a root machine that lacks it.
default_providers() {
	if [[ $(id -u) == 0 ]] && command -v bwrap >/dev/null 2>&1; then
		echo local,sim
	else
		echo sim,local
	fi
}

# build_tags prints the build tags of a Tether with the providers $1
# (PROVIDERS' form).
build_tags() {
	local p=${1// /}
	if [[ ,$p, == *,kubernetes,* ]]; then
		echo kubernetes,nomsgpack
	else
		echo nomsgpack
	fi
}

# progress reads `go build -v` output: each line that is a package path is
# one package compiled, shown as a count against $1, the packages in the
# build (on one line rewritten on a terminal, else a line every 10 s);
# any other line (an error) is passed on.
progress() {
	local total=$1 n=0 last=-10 line tty=false
	[[ -t 2 ]] && tty=true
	while IFS= read -r line; do
		if [[ ! $line =~ ^[A-Za-z0-9_./~+-]+$ ]]; then
			if $tty; then printf '\r\033[K' >&2; fi
			printf '%s\n' "$line" >&2
			continue
		fi
		n=$((n + 1))
		if $tty; then
			printf '\r\033[K  compiling %d/%d %.60s' "$n" "$total" "$line" >&2
		elif ((SECONDS - last >= 10)); then
			printf '  compiling %d/%d %s\n' "$n" "$total" "$line" >&2
			last=$SECONDS
		fi
	done
	if $tty; then printf '\r\033[K' >&2; fi
	if ((n > 0)); then printf '  compiled %d packages\n' "$n" >&2; fi
}

# build compiles ./cmd/api into $BIN with the build tags $1, saying what it
# does: a cold build compiles a few hundred packages and takes minutes.
build() {
	local tags=$1 total start=$SECONDS
	total=$("$GO" list -tags="$tags" -deps ./cmd/api 2>/dev/null | wc -l) || true
	printf 'building %s%s: %d packages; the first build compiles them all and takes a few minutes, later ones seconds\n' \
		"$BIN" "${tags:+ (build tags: $tags)}" "$total" >&2
	{ "$GO" build -tags="$tags" -v -o "$BIN" ./cmd/api 2>&1 >&3 | progress "$total"; } 3>&1
	printf 'built %s in %ds\n' "$BIN" $((SECONDS - start)) >&2
	# The ops commands (tether sandboxes ls, …) are tetherctl's, which
	# tether runs from beside itself.
	"$GO" build -o "$(dirname "$BIN")/tetherctl" ./cmd/tetherctl
}

# banner says where Tether listens, how to call it and what it runs.
banner() {
	local host=${LISTEN_ADDR/#0.0.0.0:/127.0.0.1:} auth="Authorization: Bearer $BOOTSTRAP_API_KEY"
	host=${host/#:/127.0.0.1:}
	cat <<EOF

Tether on http://$host (API key: $BOOTSTRAP_API_KEY; providers: $PROVIDERS, the first is the default); Ctrl-C stops it.
  curl -H '$auth' http://$host/v1/sandboxes
  curl -H '$auth' -X POST -d '{}' http://$host/v1/sandboxes
  CLI:      TETHER_URL=http://$host TETHER_API_KEY=$BOOTSTRAP_API_KEY $BIN sandboxes ls
  API docs: http://$host/swagger/index.html
  Console:  http://$host/ui (sign in with the API key)

EOF
}

# dev_secrets_key prints the dev server's SECRETS_KEY, made once and kept
# beside the dev Postgres (.data/dev-secrets.key, git-ignored), so that
# secrets stored through /v1/secrets open again after a restart. A real
# deployment sets SECRETS_KEY itself (docs/configuration.md).
dev_secrets_key() {
	local file=.data/dev-secrets.key
	if [[ ! -s $file ]]; then
		mkdir -p .data
		(umask 077 && head -c 32 /dev/urandom | base64 >"$file")
	fi
	cat "$file"
}

main() {
	: "${GO:=go}" "${BIN:=bin/tether}" "${LISTEN_ADDR:=127.0.0.1:8080}" "${BOOTSTRAP_API_KEY:=dev-key-change-me}"
	scripts/deps.sh run
	# Only now: deps.sh may just have installed bubblewrap.
	PROVIDERS=${PROVIDERS:-$(default_providers)}
	DATABASE_URL=$(scripts/postgres.sh start dev | tail -n 1)
	build "$(build_tags "$PROVIDERS")"
	SECRETS_KEY=${SECRETS_KEY:-$(dev_secrets_key)}
	if [[ ,$PROVIDERS, == *,microvm,* ]]; then
		# The guest image (half a minute the first time; then seconds).
		scripts/deps.sh microvm
		MICROVM_IMAGE_DIR=$(scripts/microvm.sh "${MICROVM_IMAGE_DIR:-.data/microvm}" | tail -n 1)
		export MICROVM_IMAGE_DIR
	fi
	banner
	export DATABASE_URL BOOTSTRAP_API_KEY LISTEN_ADDR PROVIDERS SECRETS_KEY
	# exec, not `go run`: the server is then make's own child, so a SIGTERM
	# to make (which make passes on to its children) or to the process
	# group stops it; `go run` would die on SIGTERM and leave the server
	# running, holding the port.
	exec "$BIN" serve
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	cd "$(dirname "${BASH_SOURCE[0]}")/.."
	main "$@"
fi
