package sim

// Simulated processes (provider.Processes), enough for the chaos storm and
// the API's tests: nothing runs; a process is a file, .procs-ID/PID.json
// beside the sandbox's resource file, which any provider over the folder
// (another replica, a restarted one) reads and changes under the folder's
// lock (.procs-ID/lock), and its state at a moment follows from the file
// and the clock. The programs it knows, by argv (or by the script of
// sh -c and bash -c, split at spaces):
//
//	sleep N        runs N seconds, then exits 0
//	cat            echoes its stdin to stdout; exits 0 once stdin is closed
//	               (at once without stdin)
//	echo ARGS      prints ARGS; env prints its environment; pwd its cwd
//	true, false, exit N
//	anything else  exits 127, saying "command not found" on stderr
//
// A signal ends any of them (but SIGCHLD, SIGCONT, SIGSTOP, SIGTSTP,
// SIGTTIN, SIGTTOU, SIGURG and SIGWINCH, which it ignores), a timeout with
// SIGKILL. Output is kept in the file, its last window bytes. The sim has
// no terminals (PTY: NOT_SUPPORTED) and no file watches.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tetherhq/tether/provider"
)

var _ provider.Processes = (*Provider)(nil)

// The defaults of the processes capability, per sandbox (the local
// provider's).
const (
	DefaultProcessMax    = 64
	DefaultProcessOutput = 1 << 20
	processKeep          = 60 * time.Second
	// attachPoll is how often an attach looks at the process's file.
	attachPoll = 20 * time.Millisecond
)

// Option configures a Provider.
type Option func(*Provider)

// WithProcessLimits sets how many processes a sandbox keeps at once and
// how many bytes of each one's output.
func WithProcessLimits(maxProcesses int, output int64) Option {
	return func(p *Provider) { p.procMax, p.procOutput = max(maxProcesses, 1), max(output, 1) }
}

// processesNote says what the sim's processes are, for Info.
const processesNote = "processes: simulated (sleep N, cat, echo, env, pwd, true, false, exit N, also as sh -c or bash -c; anything else exits 127), kept in the state folder; no terminals (PTY) and no file watches: NOT_SUPPORTED"

// simProc is a process's file.
type simProc struct {
	PID        int               `json:"pid"`
	Argv       []string          `json:"argv"`
	Env        map[string]string `json:"env,omitempty"`
	SandboxEnv map[string]string `json:"sandbox_env,omitempty"`
	Cwd        string            `json:"cwd,omitempty"`
	Tag        string            `json:"tag,omitempty"`
	Stdin      bool              `json:"stdin,omitempty"`
	StartedAt  time.Time         `json:"started_at"`
	Timeout    time.Duration     `json:"timeout,omitempty"`
	Window     int64             `json:"window"`
	// StdinClosed: cat has read its end.
	StdinClosed bool                  `json:"stdin_closed,omitempty"`
	Exit        *provider.ProcessExit `json:"exit,omitempty"`
	EndedAt     time.Time             `json:"ended_at,omitzero"`
	Chunks      []simChunk            `json:"chunks,omitempty"`
	// Start is the offset of the first byte kept, End past the last.
	Start int64 `json:"start"`
	End   int64 `json:"end"`
}

type simChunk struct {
	Kind   provider.ProcessEventKind `json:"kind"`
	Offset int64                     `json:"offset"`
	Data   []byte                    `json:"data"`
}

// program is what argv runs: its name and arguments, the script's when
// it is sh -c or bash -c.
func (sp *simProc) program() (string, []string) {
	argv := sp.Argv
	if len(argv) >= 3 && slices.Contains([]string{"sh", "bash", "dash"}, path.Base(argv[0])) {
		if i := slices.Index(argv, "-c"); i >= 0 && i+1 < len(argv) {
			argv = strings.Fields(argv[i+1])
			for j, a := range argv {
				argv[j] = strings.Trim(a, `'"`)
			}
		}
	}
	if len(argv) == 0 {
		return "true", nil
	}
	return path.Base(argv[0]), argv[1:]
}

