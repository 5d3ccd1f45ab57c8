package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/host/hostos"
	"github.com/tetherhq/tether/provider"
)

// What the provider keeps of a sandbox, on disk and in /proc: its
// meta.json, its processes found by their command line, and a lock per
// sandbox id.

// meta is what the provider records of a sandbox, in meta.json.
type meta struct {
	SandboxID string `json:"sandbox_id"`
	// InitPID is the sandbox's pid 1 as the host sees it, and InitStart its
	// start time in clock ticks since boot, which tells it from a later
	// process that reuses the pid.
	InitPID   int    `json:"init_pid"`
	InitStart uint64 `json:"init_start"`
	// UID is the host uid and gid the sandbox runs as (uid.go); zero in
	// sandboxes made before each had its own, which run as legacyUID.
	UID int               `json:"uid,omitempty"`
	Env map[string]string `json:"env,omitempty"`
	// Tenant owns the sandbox; its limits count against the tenant's share
	// of the host (ceiling.go).
	Tenant string `json:"tenant,omitempty"`
	// Limits are the sandbox's resource limits; zero when none are
	// enforced.
	Limits Limits `json:"limits"`
	// Image is the image the sandbox's root is (params.image); empty for
	// the host's system folders. Commands enter the root of the sandbox's
	// init, so they see it whatever images a later Tether registers.
	Image     string    `json:"image,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// Ready is set once setup succeeded: a sandbox found without it was
	// interrupted mid-creation and is made again.
	Ready bool `json:"ready"`
	// ServerFDs is how many descriptors the sandbox's exec server takes
	// with a request (requestFDs); 0 for a sandbox without a server, or
	// one whose server is older and takes three (olderRequestFDs).
	ServerFDs int `json:"server_fds,omitempty"`
	// Supervisor is the version of the process supervisor of the
	// sandbox's exec server (supervisorVersion); 0 for a sandbox without
	// a server, or one made by a Tether whose server had none.
	Supervisor int `json:"supervisor,omitempty"`
}

func (p *Provider) sandboxDir(id string) string { return filepath.Join(p.dir, id) }

func (p *Provider) lock(id string) func() { return p.locks.lock(id) }

// idLocks are one lock per sandbox id that a call holds or waits for, and
// no more: a create holds its sandbox's lock through its setup, which may
// take minutes, so a lock shared by two ids (a fixed set striped by hash,
// as before) made one tenant's create wait for another's setup.
type idLocks struct {
	mu    sync.Mutex
	locks map[string]*idLock
}

type idLock struct {
	mu   sync.Mutex
	refs int // calls holding or waiting for mu; guarded by idLocks.mu
}

// lock takes id's lock and returns what gives it back.
func (l *idLocks) lock(id string) func() {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[string]*idLock{}
	}
	k := l.locks[id]
	if k == nil {
		k = &idLock{}
		l.locks[id] = k
	}
	k.refs++
	l.mu.Unlock()
	k.mu.Lock()
	return func() {
		k.mu.Unlock()
		l.mu.Lock()
		if k.refs--; k.refs == 0 {
			delete(l.locks, id)
		}
		l.mu.Unlock()
	}
}

// sandboxProcesses finds the bwrap processes (the monitor and the
// sandbox's init) of every sandbox under the state folder, each sandbox's
// init before its monitor (so that a destroy that dies half-way leaves no
// init without its monitor: the monitor ends with its child). The monitor
// runs in the sandbox's folder (bwrapCmd.build), which names its id; the
// init is the monitor's bwrap child. (A sandbox an older Tether started
// names its folder in its command line, which binds its workspace.) It
// finds a sandbox even when its metadata was never written: Tether may die
// between starting bwrap and recording the pid.
func (p *Provider) sandboxProcesses() (map[string][]int, error) {
	procs, err := hostos.Processes("bwrap")
	if err != nil {
		return nil, err
	}
	out := map[string][]int{}
	monitors := map[int]string{}
	var others []hostos.Process
	for _, pr := range procs {
		if id := p.boundID(pr.Args); id != "" {
			out[id] = append(out[id], pr.PID)
		} else if id := p.folderID(pr.Cwd); id != "" {
			monitors[pr.PID] = id
		} else {
			others = append(others, pr)
		}
	}
	for _, pr := range others {
		if id, ok := monitors[pr.PPID]; ok {
			out[id] = append(out[id], pr.PID)
		}
	}
	for pid, id := range monitors {
		out[id] = append(out[id], pid)
	}
	return out, nil
}

// boundID is the sandbox whose workspace folder, under the state folder,
// the bwrap arguments args bind (an older Tether's command line), or "".
func (p *Provider) boundID(args []string) string {
	prefix, suffix := p.dir+"/", "/workspace"
	for i := 0; i+1 < len(args); i++ {
		if args[i] != "--bind" || !strings.HasPrefix(args[i+1], prefix) || !strings.HasSuffix(args[i+1], suffix) {
			continue
		}
		if id := strings.TrimSuffix(strings.TrimPrefix(args[i+1], prefix), suffix); provider.ValidSandboxID(id) {
			return id
		}
		return ""
	}
	return ""
}

// folderID is the sandbox whose folder, under the state folder, is cwd
// (a sandbox's bwrap monitor's working directory, removed or not); "" if
// none.
func (p *Provider) folderID(cwd string) string {
	id, ok := strings.CutPrefix(cwd, p.dir+"/")
	if !ok || !provider.ValidSandboxID(id) {
		return ""
	}
	return id
}

// processRunning reports whether pid runs (and is not a zombie).
func processRunning(pid int) bool {
	_, err := processStart(pid)
	return err == nil
}

func (p *Provider) readMeta(id string) (meta, error) {
	var m meta
	b, err := os.ReadFile(filepath.Join(p.sandboxDir(id), "meta.json"))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("meta.json: %w", err)
	}
	return m, nil
}

func (p *Provider) writeMeta(m meta) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	path := filepath.Join(p.sandboxDir(m.SandboxID), "meta.json")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// alive reports whether the sandbox's init still runs.
func (m meta) alive() bool {
	if m.InitPID <= 0 {
		return false
	}
	start, err := processStart(m.InitPID)
	return err == nil && start == m.InitStart
}

// processStart returns the start time of pid, in clock ticks since boot.
func processStart(pid int) (uint64, error) {
	fields, err := hostos.StatFields(pid)
	if err != nil {
		return 0, err
	}
	if len(fields) < 20 {
		return 0, errors.New("malformed stat")
	}
	if fields[0] == "Z" || fields[0] == "X" {
		return 0, errors.New("process is a zombie")
	}
	return strconv.ParseUint(fields[19], 10, 64) // field 22 overall
}
