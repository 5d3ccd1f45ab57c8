package uidpool

import (
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestClaimUID: concurrent claims on a small range each get a uid of their
// own until it runs out; a freed uid, or one whose holder's folder is gone,
// is handed out again; freeing is only by the holder.
func TestClaimUID(t *testing.T) {
	t.Parallel()
	const count = 8
	// A range of its own, far above the default, so that other tests'
	// sandboxes never meet it.
	p := Pool{Base: 1_500_000_000 + rand.IntN(1<<20)*count, Count: count}
	t.Cleanup(func() {
		for uid := p.Base; uid < p.Base+count; uid++ {
			_ = os.Remove(filepath.Join(uidRegistry, strconv.Itoa(uid)))
		}
	})
	dir := t.TempDir()
	holders := make([]string, count+1)
	for i := range holders {
		holders[i] = filepath.Join(dir, strconv.Itoa(i))
		if err := os.Mkdir(holders[i], 0o700); err != nil {
			t.Fatal(err)
		}
	}
	uids := make([]int, count)
	var wg sync.WaitGroup
	for i := range count {
		wg.Go(func() {
			uid, err := p.Claim(holders[i])
			if err != nil {
				t.Errorf("claim %d: %v", i, err)
			}
			uids[i] = uid
		})
	}
	wg.Wait()
	seen := map[int]bool{}
	for _, uid := range uids {
		if seen[uid] || uid < p.Base || uid >= p.Base+count {
			t.Fatalf("uids handed out: %v", uids)
		}
		seen[uid] = true
	}
	if uid, err := p.Claim(holders[count]); err == nil {
		t.Fatalf("a ninth claim on eight uids got %d", uid)
	}

	// Freeing by another holder does nothing; by the holder, it frees.
	if err := Release(uids[0], holders[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Claim(holders[count]); err == nil {
		t.Fatal("a uid freed by someone else than its holder was handed out")
	}
	if err := Release(uids[0], holders[0]); err != nil {
		t.Fatal(err)
	}
	if uid, err := p.Claim(holders[count]); err != nil || uid != uids[0] {
		t.Fatalf("after a release: claim = %d, %v; want %d", uid, err, uids[0])
	}

	// A holder whose folder is gone lost its uid.
	if err := os.Remove(holders[1]); err != nil {
		t.Fatal(err)
	}
	if uid, err := p.Claim(holders[0]); err != nil || uid != uids[1] {
		t.Fatalf("with a holder gone: claim = %d, %v; want its uid %d", uid, err, uids[1])
	}
}

// TestCheck: a pool past the kernel's uids, or one holding a host user's
// uid, cannot be used; the default one can.
func TestCheck(t *testing.T) {
	t.Parallel()
	if reason := (Pool{Base: DefaultBase, Count: DefaultCount}).Check(); reason != "" {
		t.Errorf("the default pool: %s", reason)
	}
	if reason := (Pool{Base: 1 << 31, Count: 8}).Check(); reason == "" {
		t.Error("a pool past the kernel's uids was accepted")
	}
	if reason := (Pool{Base: 1, Count: 10}).Check(); !strings.Contains(reason, "holds the host user") {
		t.Errorf("a pool holding daemon's uid 1: %q", reason)
	}
}

// TestReleaseHolder: a holder whose record of its uid is gone frees every
// claim it holds, and no one else's.
func TestReleaseHolder(t *testing.T) {
	t.Parallel()
	const count = 4
	p := Pool{Base: 1_600_000_000 + rand.IntN(1<<20)*count, Count: count}
	t.Cleanup(func() {
		for uid := p.Base; uid < p.Base+count; uid++ {
			_ = os.Remove(filepath.Join(uidRegistry, strconv.Itoa(uid)))
		}
	})
	dir := t.TempDir()
	mine, other := filepath.Join(dir, "mine"), filepath.Join(dir, "other")
	for _, d := range []string{mine, other} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	a, err := p.Claim(mine)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Claim(other)
	if err != nil {
		t.Fatal(err)
	}
	if err := ReleaseHolder(mine); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(uidRegistry, strconv.Itoa(a))); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the holder's claim of %d is still there (%v)", a, err)
	}
	if got, err := os.Readlink(filepath.Join(uidRegistry, strconv.Itoa(b))); err != nil || got != other {
		t.Errorf("another holder's claim of %d = %q, %v; want it kept", b, got, err)
	}
}