// write appends output, dropping what falls out of the window.
func (sp *simProc) write(kind provider.ProcessEventKind, data []byte) {
	if len(data) == 0 {
		return
	}
	sp.Chunks = append(sp.Chunks, simChunk{Kind: kind, Offset: sp.End, Data: slices.Clone(data)})
	sp.End += int64(len(data))
	for sp.End-sp.Start > sp.Window {
		first := &sp.Chunks[0]
		over := sp.End - sp.Start - sp.Window
		if over >= int64(len(first.Data)) {
			sp.Start = first.Offset + int64(len(first.Data))
			sp.Chunks = sp.Chunks[1:]
			continue
		}
		first.Data, first.Offset = first.Data[over:], first.Offset+over
		sp.Start = first.Offset
	}
}

// end records the process's end at at.
func (sp *simProc) end(at time.Time, exit provider.ProcessExit) {
	if sp.Exit == nil {
		sp.Exit, sp.EndedAt = &exit, at
	}
}

func exited(code int) provider.ProcessExit {
	return provider.ProcessExit{Code: code, Exited: true, Status: "exit status " + strconv.Itoa(code)}
}

func signalled(sig int) provider.ProcessExit {
	return provider.ProcessExit{Code: -1, Signal: sig, Status: "signal: " + syscall.Signal(sig).String()}
}

// begin runs what the program does at its start.
func (sp *simProc) begin() {
	name, args := sp.program()
	now := sp.StartedAt
	switch name {
	case "sleep":
		return // advance ends it
	case "cat":
		if !sp.Stdin {
			sp.end(now, exited(0))
		}
		return
	case "echo":
		sp.write(provider.ProcessStdout, []byte(strings.Join(args, " ")+"\n"))
	case "env":
		env := maps.Clone(sp.SandboxEnv)
		if env == nil {
			env = map[string]string{}
		}
		maps.Copy(env, sp.Env)
		var b strings.Builder
		for _, k := range slices.Sorted(maps.Keys(env)) {
			b.WriteString(k + "=" + env[k] + "\n")
		}
		sp.write(provider.ProcessStdout, []byte(b.String()))
	case "pwd":
		sp.write(provider.ProcessStdout, []byte(cmp.Or(sp.Cwd, "/")+"\n"))
	case "true":
	case "false":
		sp.end(now, exited(1))
	case "exit":
		code := 0
		if len(args) > 0 {
			code, _ = strconv.Atoi(args[0])
		}
		sp.end(now, exited(code&0xff))
	default:
		sp.write(provider.ProcessStderr, []byte("sim: "+name+": command not found\n"))
		sp.end(now, exited(127))
	}
	sp.end(now, exited(0))
}

// advance ends the process if the clock says it ended by now: a sleep
// that is over, a timeout that passed.
func (sp *simProc) advance(now time.Time) {
	if sp.Exit != nil {
		return
	}
	end, exit := time.Time{}, provider.ProcessExit{}
	if name, args := sp.program(); name == "sleep" && len(args) > 0 {
		if secs, err := strconv.ParseFloat(args[0], 64); err == nil {
			end, exit = sp.StartedAt.Add(time.Duration(secs*float64(time.Second))), exited(0)
		}
	}
	if sp.Timeout > 0 && (end.IsZero() || sp.StartedAt.Add(sp.Timeout).Before(end)) {
		end, exit = sp.StartedAt.Add(sp.Timeout), signalled(int(syscall.SIGKILL))
	}
	if !end.IsZero() && !now.Before(end) {
		sp.end(end, exit)
	}
}

// info is the process as ProcessInfo says it.
func (sp *simProc) info() provider.ProcessInfo {
	return provider.ProcessInfo{PID: sp.PID, Tag: sp.Tag, Argv: sp.Argv, Env: sp.Env, Cwd: sp.Cwd, Stdin: sp.Stdin,
		StartedAt: sp.StartedAt, Running: sp.Exit == nil, Exit: sp.Exit, Kept: sp.End - sp.Start, Dropped: sp.Start}
}

// procs is the folder of a sandbox's processes.
func (p *Provider) procs(id string) string { return filepath.Join(p.dir, ".procs-"+id) }

