package local

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/tetherhq/tether/internal/host/uidpool"
)

// Each sandbox runs as a host uid (and the gid of the same number) of its
// own, from the provider's pool (internal/host/uidpool), so that what one
// sandbox's processes can reach the others' cannot: their workspaces, their
// processes through /proc, per-user kernel accounting. Inside, the same
// number is the sandbox user (bubblewrap maps it to itself).

// Default uid range of sandboxes, unless WithUIDRange says otherwise: above
// the host's users and systemd's dynamic users, 65536 sandboxes at once.
const (
	DefaultUIDBase  = uidpool.DefaultBase
	DefaultUIDCount = uidpool.DefaultCount
)

// legacyUID is the uid of sandboxes made before each had its own (their
// meta.json names none): nobody.
const legacyUID = uidpool.Nobody

// WithUIDRange sets the host uids and gids sandboxes run as: count of them
// from base, one per sandbox. The range must hold no host user's uid.
func WithUIDRange(base, count int) Option {
	return func(p *Provider) { p.uids = uidpool.Pool{Base: base, Count: count} }
}

// uidNote describes the sandboxes' users, for Info.
func (p *Provider) uidNote() string {
	return fmt.Sprintf("each sandbox runs as a host uid and gid of its own (from %d to %d), without capabilities", p.uids.Base, p.uids.Last())
}

// writeSandboxEtc writes, in dir/etc, the passwd and group files the
// sandbox of uid sees (root and the sandbox user, nobody else of the
// host's), and the /proc views of a sandbox with limits lim (procview.go).
func writeSandboxEtc(dir string, uid int, lim Limits) error {
	etc := filepath.Join(dir, "etc")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		return err
	}
	id := strconv.Itoa(uid)
	files := map[string]string{
		"passwd": "root:x:0:0:root:/root:/bin/sh\nsandbox:x:" + id + ":" + id + ":sandbox:" + WorkDir + ":/bin/sh\n",
		"group":  "root:x:0:\nsandbox:x:" + id + ":\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(etc, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return writeProcViews(etc, lim)
}

// uid is the sandbox's uid (and gid).
func (m meta) uid() int {
	if m.UID == 0 {
		return legacyUID
	}
	return m.UID
}
