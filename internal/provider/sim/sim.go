// Package sim is a simulated cloud provider for tests, benchmarks and chaos
// runs.
//
// Its inventory lives outside the Tether process, in a state directory, so it
// survives a Tether crash the way a real cloud does: one file per live
// resource, named exactly the sandbox id, and creates.log with one line per
// create call that made a resource (the sandbox id first). Several Tether
// processes may share one state directory.
//
// calls.log records every create and destroy call, whatever came of it, for
// the chaos harness to find calls that overlapped (two creates of one
// sandbox at once) and to time releases: a "begin" line when a call starts
// and an "end" line when it returns (a call cut short by its process's
// death has no end), each
//
//	begin OP ID PID EPOCH START
//	end OP ID PID EPOCH START END OUTCOME
//
// with OP create or destroy, PID the calling process, EPOCH the claim's
// (CreateSpec.Epoch; 0 for a destroy), times in RFC 3339 with nanoseconds,
// and OUTCOME made, exists or failed for a create, removed, absent or
// failed for a destroy.
//
// Per-sandbox behaviour comes from the create request's params:
//
//	create_delay_ms   how long a create takes
//	destroy_delay_ms  how long a destroy takes
//	pause_delay_ms    how long a pause or a resume takes
//	fail              "create": every create fails (not retryable);
//	                  "create_once": the first create attempt in this process
//	                  fails retryably; "destroy_once": the first destroy
//	                  attempt in this process fails; "pause", "resume": every
//	                  pause (resume) is refused (not retryable);
//	                  "pause_once", "resume_once": the first pause (resume)
//	                  attempt in this process fails retryably
//
// A paused sandbox has a hidden marker file, .paused-ID, beside its
// resource file (List skips it; Destroy removes it).
//
// Snapshots: see snapshot.go.
//
//	ignore_cancel     the create completes even if its caller gives up, like
//	                  a cloud API call that was already sent ("late" creation)
//	ports             the ports the sandbox's simulated server listens on
//	                  (an echo of HTTP and WebSocket traffic; ports.go)
package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/tetherhq/tether/provider"
)

// Name is the provider's name.
const Name = "sim"

// createsLog is the file that records every create that made a resource,
// and callsLog the one that records every create and destroy call.
const (
	createsLog = "creates.log"
	callsLog   = "calls.log"
)

// maxDelay bounds the simulated latencies.
const maxDelay = 10 * time.Minute

// Provider is the simulated provider. It is safe for concurrent use.
type Provider struct {
	dir string

	// fsMu serialises this process's changes to the state folder; log is
	// creates.log, opened once.
	fsMu sync.Mutex
	log  *os.File
	// calls is calls.log, opened by New; one write per line.
	calls *os.File

	mu sync.Mutex
	// failedOnce remembers, per sandbox and operation, that the one-time
	// failure was already injected in this process.
	failedOnce map[string]bool
	// snapshotting counts the Snapshot calls in flight per sandbox, and
	// overlaps the Destroy calls that came while one was (a release that
	// did not wait for its snapshot): see Overlaps.
	snapshotting map[string]int
	overlaps     int

	// procMax and procOutput are the processes capability's limits per
	// sandbox (processes.go).
	procMax    int
	procOutput int64
}

// New returns a provider keeping its inventory in dir, creating dir if
// needed.
func New(dir string, opts ...Option) (*Provider, error) {
	if dir == "" {
		return nil, errors.New("sim: state directory not set")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("sim: state directory: %w", err)
	}
	calls, err := os.OpenFile(filepath.Join(dir, callsLog), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("sim: state directory: %w", err)
	}
	p := &Provider{dir: dir, calls: calls, failedOnce: make(map[string]bool), snapshotting: make(map[string]int),
		procMax: DefaultProcessMax, procOutput: DefaultProcessOutput}
	for _, opt := range opts {
		opt(p)
	}
	return p, nil
}

// call records the start of a create or destroy call in calls.log and
// returns what records its end with the call's outcome.
func (p *Provider) call(op, id string, epoch int64) (end func(outcome string)) {
	start := time.Now().UTC().Format(time.RFC3339Nano)
	head := fmt.Sprintf("%s %s %d %d %s", op, id, os.Getpid(), epoch, start)
	// One write per line: O_APPEND keeps the lines of concurrent writers
	// (other Tether processes) whole. A failed write loses a line of a
	// test's record, not the call.
	_, _ = p.calls.WriteString("begin " + head + "\n")
	return func(outcome string) {
		_, _ = p.calls.WriteString("end " + head + " " + time.Now().UTC().Format(time.RFC3339Nano) + " " + outcome + "\n")
	}
}

// Params are the sim's create params.
type Params struct {
	CreateDelayMS  int `json:"create_delay_ms,omitempty"`
	DestroyDelayMS int `json:"destroy_delay_ms,omitempty"`
	PauseDelayMS   int `json:"pause_delay_ms,omitempty"`
	// SnapshotDelayMS and SnapshotBytes shape the sandbox's snapshots
	// (snapshot.go).
	SnapshotDelayMS int    `json:"snapshot_delay_ms,omitempty"`
	SnapshotBytes   int64  `json:"snapshot_bytes,omitempty"`
	Fail            string `json:"fail,omitempty"`
	IgnoreCancel    bool   `json:"ignore_cancel,omitempty"`
	// Ports are the ports the simulated sandbox listens on (ports.go).
	Ports []int `json:"ports,omitempty"`
}