// held returns the sandbox's record, or CodeProviderUnavailable.
func (p *Provider) held(id string) (record, error) {
	var rec record
	b, err := os.ReadFile(filepath.Join(p.dir, id))
	if !validName(id) || err != nil {
		return rec, provider.Errorf(provider.CodeProviderUnavailable, "sandbox %s is not held by the simulator", id)
	}
	_ = json.Unmarshal(b, &rec)
	return rec, nil
}

// lockProcs takes the sandbox's process lock, making its folder.
func (p *Provider) lockProcs(id string) (func(), error) {
	dir := p.procs(id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("sim: processes: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("sim: processes: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("sim: processes: %w", err)
	}
	return func() { _ = f.Close() }, nil
}

// load reads every process of the sandbox, as they are at now, oldest
// first; those ended longer than processKeep ago are gone.
func (p *Provider) load(id string, now time.Time) ([]*simProc, error) {
	entries, err := os.ReadDir(p.procs(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sim: processes: %w", err)
	}
	var out []*simProc
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(p.procs(id), e.Name()))
		var sp simProc
		if err != nil || json.Unmarshal(b, &sp) != nil {
			continue // removed meanwhile, or being written: rename makes that atomic
		}
		sp.advance(now)
		if sp.Exit != nil && now.Sub(sp.EndedAt) > processKeep {
			continue
		}
		out = append(out, &sp)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out, nil
}

// save writes sp's file whole; the caller holds the lock.
func (p *Provider) save(id string, sp *simProc) error {
	b, err := json.Marshal(sp)
	if err != nil {
		return err
	}
	name := filepath.Join(p.procs(id), strconv.Itoa(sp.PID)+".json")
	if err := os.WriteFile(name+".tmp", b, 0o644); err != nil {
		return fmt.Errorf("sim: processes: %w", err)
	}
	if err := os.Rename(name+".tmp", name); err != nil {
		return fmt.Errorf("sim: processes: %w", err)
	}
	return nil
}

// remove drops sp's file; the caller holds the lock.
func (p *Provider) remove(id string, sp *simProc) {
	_ = os.Remove(filepath.Join(p.procs(id), strconv.Itoa(sp.PID)+".json"))
}

// find returns the process sel names among procs.
func find(procs []*simProc, sel provider.ProcessSelector) (*simProc, error) {
	if sel.PID < 0 || (sel.PID == 0 && sel.Tag == "") {
		return nil, provider.Errorf(provider.CodeInvalidRequest, "a process is selected by its pid or its tag")
	}
	var best *simProc
	for _, sp := range procs {
		switch {
		case sel.PID != 0 && sp.PID == sel.PID:
			return sp, nil
		case sel.PID == 0 && sp.Tag == sel.Tag:
			if best == nil || (sp.Exit == nil && best.Exit != nil) || ((sp.Exit == nil) == (best.Exit == nil) && sp.PID > best.PID) {
				best = sp
			}
		}
	}
	if best == nil {
		return nil, provider.Errorf(provider.CodeProcessNotFound, "no process %d%s in the sandbox", sel.PID, tagged(sel.Tag))
	}
	return best, nil
}

func tagged(tag string) string {
	if tag == "" {
		return ""
	}
	return " tagged " + strconv.Quote(tag)
}

// StartProcess implements provider.Processes.
func (p *Provider) StartProcess(ctx context.Context, sandboxID string, spec provider.ProcessSpec) (provider.ProcessInfo, error) {
	switch {
	case len(spec.Argv) == 0 || spec.Argv[0] == "":
		return provider.ProcessInfo{}, provider.Errorf(provider.CodeInvalidRequest, "process: argv names no command")
	case spec.PTY != nil:
		return provider.ProcessInfo{}, provider.Errorf(provider.CodeNotSupported, "the simulator has no terminals")
	case spec.Timeout < 0 || (spec.Cwd != "" && !path.IsAbs(spec.Cwd)):
		return provider.ProcessInfo{}, provider.Errorf(provider.CodeInvalidRequest, "process: a negative timeout, or a cwd that is not absolute")
	}
	rec, err := p.held(sandboxID)
	if err != nil {
		return provider.ProcessInfo{}, err
	}
	unlock, err := p.lockProcs(sandboxID)
	if err != nil {
		return provider.ProcessInfo{}, err
	}
	defer unlock()
	if _, err := p.held(sandboxID); err != nil { // destroyed meanwhile: leave nothing
		_ = os.RemoveAll(p.procs(sandboxID))
		return provider.ProcessInfo{}, err
	}
	now := time.Now().UTC()
	procs, err := p.load(sandboxID, now)
	if err != nil {
		return provider.ProcessInfo{}, err
	}
	if err := p.makeRoom(sandboxID, procs); err != nil {
		return provider.ProcessInfo{}, err
	}
	pid, err := p.nextPID(sandboxID)
	if err != nil {
		return provider.ProcessInfo{}, err
	}
	sp := &simProc{PID: pid, Argv: slices.Clone(spec.Argv), Env: maps.Clone(spec.Env), SandboxEnv: rec.Env, Cwd: spec.Cwd,
		Tag: spec.Tag, Stdin: spec.Stdin, StartedAt: now, Timeout: spec.Timeout, Window: p.procOutput}
	sp.begin()
	if err := p.save(sandboxID, sp); err != nil {
		return provider.ProcessInfo{}, err
	}
	return sp.info(), ctx.Err()
}

// makeRoom forgets the processes that ended first while the sandbox keeps
// the most it may; with all of them running there is no room.
func (p *Provider) makeRoom(id string, procs []*simProc) error {
	for len(procs) >= p.procMax {
		i := -1
		for j, sp := range procs {
			if sp.Exit != nil && (i < 0 || sp.EndedAt.Before(procs[i].EndedAt)) {
				i = j
			}
		}
		if i < 0 {
			return provider.Errorf(provider.CodeQuotaExceeded, "the sandbox runs %d processes already, the most it may keep", len(procs))
		}
		p.remove(id, procs[i])
		procs = slices.Delete(procs, i, i+1)
	}
	return nil
}

// nextPID hands out the sandbox's next pid; the caller holds the lock.
func (p *Provider) nextPID(id string) (int, error) {
	name := filepath.Join(p.procs(id), "last-pid")
	b, _ := os.ReadFile(name)
	last, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	pid := max(last, 99) + 1
	if err := os.WriteFile(name, []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return 0, fmt.Errorf("sim: processes: %w", err)
	}
	return pid, nil
}

// ListProcesses implements provider.Processes.
func (p *Provider) ListProcesses(ctx context.Context, sandboxID string) ([]provider.ProcessInfo, error) {
	if _, err := p.held(sandboxID); err != nil {
		return nil, err
	}
	procs, err := p.load(sandboxID, time.Now().UTC())
	if err != nil {
		return nil, err
	}
	out := make([]provider.ProcessInfo, 0, len(procs))
	for _, sp := range procs {
		out = append(out, sp.info())
	}
	return out, ctx.Err()
}

// change applies fn to the process sel names, under the lock, and saves
// it.
func (p *Provider) change(sandboxID string, sel provider.ProcessSelector, fn func(*simProc) error) error {
	if _, err := p.held(sandboxID); err != nil {
		return err
	}
	unlock, err := p.lockProcs(sandboxID)
	if err != nil {
		return err
	}
	defer unlock()
	procs, err := p.load(sandboxID, time.Now().UTC())
	if err != nil {
		return err
	}
	sp, err := find(procs, sel)
	if err != nil {
		return err
	}
	if err := fn(sp); err != nil {
		return err
	}
	return p.save(sandboxID, sp)
}

func endedErr(sp *simProc) error {
	return provider.Errorf(provider.CodeProcessNotFound, "process %d has ended", sp.PID)
}

// WriteStdin implements provider.Processes: cat echoes it, the others
// read it into nothing.
func (p *Provider) WriteStdin(_ context.Context, sandboxID string, sel provider.ProcessSelector, data []byte) error {
	return p.change(sandboxID, sel, func(sp *simProc) error {
		switch {
		case sp.Exit != nil:
			return endedErr(sp)
		case !sp.Stdin:
			return provider.Errorf(provider.CodeInvalidRequest, "process %d has no stdin (start it with stdin)", sp.PID)
		case sp.StdinClosed:
			return provider.Errorf(provider.CodeInvalidRequest, "process %d's stdin is closed", sp.PID)
		}
		if name, _ := sp.program(); name == "cat" {
			sp.write(provider.ProcessStdout, data)
		}
		return nil
	})
}

// CloseStdin implements provider.Processes: cat then exits 0.
func (p *Provider) CloseStdin(_ context.Context, sandboxID string, sel provider.ProcessSelector) error {
	return p.change(sandboxID, sel, func(sp *simProc) error {
		switch {
		case sp.Exit != nil:
			return endedErr(sp)
		case !sp.Stdin:
			return provider.Errorf(provider.CodeInvalidRequest, "process %d has no stdin (start it with stdin)", sp.PID)
		}
		sp.StdinClosed = true
		if name, _ := sp.program(); name == "cat" {
			sp.end(time.Now().UTC(), exited(0))
		}
		return nil
	})
}

// ignoredSignals do not end a simulated process.
var ignoredSignals = []syscall.Signal{syscall.SIGCHLD, syscall.SIGCONT, syscall.SIGSTOP, syscall.SIGTSTP,
	syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGURG, syscall.SIGWINCH}

// SignalProcess implements provider.Processes.
func (p *Provider) SignalProcess(_ context.Context, sandboxID string, sel provider.ProcessSelector, signal int) error {
	if signal < 1 || signal > 64 {
		return provider.Errorf(provider.CodeInvalidRequest, "signal %d is not a signal (1 to 64)", signal)
	}
	return p.change(sandboxID, sel, func(sp *simProc) error {
		if sp.Exit != nil {
			return endedErr(sp)
		}
		if !slices.Contains(ignoredSignals, syscall.Signal(signal)) {
			sp.end(time.Now().UTC(), signalled(signal))
		}
		return nil
	})
}

// AttachProcess implements provider.Processes, looking at the process's
// file every attachPoll.
func (p *Provider) AttachProcess(ctx context.Context, sandboxID string, sel provider.ProcessSelector, from provider.AttachFrom, emit func(provider.ProcessEvent) error) error {
	sp, err := p.lookup(sandboxID, sel)
	if err != nil {
		return err
	}
	if err := emit(provider.ProcessEvent{Kind: provider.ProcessStart, PID: sp.PID}); err != nil {
		return err
	}
	cursor := sp.End
	if from == provider.AttachStart {
		cursor = 0
	}
	sel = provider.ProcessSelector{PID: sp.PID}
	tick := time.NewTicker(attachPoll)
	defer tick.Stop()
	for {
		var done bool
		if cursor, done, err = sendFrom(sp, cursor, emit); err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sim: attach: %w", ctx.Err())
		case <-tick.C:
		}
		if sp, err = p.lookup(sandboxID, sel); err != nil {
			return err
		}
	}
}

