package server

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// defaultNodeID is the node id of a host with the given name whose local
// sandboxes live in stateDir: the same across restarts, different for two
// state folders on one host (two simulated hosts, say).
func defaultNodeID(host, stateDir string) string {
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		abs = stateDir
	}
	sum := sha256.Sum256([]byte(abs))
	return cmp.Or(host, "node") + "-" + hex.EncodeToString(sum[:4])
}

// nodeIDPattern is what a node id may look like.
var nodeIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// stickyNodeID returns the node id kept in stateDir/node-id, writing id
// there first if none is: a defaulted node id must not change with the host
// name, or the node would take its own sandboxes for another node's.
func stickyNodeID(stateDir, id string) (string, error) {
	path := filepath.Join(stateDir, "node-id")
	b, err := os.ReadFile(path)
	if err == nil {
		kept := strings.TrimSpace(string(b))
		if !nodeIDPattern.MatchString(kept) {
			return "", fmt.Errorf("node id in %s: %q is not a node id", path, kept)
		}
		return kept, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read node id: %w", err)
	}
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return "", fmt.Errorf("keep node id: %w", err)
	}
	if err := os.WriteFile(path, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("keep node id: %w", err)
	}
	return id, nil
}

// nodeURL is the URL other replicas reach this one at: NODE_URL, or the
// listening address (an unspecified host becomes loopback).
func nodeURL(configured string, addr net.Addr) string {
	if configured != "" {
		return configured
	}
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}
