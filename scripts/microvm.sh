#!/usr/bin/env bash
# scripts/microvm.sh [DIR] — build the microvm provider's guest image into
# DIR (default .data/microvm), printing DIR on its last line:
#
#   vmlinuz          Debian's kernel (package linux-image-amd64), as installed
#   initramfs.cpio   the guest's init: tether-vmagent (cmd/tether-vmagent) and
#                    the kernel modules it loads (virtio-mmio, virtio-blk,
#                    virtio-console, virtio-rng, crc32c, ext4 and what they
#                    need)
#   rootfs.ext4      the sandboxes' root: Debian bookworm (debootstrap,
#                    minbase, with python3 and procps) and its user
#                    `user` (uid 1000); each sandbox runs on a copy-on-write
#                    overlay of it, never on the file itself
#
# The root is built once (about half a minute, from Debian's mirror) and kept
# until its recipe below changes; the initramfs is rebuilt every time (a few
# seconds), so that the agent always matches the source. Needs root (for
# debootstrap) and the packages qemu-system-x86, qemu-utils, linux-image-amd64,
# debootstrap, e2fsprogs and cpio, which scripts/deps.sh installs.
set -euo pipefail

prog=scripts/microvm.sh
log() { printf '%s: %s\n' "$prog" "$*" >&2; }

dir=${1:-.data/microvm}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
# One build at a time (test packages build it concurrently).
exec 9>"$dir/.lock"
flock 9

kernel=$(ls /boot/vmlinuz-* 2>/dev/null | sort -V | tail -n 1 || true)
if [[ -z $kernel ]]; then
	log "no kernel in /boot: install linux-image-amd64 (scripts/deps.sh does)"
	exit 1
fi
version=${kernel#/boot/vmlinuz-}
moddir=/lib/modules/$version
[[ -f $moddir/modules.dep ]] || { log "no $moddir/modules.dep"; exit 1; }
install -m 0644 "$kernel" "$dir/vmlinuz.tmp" && mv "$dir/vmlinuz.tmp" "$dir/vmlinuz"

# The root: rebuilt when its recipe (this line) changes.
recipe="bookworm minbase python3,procps user:1000 v1"
if [[ ! -f $dir/rootfs.ext4 || $(cat "$dir/rootfs.recipe" 2>/dev/null) != "$recipe" ]]; then
	log "building the guest's root (debootstrap bookworm; about half a minute)"
	root=$dir/root.tmp
	rm -rf "$root"
	if ! debootstrap --variant=minbase --include=python3,procps bookworm "$root" >"$dir/debootstrap.log" 2>&1; then
		log "debootstrap failed; its log: $dir/debootstrap.log"
		tail -n 20 "$dir/debootstrap.log" >&2
		exit 1
	fi
	chroot "$root" /usr/sbin/groupadd --gid 1000 user
	chroot "$root" /usr/sbin/useradd --uid 1000 --gid 1000 --create-home --shell /bin/bash user
	mkdir -p "$root/workspace"
	echo tether >"$root/etc/hostname"
	printf '127.0.0.1 localhost\n::1 localhost\n' >"$root/etc/hosts"
	: >"$root/etc/resolv.conf"
	rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
	rm -f "$dir/rootfs.tmp"
	mkfs.ext4 -q -L tether-root -d "$root" "$dir/rootfs.tmp" 2G
	mv "$dir/rootfs.tmp" "$dir/rootfs.ext4"
	echo "$recipe" >"$dir/rootfs.recipe"
	rm -rf "$root"
fi

# The initramfs: the agent as /init, and the modules in the order they load.
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/modules"
CGO_ENABLED=0 GOTOOLCHAIN=local go build -trimpath -ldflags='-s -w' -o "$stage/init" ./cmd/tether-vmagent

declare -A seen=()
order=()
add() { # add MODULE-PATH (relative to $moddir): its dependencies first
	local m=$1 deps
	[[ -n ${seen[$m]:-} ]] && return
	seen[$m]=1
	deps=$(awk -v m="$m:" '$1 == m { $1 = ""; print }' "$moddir/modules.dep")
	local d
	for d in $deps; do add "$d"; done
	order+=("$m")
}
for name in virtio_mmio virtio_blk virtio_console virtio_rng crc32c_generic ext4; do
	# Module files are named with - or _ (virtio-rng.ko, virtio_blk.ko).
	path=$(awk -F: -v a="/$name.ko" -v b="/${name//_/-}.ko" '{ f = "/" $1; sub(/.*\//, "/", f) } f == a || f == b { print $1; exit }' "$moddir/modules.dep")
	[[ -n $path ]] || { log "the kernel $version has no module $name"; exit 1; }
	add "$path"
done
for m in "${order[@]}"; do
	cp "$moddir/$m" "$stage/modules/"
	basename "$m" >>"$stage/modules/order"
done
(cd "$stage" && find . -mindepth 1 | LC_ALL=C sort | cpio --quiet -o -H newc -R 0:0) >"$dir/initramfs.tmp"
mv "$dir/initramfs.tmp" "$dir/initramfs.cpio"
log "guest image ready: kernel $version, $(wc -l <"$stage/modules/order") modules"
echo "$dir"
