package local

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

	"golang.org/x/sys/unix"
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

// Default uid range of sandboxes, unless WithUIDRange says otherwise: above
// the host's users and systemd's dynamic users, 65536 sandboxes at once.
const (
	DefaultUIDBase  = 100000
	DefaultUIDCount = 65536
)

// uidRegistry is where claims live (see above).
const uidRegistry = "/run/tether-uids"

// legacyUID is the uid of sandboxes made before each had its own (their
// meta.json names none): nobody.
const legacyUID = 65534

// WithUIDRange sets the host uids and gids sandboxes run as: count of them
// from base, one per sandbox. The range must hold no host user's uid.
func WithUIDRange(base, count int) Option {
	return func(p *Provider) { p.uidBase, p.uidCount = base, count }
}

// checkUIDRange returns why the provider's uid range cannot be used, or "".
func (p *Provider) checkUIDRange() string {
	const maxUID = 1<<31 - 2
	if p.uidBase < 1 || p.uidCount < 1 || p.uidBase > maxUID-p.uidCount+1 {
		return fmt.Sprintf("the sandbox uid range (LOCAL_UID_BASE %d, LOCAL_UID_COUNT %d) must lie within 1 to %d", p.uidBase, p.uidCount, maxUID)
	}
	if user, uid := hostUserIn(p.uidBase, p.uidCount); user != "" {
		return fmt.Sprintf("the sandbox uid range %d to %d holds the host user %s (uid %d): sandboxes would run as that user; set LOCAL_UID_BASE and LOCAL_UID_COUNT to a range of no host user",
			p.uidBase, p.uidBase+p.uidCount-1, user, uid)
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
		if err == nil && uid >= base && uid < base+count && uid != legacyUID {
			return fields[0], uid
		}
	}
	return "", 0
}

// uidNote describes the sandboxes' users, for Info.
func (p *Provider) uidNote() string {
	return fmt.Sprintf("each sandbox runs as a host uid and gid of its own (from %d to %d), without capabilities", p.uidBase, p.uidBase+p.uidCount-1)
}

// lockUIDs takes the registry's lock, which the returned function releases.
func lockUIDs() (func(), error) {
	if err := os.MkdirAll(uidRegistry, 0o700); err != nil {
		return nil, fmt.Errorf("uid registry: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(uidRegistry, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("uid registry: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("uid registry: lock: %w", err)
	}
	return func() { _ = f.Close() }, nil // closing releases the lock
}

// claimUID gives holder (the absolute path of a sandbox's folder, which
// must exist) a uid of the range that no live holder has. It starts at a
// random place of the range, so that a uid just freed is seldom handed out
// again at once.
func (p *Provider) claimUID(holder string) (int, error) {
	unlock, err := lockUIDs()
	if err != nil {
		return 0, err
	}
	defer unlock()
	start := rand.IntN(p.uidCount)
	for i := range p.uidCount {
		uid := p.uidBase + (start+i)%p.uidCount
		if uid == legacyUID || uid == 65535 { // nobody, and 16-bit -1
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
	return 0, fmt.Errorf("all %d sandbox uids from %d are in use", p.uidCount, p.uidBase)
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

// releaseUID frees uid if holder holds it.
func releaseUID(uid int, holder string) error {
	if uid == 0 || uid == legacyUID {
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

// sandboxCredential is who bwrap runs as for a sandbox of uid.
func sandboxCredential(uid int) *syscall.Credential {
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}
}

// writeSandboxEtc writes, in dir/etc, the passwd and group files the
// sandbox of uid sees: root and the sandbox user, nobody else of the
// host's.
func writeSandboxEtc(dir string, uid int) error {
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
	return nil
}

// uid is the sandbox's uid (and gid).
func (m meta) uid() int {
	if m.UID == 0 {
		return legacyUID
	}
	return m.UID
}
