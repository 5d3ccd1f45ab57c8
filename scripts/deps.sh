#!/usr/bin/env bash
# scripts/deps.sh [run|test] — make sure the host has what Tether needs
# beyond Go and PostgreSQL (scripts/postgres.sh handles that).
#
# `run` (make run): what the server needs to make real sandboxes with the
# local provider:
#
#   bwrap            (Debian package bubblewrap)  the local provider's sandboxes
#   nsenter, setpriv (util-linux)                 running commands inside them
#   nft              (nftables)                   the local provider's network allow-list
#   ip               (iproute2)                   the allow-list's namespaces and links
#
# `microvm` (make run with PROVIDERS naming microvm): what the microvm
# provider and scripts/microvm.sh, which builds its guest image, need:
#
#   qemu-system-x86_64, qemu-img (qemu-system-x86, qemu-utils)  the VMs
#   /boot/vmlinuz-*  (linux-image-amd64)          the guests' kernel and modules
#   debootstrap, cpio, mkfs.ext4 (e2fsprogs)      the guests' root and initramfs
#
# `test` (make test; the default): all of that, and the test tools:
#
#   python3                                       the Python client's tests
#   python3-httpx, python3-pytest,                the Python client (clients/python)
#   python3-pytest-asyncio                        and its tests, for /usr/bin/python3
#   pgrep            (procps)                     tests that look for sandbox processes
#   chromium                                      the web console's browser tests (test/console)
#   promtool         (prometheus)                 checks the alert rules in deploy/prometheus
#   protoc           (protobuf-compiler)          checks the E2B face's generated code (internal/e2b/envdpb)
#   timestamp.proto  (libprotobuf-dev)            which that code imports (google/protobuf/timestamp.proto)
#   ip               (iproute2)                   also the tests' simulated hosts (test/harness/hosts.go)
#
# Missing packages are installed with apt-get when running as root on a
# Debian-like system. Otherwise the script says what is missing and exits 0:
# Tether still runs (the local provider reports itself unavailable) and the
# tests that need the missing piece fail with a clear message.
set -euo pipefail

prog=scripts/deps.sh
log() { printf '%s: %s\n' "$prog" "$*" >&2; }

mode=${1:-test}
case $mode in run | test | microvm) ;; *)
	log "usage: $prog [run|test|microvm]"
	exit 2
	;;
esac

missing=()
microvm_deps() {
	command -v qemu-system-x86_64 >/dev/null 2>&1 || missing+=(qemu-system-x86)
	command -v qemu-img >/dev/null 2>&1 || missing+=(qemu-utils)
	compgen -G '/boot/vmlinuz-*' >/dev/null || missing+=(linux-image-amd64)
	command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
	command -v cpio >/dev/null 2>&1 || missing+=(cpio)
	command -v mkfs.ext4 >/dev/null 2>&1 || missing+=(e2fsprogs)
}
if [[ $mode == microvm ]]; then
	microvm_deps
else
	command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
	{ command -v nsenter >/dev/null 2>&1 && command -v setpriv >/dev/null 2>&1; } || missing+=(util-linux)
	command -v nft >/dev/null 2>&1 || missing+=(nftables) # params.network "allowlist" (also needs ip)
	command -v ip >/dev/null 2>&1 || missing+=(iproute2)
fi
if [[ $mode == test ]]; then
	microvm_deps
	command -v python3 >/dev/null 2>&1 || missing+=(python3)
	# Debian's python3 (a pyenv or venv python3 earlier in PATH does not count:
	# the Python client's tests run with /usr/bin/python3).
	python=/usr/bin/python3
	[[ -x $python ]] || python=python3
	"$python" -c 'import httpx, pytest, pytest_asyncio' >/dev/null 2>&1 ||
		missing+=(python3-httpx python3-pytest python3-pytest-asyncio)
	command -v pgrep >/dev/null 2>&1 || missing+=(procps)
	command -v chromium >/dev/null 2>&1 || missing+=(chromium) # the console's browser tests drive it
	command -v promtool >/dev/null 2>&1 || missing+=(prometheus) # promtool checks deploy/prometheus
	command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler) # the E2B face's generated code
	[[ -f /usr/include/google/protobuf/timestamp.proto ]] || missing+=(libprotobuf-dev) # the well-known types it imports
fi

if ((${#missing[@]} == 0)); then
	exit 0
fi
if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
	log "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2
	apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null >&2
else
	log "missing: ${missing[*]} (install them with your package manager; the local provider needs bubblewrap and util-linux)"
fi
