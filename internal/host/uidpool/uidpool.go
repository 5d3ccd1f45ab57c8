// Package uidpool hands out host uids, one per sandbox, host-wide: a uid
// held is a symbolic link in the registry (/run/tether-uids) named by the
// uid and pointing at its holder's folder, so Tether processes on the host
// never hand out the same uid twice, and a claim whose holder's folder is
// gone is taken back. It owns the registry; a reboot, which ends every
// sandbox, empties it.
package uidpool

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/tetherhq/tether/internal/host/hostos"
)

// Each sandbox runs as a host uid (and the gid of the same number) of its
// own, taken from a range no host user has, so that what one sandbox's
// processes can reach the others' cannot: their workspaces, their
// processes through /proc, per-user kernel accounting. Inside, the same
// number is the sandbox user (bubblewrap maps it to itself).
//
// The uids are handed out host-wide, whatever the state folder: a uid held
// is a symbolic link in uidRegistry named by the uid and pointing at the
// holder's folder. Claims are made under an flock, so Tether processes on
// the host never hand out the same uid twice; a claim whose folder is gone
// (a holder destroyed by a Tether that died before freeing its uid) is
// taken back. The registry lives in /run: a reboot, which ends every
// sandbox, empties it.

// Default uid range of sandboxes: above
// the host's users and systemd's dynamic users, 65536 sandboxes at once.
const (
	DefaultBase  = 100000
	DefaultCount = 65536
)

// uidRegistry is where claims live (see above).
const uidRegistry = "/run/tether-uids"

// Nobody is the uid no sandbox is handed out: the keepers', and that of
// sandboxes made before each had its own.
const Nobody = 65534

// Pool is Count host uids from Base, handed out one per holder.
type Pool struct{ Base, Count int }

// Last is the pool's highest uid.
func (p Pool) Last() int { return p.Base + p.Count - 1 }

// Check returns why the pool cannot be used, or "": it must lie within
// the kernel's uids and hold no host user's.
func (p Pool) Check() string {
	const maxUID = 1<<31 - 2
	if p.Base < 1 || p.Count < 1 || p.Base > maxUID-p.Count+1 {
		return fmt.Sprintf("the sandbox uid range (LOCAL_UID_BASE %d, LOCAL_UID_COUNT %d) must lie within 1 to %d", p.Base, p.Count, maxUID)
	}
	if user, uid := hostUserIn(p.Base, p.Count); user != "" {
		return fmt.Sprintf("the sandbox uid range %d to %d holds the host user %s (uid %d): sandboxes would run as that user; set LOCAL_UID_BASE and LOCAL_UID_COUNT to a range of no host user",
			p.Base, p.Base+p.Count-1, user, uid)
	}
	return ""
}

// hostUserIn returns a user of the host's /etc/passwd whose uid lies in the
// count uids from base, if there is one.
func hostUserIn(base, count int) (string, int) {
	f, err := os.Open("/etc/passwd")
	if err != nil {
		return "", 0
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) < 3 {
			continue
		}
		uid, err := strconv.Atoi(fields[2])
		if err == nil && uid >= base && uid < base+count && uid != Nobody {
			return fields[0], uid
		}
	}
	return "", 0
}

// lockUIDs takes the registry's lock, which the returned function releases.
func lockUIDs() (func(), error) {
	if err := os.MkdirAll(uidRegistry, 0o700); err != nil {
		return nil, fmt.Errorf("uid registry: %w", err)
	}
	unlock, err := hostos.Lock(filepath.Join(uidRegistry, ".lock"))
	if err != nil {
		return nil, fmt.Errorf("uid registry: %w", err)
	}
	return unlock, nil
}

// Claim gives holder (the absolute path of a sandbox's folder, which
// must exist) a uid of the range that no live holder has. It starts at a
// random place of the range, so that a uid just freed is seldom handed out
// again at once.
func (p Pool) Claim(holder string) (int, error) {
	unlock, err := lockUIDs()
	if err != nil {
		return 0, err
	}
	defer unlock()
	start := rand.IntN(p.Count)
	for i := range p.Count {
		uid := p.Base + (start+i)%p.Count
		if uid == Nobody || uid == 65535 { // nobody, and 16-bit -1
			continue
		}
		claim := filepath.Join(uidRegistry, strconv.Itoa(uid))
		err := os.Symlink(holder, claim)
		if errors.Is(err, fs.ErrExist) && stale(claim) {
			if err = os.Remove(claim); err == nil {
				err = os.Symlink(holder, claim)
			}
		}
		switch {
		case err == nil:
			return uid, nil
		case !errors.Is(err, fs.ErrExist):
			return 0, fmt.Errorf("uid registry: claiming %d: %w", uid, err)
		}
	}
	return 0, fmt.Errorf("all %d sandbox uids from %d are in use", p.Count, p.Base)
}

// stale reports whether the holder of claim is gone.
func stale(claim string) bool {
	holder, err := os.Readlink(claim)
	if err != nil {
		return false
	}
	_, err = os.Lstat(holder)
	return errors.Is(err, fs.ErrNotExist)
}

// Release frees uid if holder holds it.
func Release(uid int, holder string) error {
	if uid == 0 || uid == Nobody {
		return nil
	}
	unlock, err := lockUIDs()
	if err != nil {
		return err
	}
	defer unlock()
	claim := filepath.Join(uidRegistry, strconv.Itoa(uid))
	if got, err := os.Readlink(claim); err != nil || got != holder {
		return nil // freed already, or someone else's by now
	}
	if err := os.Remove(claim); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("uid registry: freeing %d: %w", uid, err)
	}
	return nil
}

// ReleaseHolder frees every uid holder holds: for a destroy that cannot
// tell which (its record of the uid is gone: a create cut short between
// the claim and the record, or a destroy cut short after removing the
// folder). It reads the whole registry, so it is for those cases only.
func ReleaseHolder(holder string) error {
	unlock, err := lockUIDs()
	if err != nil {
		return err
	}
	defer unlock()
	entries, err := os.ReadDir(uidRegistry)
	if err != nil {
		return fmt.Errorf("uid registry: %w", err)
	}
	for _, e := range entries {
		claim := filepath.Join(uidRegistry, e.Name())
		if got, err := os.Readlink(claim); err != nil || got != holder {
			continue
		}
		if err := os.Remove(claim); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("uid registry: freeing %s: %w", e.Name(), err)
		}
	}
	return nil
}

// Credential is who a sandbox's processes of uid run as: that uid and
// gid, no supplementary groups.
func Credential(uid int) *syscall.Credential {
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}
}