// maxPorts bounds params.ports.
const maxPorts = 16

func parseParams(raw json.RawMessage) (Params, error) {
	var p Params
	// No params (every create that names none has {}) decode nothing: the
	// decoder is most of a create's cost in this provider.
	if err := provider.DecodeParams(Name, raw, &p, ""); err != nil {
		return p, err
	}
	switch p.Fail {
	case "", "create", "create_once", "destroy_once", "pause", "pause_once", "resume", "resume_once", "snapshot", "snapshot_once":
	default:
		return p, provider.Errorf(provider.CodeInvalidRequest,
			"params.fail must be one of create, create_once, destroy_once, pause, pause_once, resume, resume_once, snapshot, snapshot_once (got %q)", p.Fail)
	}
	if p.SnapshotBytes < 0 || p.SnapshotBytes > 1<<50 {
		return p, provider.Errorf(provider.CodeInvalidRequest, "params.snapshot_bytes must be between 0 and %d", int64(1)<<50)
	}
	for name, ms := range map[string]int{"create_delay_ms": p.CreateDelayMS, "destroy_delay_ms": p.DestroyDelayMS,
		"pause_delay_ms": p.PauseDelayMS, "snapshot_delay_ms": p.SnapshotDelayMS} {
		if ms < 0 || int64(ms) > maxDelay.Milliseconds() {
			return p, provider.Errorf(provider.CodeInvalidRequest, "params.%s must be between 0 and %d", name, maxDelay.Milliseconds())
		}
	}
	if len(p.Ports) > maxPorts {
		return p, provider.Errorf(provider.CodeInvalidRequest, "params.ports may name at most %d ports", maxPorts)
	}
	for _, port := range p.Ports {
		if port < 1 || port > 65535 {
			return p, provider.Errorf(provider.CodeInvalidRequest, "params.ports must be ports 1-65535 (got %d)", port)
		}
	}
	return p, nil
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return Name }

// Info implements provider.Provider.
func (p *Provider) Info(context.Context) provider.Info {
	return provider.Info{
		Name:      Name,
		Available: true,
		Processes: true,
		Notes:     []string{"simulated: resources are files in " + p.dir, processesNote},
	}
}

// ValidateParams implements provider.Provider.
func (p *Provider) ValidateParams(raw json.RawMessage) error {
	_, err := parseParams(raw)
	return err
}

// record is the content of a resource file.
type record struct {
	SandboxID string          `json:"sandbox_id"`
	CreatedAt time.Time       `json:"created_at"`
	PID       int             `json:"pid"`
	Params    json.RawMessage `json:"params,omitempty"`
	// FromSnapshot is the snapshot the sandbox was created from.
	FromSnapshot string `json:"from_snapshot,omitempty"`
	// Env is the sandbox's environment, which its processes get.
	Env map[string]string `json:"env,omitempty"`
}

// Create implements provider.Provider.
func (p *Provider) Create(ctx context.Context, spec provider.CreateSpec) (provider.Resource, error) {
	if !validName(spec.SandboxID) {
		return provider.Resource{}, fmt.Errorf("sim: create: invalid sandbox id %q", spec.SandboxID)
	}
	end := p.call("create", spec.SandboxID, spec.Epoch)
	res, made, err := p.create(ctx, spec)
	switch {
	case err != nil:
		end("failed")
	case made:
		end("made")
	default:
		end("exists")
	}
	return res, err
}

// create is Create's work; made reports whether this call made the
// resource (rather than finding it made).
func (p *Provider) create(ctx context.Context, spec provider.CreateSpec) (_ provider.Resource, made bool, _ error) {
	params, err := parseParams(spec.Params)
	if err != nil {
		return provider.Resource{}, false, fmt.Errorf("sim: create: %w", err)
	}
	if res, err := p.resource(spec.SandboxID); err == nil {
		return res, false, nil // idempotent: it exists already
	}
	switch params.Fail {
	case "create":
		return provider.Resource{}, false, errors.New("sim: create: injected failure")
	case "create_once":
		if p.firstFailure("create/" + spec.SandboxID) {
			return provider.Resource{}, false, provider.Retryable(errors.New("sim: create: injected transient failure"))
		}
	}
	if spec.FromSnapshot != "" && !p.HasSnapshot(spec.FromSnapshot) {
		return provider.Resource{}, false, fmt.Errorf("sim: create: snapshot %s not found", spec.FromSnapshot)
	}
	delay := time.Duration(params.CreateDelayMS) * time.Millisecond
	if params.IgnoreCancel {
		time.Sleep(delay) // the simulated request was sent: it completes regardless
	} else if err := sleep(ctx, delay); err != nil {
		return provider.Resource{}, false, fmt.Errorf("sim: create: %w", err)
	}

	// One file operation at a time in this process: concurrent creates in
	// one folder otherwise spin on the kernel's directory lock.
	p.fsMu.Lock()
	defer p.fsMu.Unlock()
	path := filepath.Join(p.dir, spec.SandboxID)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		res, err := p.resource(spec.SandboxID) // a concurrent call made it
		return res, false, err
	}
	if err != nil {
		return provider.Resource{}, false, fmt.Errorf("sim: create: %w", err)
	}
	now := time.Now().UTC()
	rec, _ := json.Marshal(record{SandboxID: spec.SandboxID, CreatedAt: now, PID: os.Getpid(), Params: spec.Params,
		FromSnapshot: spec.FromSnapshot, Env: spec.Env})
	_, werr := f.Write(append(rec, '\n'))
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return provider.Resource{}, false, fmt.Errorf("sim: create: %w", werr)
	}
	if err := p.logCreate(spec.SandboxID, now); err != nil {
		return provider.Resource{}, false, fmt.Errorf("sim: create: %w", err)
	}
	return provider.Resource{SandboxID: spec.SandboxID, ProviderID: "sim-" + spec.SandboxID, CreatedAt: now}, true, nil
}

