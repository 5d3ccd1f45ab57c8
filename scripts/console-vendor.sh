#!/usr/bin/env bash
# scripts/console-vendor.sh — copy the built files of the npm packages the
# web console serves (xterm.js and its fit addon, for a sandbox's terminal)
# into internal/http/console/static/vendor/, at the versions pinned in
# internal/http/console/package-lock.json (make console-vendor).
#
# The console is embedded in the Go binary and loads nothing from
# elsewhere, so these files are committed: each package's files as npm
# ships them, byte for byte, under vendor/<package>/ at the same paths, with
# the package's LICENSE and package.json. To move to another version, change
# the pin in internal/http/console/package.json, run `npm install` there
# (the lockfile), then this script; console_test.go
# (TestVendoredPackagesArePinned) checks the copy against the lockfile, and
# against node_modules when it is installed.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
dir=$root/internal/http/console
vendor=$dir/static/vendor

# What the console uses of each package (besides LICENSE and package.json,
# always copied): the ES module builds and the stylesheet, not their source
# maps, types or TypeScript sources.
declare -A files=(
	[@xterm/xterm]="lib/xterm.mjs css/xterm.css"
	[@xterm/addon-fit]="lib/addon-fit.mjs"
)

npm --prefix "$dir" ci --no-audit --no-fund
rm -rf "$vendor"
for pkg in "${!files[@]}"; do
	for f in LICENSE package.json ${files[$pkg]}; do
		mkdir -p "$(dirname "$vendor/$pkg/$f")"
		cp "$dir/node_modules/$pkg/$f" "$vendor/$pkg/$f"
	done
	echo "vendored $pkg $(node -p "require('$dir/node_modules/$pkg/package.json').version")"
done
