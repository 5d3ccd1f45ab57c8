#!/usr/bin/env bash
# tools/kube/replaces.sh — print the replace block tools/kube/go.mod needs.
#
# k8s.io/kubernetes requires its staging modules (k8s.io/api, client-go, ...)
# at v0.0.0 and replaces them with folders of its own repository; a module
# that depends on it must replace each with the published version. This
# prints one `k8s.io/X => k8s.io/X v0.MINOR.PATCH` line for every staging
# module that k8s.io/kubernetes@VERSION's go.mod requires at v0.0.0.
#
# Usage: tools/kube/replaces.sh [VERSION]   (default: the one go.mod requires)
set -euo pipefail
export GOTOOLCHAIN=local
cd "$(dirname "${BASH_SOURCE[0]}")"
version=${1:-$(go list -m -f '{{.Version}}' k8s.io/kubernetes)}
[[ $version =~ ^v1\.([0-9]+\.[0-9]+)$ ]] || { echo "replaces.sh: '$version' is not a k8s.io/kubernetes release such as v1.37.2" >&2; exit 1; }
staging=v0.${BASH_REMATCH[1]}
gomod=$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
[[ -f $gomod ]] || { echo "replaces.sh: go mod download k8s.io/kubernetes@$version gave no go.mod" >&2; exit 1; }
echo 'replace ('
sed -n '/^require (/,/^)/p' "$gomod" | awk -v v="$staging" '$2 == "v0.0.0" { printf "\t%s => %s %s\n", $1, $1, v }' | sort -u
echo ')'