// logCreate appends a line to creates.log; the caller holds fsMu.
func (p *Provider) logCreate(id string, at time.Time) error {
	if p.log == nil {
		f, err := os.OpenFile(filepath.Join(p.dir, createsLog), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		p.log = f
	}
	// One write per line: O_APPEND keeps the lines of concurrent writers
	// (other Tether processes) whole.
	_, err := fmt.Fprintf(p.log, "%s %s %d\n", id, at.Format(time.RFC3339Nano), os.Getpid())
	return err
}

// Destroy implements provider.Provider.
func (p *Provider) Destroy(ctx context.Context, sandboxID string) error {
	if !validName(sandboxID) {
		return fmt.Errorf("sim: destroy: invalid sandbox id %q", sandboxID)
	}
	end := p.call("destroy", sandboxID, 0)
	removed, err := p.destroy(ctx, sandboxID)
	switch {
	case err != nil:
		end("failed")
	case removed:
		end("removed")
	default:
		end("absent")
	}
	return err
}

// destroy is Destroy's work; removed reports whether this call removed the
// resource (rather than finding none).
func (p *Provider) destroy(ctx context.Context, sandboxID string) (removed bool, _ error) {
	p.mu.Lock()
	if p.snapshotting[sandboxID] > 0 {
		p.overlaps++
	}
	p.mu.Unlock()
	path := filepath.Join(p.dir, sandboxID)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("sim: destroy: %w", err)
	}
	var rec record
	_ = json.Unmarshal(b, &rec) // a damaged record still gets destroyed
	params, _ := parseParams(rec.Params)
	if params.Fail == "destroy_once" && p.firstFailure("destroy/"+sandboxID) {
		return false, errors.New("sim: destroy: injected failure")
	}
	if err := sleep(ctx, time.Duration(params.DestroyDelayMS)*time.Millisecond); err != nil {
		return false, fmt.Errorf("sim: destroy: %w", err)
	}
	p.fsMu.Lock()
	err = os.Remove(path)
	if merr := os.Remove(p.pausedMarker(sandboxID)); err == nil && !errors.Is(merr, fs.ErrNotExist) {
		err = merr
	}
	if perr := os.RemoveAll(p.procs(sandboxID)); err == nil {
		err = perr // its processes end with it
	}
	p.fsMu.Unlock()
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil // a concurrent call removed it
	}
	if err != nil {
		return false, fmt.Errorf("sim: destroy: %w", err)
	}
	return true, nil
}

// List implements provider.Provider.
func (p *Provider) List(context.Context) ([]provider.Resource, error) {
	entries, err := os.ReadDir(p.dir)
	if err != nil {
		return nil, fmt.Errorf("sim: list: %w", err)
	}
	out := make([]provider.Resource, 0, len(entries))
	for _, e := range entries {
		if !e.Type().IsRegular() || !validName(e.Name()) {
			continue
		}
		res := provider.Resource{SandboxID: e.Name(), ProviderID: "sim-" + e.Name()}
		if info, err := e.Info(); err == nil {
			res.CreatedAt = info.ModTime().UTC()
		}
		out = append(out, res)
	}
	return out, nil
}

func (p *Provider) resource(id string) (provider.Resource, error) {
	info, err := os.Stat(filepath.Join(p.dir, id))
	if err != nil {
		return provider.Resource{}, err
	}
	return provider.Resource{SandboxID: id, ProviderID: "sim-" + id, CreatedAt: info.ModTime().UTC()}, nil
}

// firstFailure reports whether the one-time failure named key is yet to be
// injected, and marks it injected.
func (p *Provider) firstFailure(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failedOnce[key] {
		return false
	}
	p.failedOnce[key] = true
	return true
}

// validName reports whether name can be a resource file: not the log, not
// hidden, no path separators.
func validName(name string) bool {
	return name != "" && name != createsLog && name != callsLog && !strings.HasPrefix(name, ".") &&
		!strings.ContainsAny(name, `/\`) && !strings.HasSuffix(name, ".tmp")
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