// lookup reads the process sel names as it is now.
func (p *Provider) lookup(sandboxID string, sel provider.ProcessSelector) (*simProc, error) {
	if _, err := p.held(sandboxID); err != nil {
		return nil, err
	}
	procs, err := p.load(sandboxID, time.Now().UTC())
	if err != nil {
		return nil, err
	}
	return find(procs, sel)
}

// sendFrom emits what sp holds from cursor on (a dropped event first if
// cursor fell out of the window), and its end if it ended.
func sendFrom(sp *simProc, cursor int64, emit func(provider.ProcessEvent) error) (int64, bool, error) {
	if cursor < sp.Start {
		if err := emit(provider.ProcessEvent{Kind: provider.ProcessDropped, Offset: sp.Start, Dropped: sp.Start - cursor}); err != nil {
			return cursor, true, err
		}
		cursor = sp.Start
	}
	for _, c := range sp.Chunks {
		end := c.Offset + int64(len(c.Data))
		if end <= cursor {
			continue
		}
		data := c.Data[max(cursor-c.Offset, 0):]
		if err := emit(provider.ProcessEvent{Kind: c.Kind, Data: data, Offset: end - int64(len(data))}); err != nil {
			return cursor, true, err
		}
		cursor = end
	}
	if sp.Exit != nil && cursor == sp.End {
		return cursor, true, emit(provider.ProcessEvent{Kind: provider.ProcessEnd, Exit: sp.Exit})
	}
	return cursor, false, nil
}
