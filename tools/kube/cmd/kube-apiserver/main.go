// Command kube-apiserver is the Kubernetes API server of k8s.io/kubernetes,
// built from the module as a dependency for Tether's test control plane
// (scripts/kube.sh).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
