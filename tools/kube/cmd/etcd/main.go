// Command etcd is the etcd server of go.etcd.io/etcd/server/v3, built from
// the module as a dependency for Tether's test control plane
// (scripts/kube.sh). Debian's etcd 3.4 lacks the watch features current
// Kubernetes clients use.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
