// Package kubetest gives tests a real Kubernetes control plane: the
// cluster of $KUBECONFIG, or the project's own test cluster, started (or
// reused) by scripts/kube.sh (docs/kubernetes.md).
package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

var (
	once   sync.Once
	path   string
	reason string
)

// startTimeout bounds scripts/kube.sh start: a cold machine builds the
// control plane first (about 10 minutes on 2 cores).
const startTimeout = 30 * time.Minute

// Kubeconfig returns the path of a kubeconfig of a running cluster: the
// KUBECONFIG environment variable if set, else the one scripts/kube.sh
// start prints (it starts the project's test cluster, or reuses the one
// running). If neither works, it returns "" and why, for a test to skip
// with. The cluster is left running for the next test run, like the test
// Postgres of scripts/postgres.sh; scripts/kube.sh stop ends it.
func Kubeconfig() (string, string) {
	once.Do(func() { path, reason = find() })
	return path, reason
}

func find() (string, string) {
	if kc := os.Getenv("KUBECONFIG"); kc != "" {
		return kc, ""
	}
	root, err := projectRoot()
	if err != nil {
		return "", "KUBECONFIG is unset and the project's scripts/kube.sh cannot be found: " + err.Error()
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "kube.sh"), "start")
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Sprintf("KUBECONFIG is unset and scripts/kube.sh start failed (%v): %s", err, lastLines(stderr.String(), 15))
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	kc := strings.TrimSpace(lines[len(lines)-1])
	if _, err := os.Stat(kc); err != nil {
		return "", fmt.Sprintf("scripts/kube.sh start printed %q, not a kubeconfig: %v", kc, err)
	}
	return kc, ""
}

// projectRoot is the folder of the go.mod of module
// github.com/tetherhq/tether above the working directory.
func projectRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(b, []byte("module github.com/tetherhq/tether\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod of github.com/tetherhq/tether above the working directory")
		}
		dir = parent
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
