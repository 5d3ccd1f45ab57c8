package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/host/hostos"
	"github.com/tetherhq/tether/internal/provider/local"
	"github.com/tetherhq/tether/internal/store"
)

// The local provider's phases: Tether's real sandboxes (bubblewrap) against
// bare bwrap and nsenter on the same host, in the same run, the two sides
// of each ratio taking turns so that the machine's noise lands on both.
// Isolation should not be bought with speed: Tether may add its HTTP, its
// database and its bookkeeping to what the kernel costs, but not multiply
// it.

// localBench holds the folders of the local phases, all under root (o+x,
// so that the sandboxes' users can reach what is bound into them): state,
// the LOCAL_STATE_DIR of the Tether under test; bare, the folder of the
// baseline's bwrap; inproc, that of the provider run in this process.
type localBench struct {
	root, state, bare, inproc string
	nsenter                   string
}

// bareUID is the uid the baseline's bwrap runs as: nobody, outside the
// range the provider hands its sandboxes, so that it never takes one's.
const bareUID = 65534

// newLocalBench prepares the local phases, or says why they do not run
// (reason, with a nil bench).
func newLocalBench(wanted bool) (lb *localBench, reason string, err error) {
	if !wanted {
		return nil, "-local=false", nil
	}
	if os.Geteuid() != 0 {
		return nil, "not running as root (the local provider runs each sandbox as a uid of its own, which takes root)", nil
	}
	paths := map[string]string{}
	var missing []string
	for _, name := range []string{"bwrap", "nsenter", "setpriv"} {
		path, err := exec.LookPath(name)
		if err != nil {
			missing = append(missing, name)
			continue
		}
		paths[name] = path
	}
	if len(missing) > 0 {
		return nil, "missing on this host: " + strings.Join(missing, ", ") + " (Debian packages bubblewrap and util-linux)", nil
	}
	root, err := os.MkdirTemp("", "tether-bench-local-")
	if err != nil {
		return nil, "", err
	}
	if err := os.Chmod(root, 0o711); err != nil {
		return nil, "", err
	}
	return &localBench{root: root, state: filepath.Join(root, "state"), bare: filepath.Join(root, "bare"),
		inproc: filepath.Join(root, "inproc"), nsenter: paths["nsenter"]}, "", nil
}

// close kills what is left running from the bench's folders (sandboxes of
// a run that failed half-way outlive Tether, by design) and removes them.
func (lb *localBench) close() {
	procs, _ := bwrapProcesses()
	mine := map[int]bool{}
	for _, p := range procs {
		mine[p.PID] = names(p, lb.root+"/")
	}
	for _, p := range procs {
		if mine[p.PID] || mine[p.PPID] { // a monitor, or its child the init
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
		}
	}
	// A sandbox's size-limited /workspace is a mount (its loop device
	// goes with it): detach what a failed run left before removing.
	if b, err := os.ReadFile("/proc/self/mounts"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], lb.root+"/") {
				_ = syscall.Unmount(f[1], syscall.MNT_DETACH)
			}
		}
	}
	_ = os.RemoveAll(lb.root)
}

var localCreateBody = []byte(`{"provider":"local"}`)

// measureLocal starts a Tether with the local provider on the database
// dbURL, runs the local phases against it (localPhases) and stops it.
func measureLocal(ctx context.Context, root, dbURL string, lb *localBench, o options, logf func(string, ...any)) ([]target, []string, error) {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return nil, nil, err
	}
	_, err = store.New(pool).Migrate(ctx)
	pool.Close()
	if err != nil {
		return nil, nil, err
	}
	logf("building and starting a Tether with the local provider")
	srv, err := startTether(ctx, root, dbURL, []string{"PROVIDERS=sim,local", "LOCAL_STATE_DIR=" + lb.state}, o)
	if err != nil {
		return nil, nil, err
	}
	defer srv.stop()
	a := newAPI(srv.base, "bench-key", 2)
	defer a.wire.close()
	return localPhases(ctx, a, lb, o.localSandboxes, o.localExecs, logf)
}

// localPhases runs the two local phases: n sandboxes created through
// Tether, each against a bare bwrap start and the provider's Create in this
// process; then execs calls of `true` through Tether into one sandbox, each
// against a bare nsenter into it and the provider's Exec in this process.
func localPhases(ctx context.Context, a *api, lb *localBench, n, execs int, logf func(string, ...any)) ([]target, []string, error) {
	if reason, err := a.providerProblem(ctx, local.Name); err != nil {
		return nil, nil, err
	} else if reason != "" {
		note := "Local provider phases skipped: Tether reports the provider unavailable: " + reason
		logf("%s", note)
		return nil, []string{note}, nil
	}
	lr := &localRun{a: a, lb: lb, live: map[string]bool{}}
	defer lr.endLive(ctx)
	// The provider in this process, to split Tether's time between the
	// provider and the rest; its sandboxes are its own, in another folder.
	p, err := local.New(lb.inproc)
	if err != nil {
		return nil, nil, err
	}
	if info := p.Info(ctx); !info.Available {
		logf("local provider in process unavailable (%s): no in-process rows", info.Reason)
	} else {
		lr.p = p
	}

	var s localSamples
	logf("local sandboxes: %d sequential creates (POST, ?wait until ready), each against a bare bwrap start", n)
	if err := lr.measureCreates(ctx, n, &s); err != nil {
		return nil, nil, err
	}
	logf("local exec: %d sequential `true` through Tether, each against a bare nsenter into the same sandbox", execs)
	if err := lr.measureExecs(ctx, execs, &s); err != nil {
		return nil, nil, err
	}
	targets, notes := s.report(n, execs, lr.p != nil)
	for _, note := range notes {
		logf("%s", note)
	}
	for _, t := range targets {
		logf("%s: %.2f ms against %.2f %s, ratio %.2f (want %s)", t.Name, t.Measured, t.Baseline, t.Against, t.Ratio, t.Want)
	}
	return targets, notes, nil
}

// localRun is one run of the local phases: Tether's API, the bench's
// folders, the provider in this process (nil where it cannot run) and the
// sandboxes created through Tether and not yet ended.
type localRun struct {
	a    *api
	lb   *localBench
	p    *local.Provider
	live map[string]bool
}

// localSamples are the local phases' measurements: creates through Tether
// (and their steps), bare bwrap starts and in-process Creates; execs
// through Tether, bare nsenters and in-process Execs.
type localSamples struct {
	viaTether, bare, inproc          latencies
	steps                            readySteps
	execTether, execBare, execInproc latencies
	// execSpawn are fork, exec and wait of the host's `sh -c true`: what
	// starting the command's shell costs wherever it starts (hostSpawn).
	execSpawn latencies
}

// endLive ends through Tether the sandboxes still alive (after an error
// half-way).
func (lr *localRun) endLive(ctx context.Context) {
	for id := range lr.live {
		_ = lr.a.end(context.WithoutCancel(ctx), id)
	}
}

// create creates a local sandbox through Tether and waits until it is
// ready.
func (lr *localRun) create(ctx context.Context) (string, error) {
	sb, err := lr.a.createWith(ctx, localCreateBody)
	if err != nil {
		return "", fmt.Errorf("local create: %w", err)
	}
	lr.live[sb.ID] = true
	if err := lr.a.waitReady(ctx, sb.ID); err != nil {
		return "", fmt.Errorf("local create: %w", err)
	}
	return sb.ID, nil
}

// end ends the sandbox id through Tether and waits until it is released.
func (lr *localRun) end(ctx context.Context, id string) error {
	if err := lr.a.end(ctx, id); err != nil {
		return fmt.Errorf("local delete: %w", err)
	}
	delete(lr.live, id)
	return nil
}

// measureCreates times n creates through Tether, each followed by a bare
// bwrap start and, with a provider in process, its Create.
func (lr *localRun) measureCreates(ctx context.Context, n int, s *localSamples) error {
	var bb *bareBwrap
	for range n {
		start := time.Now()
		id, err := lr.create(ctx)
		if err != nil {
			return err
		}
		seen := time.Now()
		s.viaTether = append(s.viaTether, seen.Sub(start))
		if err := lr.a.addSteps(ctx, &s.steps, id, start, seen); err != nil {
			return err
		}
		if bb == nil {
			// The baseline is this sandbox's own command line, taken while
			// it runs.
			if bb, err = lr.lb.bareFrom(id); err != nil {
				return err
			}
		}
		if err := lr.end(ctx, id); err != nil {
			return err
		}
		d, err := bb.start()
		if err != nil {
			return err
		}
		s.bare = append(s.bare, d)
		if lr.p != nil {
			if d, err = lr.inprocCreate(ctx); err != nil {
				return err
			}
			s.inproc = append(s.inproc, d)
		}
	}
	return nil
}

// inprocCreate times one Create of the provider in process, until ready;
// the sandbox is then destroyed, untimed.
func (lr *localRun) inprocCreate(ctx context.Context) (time.Duration, error) {
	id := domain.NewID()
	start := time.Now()
	_, err := lr.p.Create(ctx, domain.CreateSpec{SandboxID: id})
	took := time.Since(start)
	if derr := lr.p.Destroy(context.WithoutCancel(ctx), id); err == nil {
		err = derr
	}
	if err != nil {
		return 0, fmt.Errorf("local provider in process: %w", err)
	}
	return took, nil
}

// measureExecs times execs calls of `true` through Tether into one
// sandbox, each followed by a bare nsenter into the same sandbox and, with
// a provider in process, an Exec into a sandbox of its own.
func (lr *localRun) measureExecs(ctx context.Context, execs int, s *localSamples) error {
	id, err := lr.create(ctx)
	if err != nil {
		return err
	}
	initPID, uid, err := lr.lb.enterTarget(id)
	if err != nil {
		return err
	}
	var ipID string
	if lr.p != nil {
		ipID = domain.NewID()
		if _, err := lr.p.Create(ctx, domain.CreateSpec{SandboxID: ipID}); err != nil {
			return fmt.Errorf("local provider in process: %w", err)
		}
		defer func() { _ = lr.p.Destroy(context.WithoutCancel(ctx), ipID) }()
	}
	for range execs {
		start := time.Now()
		if err := lr.a.execTrue(ctx, id); err != nil {
			return err
		}
		s.execTether = append(s.execTether, time.Since(start))
		d, err := bareNsenter(ctx, lr.lb.nsenter, initPID, uid)
		if err != nil {
			return err
		}
		s.execBare = append(s.execBare, d)
		if d, err = hostSpawn(ctx); err != nil {
			return err
		}
		s.execSpawn = append(s.execSpawn, d)
		if lr.p != nil {
			if d, err = lr.inprocExec(ctx, ipID); err != nil {
				return err
			}
			s.execInproc = append(s.execInproc, d)
		}
	}
	return lr.end(ctx, id)
}

// inprocExec times one Exec of `true` by the provider in process into its
// sandbox id.
func (lr *localRun) inprocExec(ctx context.Context, id string) (time.Duration, error) {
	start := time.Now()
	res, err := lr.p.Exec(ctx, id, domain.ExecRequest{Command: "true", Timeout: time.Minute})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit code %d", res.ExitCode)
	}
	if err != nil {
		return 0, fmt.Errorf("local provider in process: exec: %w", err)
	}
	return time.Since(start), nil
}

// enterTarget returns what a bare nsenter into the running local sandbox
// id needs: the host pid of its init and the uid it runs as.
func (lb *localBench) enterTarget(id string) (pid, uid int, err error) {
	procs, err := bwrapProcesses()
	if err != nil {
		return 0, 0, err
	}
	if pid, err = sandboxInit(procs, filepath.Join(lb.state, id)+"/"); err != nil {
		return 0, 0, err
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	if uid, err = statusUID(string(status)); err != nil {
		return 0, 0, err
	}
	return pid, uid, nil
}

// report turns the samples of n creates and execs calls into the local
// targets and notes; inproc says whether the provider ran in process.
func (s *localSamples) report(n, execs int, inproc bool) ([]target, []string) {
	p50 := func(l latencies) float64 { return ms(l.percentile(50)) }
	targets := []target{
		atMost(fmt.Sprintf("local sandbox request → ready p50 (%d sequential)", n), p50(s.viaTether), "ms", p50(s.bare), "ms bare bwrap start", 2),
		atMost(fmt.Sprintf("local exec `true` round trip p50 (%d sequential)", execs), p50(s.execTether), "ms", p50(s.execBare), "ms bare nsenter", 1.2),
	}
	spread := func(l latencies) string {
		return fmt.Sprintf("p50 %.1f / p90 %.1f ms", p50(l), ms(l.percentile(90)))
	}
	notes := []string{
		fmt.Sprintf("Local provider, %d sandboxes: request → ready through Tether %s; bare bwrap start (the sandbox's own command line, without seccomp or cgroups, as uid %d) %s.",
			n, spread(s.viaTether), bareUID, spread(s.bare)),
		"Where a local create's time goes, from the sandbox's events (p50 of each step): " + s.steps.String() + ".",
		fmt.Sprintf("Local exec of `true`, %d calls: through Tether (HTTP, key, sandbox read, provider, activity row) %s; bare nsenter into the same sandbox %s; the host's `sh -c true` forked from this process %s.",
			execs, spread(s.execTether), spread(s.execBare), spread(s.execSpawn)),
	}
	targets = append(targets, info("local exec `true` round trip p50, against a host fork of `sh -c true`", p50(s.execTether), "ms", p50(s.execSpawn), "ms host sh -c true"))
	if inproc {
		cr := atMost("local provider Create alone, in process, p50", p50(s.inproc), "ms", p50(s.bare), "ms bare bwrap start", 2)
		ex := atMost("local provider Exec alone, in process, p50", p50(s.execInproc), "ms", p50(s.execBare), "ms bare nsenter", 1.2)
		cr.Info, ex.Info = true, true
		targets = append(targets, cr, ex,
			info("local provider Exec alone, in process, p50, against a host fork of `sh -c true`", p50(s.execInproc), "ms", p50(s.execSpawn), "ms host sh -c true"))
		notes = append(notes, fmt.Sprintf("The local provider in this process, without Tether around it: Create until ready %s; Exec of `true` %s.",
			spread(s.inproc), spread(s.execInproc)))
	}
	return targets, notes
}

// providerProblem returns why Tether reports the provider unavailable, or
// "".
func (a *api) providerProblem(ctx context.Context, name string) (string, error) {
	var list struct {
		Items []struct {
			Name      string `json:"name"`
			Available bool   `json:"available"`
			Reason    string `json:"reason"`
		} `json:"items"`
	}
	code, err := a.do(ctx, http.MethodGet, "/v1/providers", nil, &list)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("status %d", code)
	}
	if err != nil {
		return "", fmt.Errorf("providers: %w", err)
	}
	for _, p := range list.Items {
		if p.Name == name {
			if p.Available {
				return "", nil
			}
			return p.Reason, nil
		}
	}
	return "not enabled", nil
}

// readySteps are the steps of creates from request to ready, one sample
// each per create, timed by the sandbox's events: from the POST to the
// request's time (its requested event); to the executor's claim (its
// creating event, timed as the claim's query starts); to the ready write
// (the claim's query and the provider's create); and to the client's wait
// seeing it (the write, its notice, the response).
type readySteps struct {
	request, claim, provider, notice latencies
}

// stepNames name readySteps' steps, in order.
var stepNames = [4]string{"POST → requested", "requested → claimed", "claimed → ready (claim query + provider create)", "ready → seen by the wait"}

func (s *readySteps) String() string {
	parts := make([]string, 0, len(stepNames))
	for i, l := range []latencies{s.request, s.claim, s.provider, s.notice} {
		parts = append(parts, fmt.Sprintf("%s %.1f ms", stepNames[i], ms(l.percentile(50))))
	}
	return strings.Join(parts, ", ")
}

// event is what the bench reads of a sandbox's event.
type event struct {
	At time.Time `json:"at"`
	To string    `json:"to"`
}

// add adds the steps of one create, sent and seen ready at the given
// times, from its events (oldest first). The clocks are the same host's.
func (s *readySteps) add(sent, seen time.Time, events []event) error {
	at := map[string]time.Time{}
	for _, e := range events {
		if _, ok := at[e.To]; !ok {
			at[e.To] = e.At
		}
	}
	for _, state := range []string{"requested", "creating", "ready"} {
		if at[state].IsZero() {
			return fmt.Errorf("no %s event", state)
		}
	}
	s.request = append(s.request, at["requested"].Sub(sent))
	s.claim = append(s.claim, at["creating"].Sub(at["requested"]))
	s.provider = append(s.provider, at["ready"].Sub(at["creating"]))
	s.notice = append(s.notice, seen.Sub(at["ready"]))
	return nil
}

// addSteps reads the sandbox's events and adds its steps to s.
func (a *api) addSteps(ctx context.Context, s *readySteps, id string, sent, seen time.Time) error {
	var page struct {
		Items []event `json:"items"`
	}
	code, err := a.do(ctx, http.MethodGet, "/v1/sandboxes/"+id+"/events", nil, &page)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("status %d", code)
	}
	if err == nil {
		err = s.add(sent, seen, page.Items)
	}
	if err != nil {
		return fmt.Errorf("events of %s: %w", id, err)
	}
	return nil
}

var execTrueBody = []byte(`{"command":"true","timeout_seconds":60}`)

// execTrue runs `true` in the sandbox through Tether.
func (a *api) execTrue(ctx context.Context, id string) error {
	var res struct {
		ExitCode int `json:"exit_code"`
	}
	code, err := a.do(ctx, http.MethodPost, "/v1/sandboxes/"+id+"/exec", execTrueBody, &res)
	if err == nil && (code != http.StatusOK || res.ExitCode != 0) {
		err = fmt.Errorf("status %d, exit code %d", code, res.ExitCode)
	}
	if err != nil {
		return fmt.Errorf("local exec: %w", err)
	}
	return nil
}

// bareNsenter enters the namespaces of the sandbox whose init is pid, as
// the provider's commands do (the same nsenter options: user, pid, mount,
// ipc, uts and net namespaces, its root and working folder, its uid), runs
// `true` there and waits for it; it returns the time from fork to wait.
func bareNsenter(ctx context.Context, nsenter string, pid, uid int) (time.Duration, error) {
	id := strconv.Itoa(uid)
	cmd := exec.CommandContext(ctx, nsenter, "--target", strconv.Itoa(pid), "--user", "--pid", "--mount", "--ipc", "--uts", "--net", "--cgroup",
		"--root", "-w", "--setuid", id, "--setgid", id, "--", "true")
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("bare nsenter: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return took, nil
}

// hostSpawn forks, execs and waits for the host's `sh -c true` from this
// process, with a minimal environment: the floor of an exec through the
// sandbox's exec server, which forks the sandbox's sh for the command
// (`true` built in) from a process already inside the sandbox, with no
// namespace to enter. It returns the time from fork to wait.
func hostSpawn(ctx context.Context) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", "true")
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("host sh -c true: %w", err)
	}
	return took, nil
}

// bareBwrap starts the baseline's sandboxes.
type bareBwrap struct {
	path string
	args []string
	env  []string
	// data are the files whose contents bwrap copies in (--ro-bind-data),
	// passed as descriptors 4 and on.
	data []string
}

// bareFrom makes the baseline from the running local sandbox id: its
// bwrap's command line and environment (see bareBwrapArgs), with the files
// it binds from the sandbox's folder copied to lb.bare.
func (lb *localBench) bareFrom(id string) (*bareBwrap, error) {
	dir := filepath.Join(lb.state, id)
	procs, err := bwrapProcesses()
	if err != nil {
		return nil, err
	}
	monitor := sandboxMonitor(procs, dir+"/")
	if monitor == nil {
		return nil, fmt.Errorf("local sandbox %s: no bwrap process names its folder", id)
	}
	cmdline, err := monitorArgs(monitor.Args, dir)
	if err != nil {
		return nil, fmt.Errorf("local sandbox %s: %w", id, err)
	}
	args, paths, dests, err := bareBwrapArgs(cmdline, dir, lb.bare)
	if err != nil {
		return nil, fmt.Errorf("local sandbox %s: %w", id, err)
	}
	if err := os.MkdirAll(lb.bare, 0o711); err != nil {
		return nil, err
	}
	data, err := lb.copyData(procs, dir, dests)
	if err != nil {
		return nil, fmt.Errorf("local sandbox %s: %w", id, err)
	}
	if err := lb.mirror(dir, paths); err != nil {
		return nil, fmt.Errorf("local sandbox %s: %w", id, err)
	}
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", monitor.PID))
	if err != nil {
		return nil, err
	}
	return &bareBwrap{path: monitor.Args[0], args: args, env: hostos.SplitNUL(env), data: data}, nil
}

// monitorArgs are the arguments (without argv[0]) of a sandbox's bwrap
// whose command line is cmdline, its folder dir: the provider's bwrap
// reads its options from the folder's bwrap.args ("--args N -- COMMAND"),
// an older one's command line holds them all.
func monitorArgs(cmdline []string, dir string) ([]string, error) {
	if len(cmdline) < 4 || cmdline[1] != "--args" || cmdline[3] != "--" {
		return cmdline[1:], nil
	}
	b, err := os.ReadFile(filepath.Join(dir, "bwrap.args"))
	if err != nil {
		return nil, err
	}
	return append(hostos.SplitNUL(b), cmdline[3:]...), nil
}

// sandboxMonitor returns the monitor of the sandbox whose bwrap names
// prefix (runs in it, or names it in its arguments): its bwrap whose
// parent is not another, or nil.
func sandboxMonitor(procs []bwrapProcess, prefix string) *bwrapProcess {
	mine := map[int]bool{}
	for _, p := range procs {
		if names(p, prefix) {
			mine[p.PID] = true
		}
	}
	var monitor *bwrapProcess
	for i, p := range procs {
		if mine[p.PID] && !mine[p.PPID] {
			monitor = &procs[i]
		}
	}
	return monitor
}

// copyData reads back from inside the sandbox in dir what its bwrap copied
// in to dests (--ro-bind-data), and writes each to a file in lb.bare; it
// returns those files, in the order of dests.
func (lb *localBench) copyData(procs []bwrapProcess, dir string, dests []string) ([]string, error) {
	if len(dests) == 0 {
		return nil, nil
	}
	initPID, err := sandboxInit(procs, dir+"/")
	if err != nil {
		return nil, err
	}
	var data []string
	for i, dest := range dests {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/root%s", initPID, dest))
		if err != nil {
			return nil, err
		}
		file := filepath.Join(lb.bare, fmt.Sprintf("data-%d", i))
		if err := os.WriteFile(file, b, 0o644); err != nil {
			return nil, err
		}
		data = append(data, file)
	}
	return data, nil
}

// mirror makes under lb.bare what the sandbox's bwrap binds from its
// folder dir (paths, relative to dir): a copy of each file, and an empty
// folder of the baseline's uid for each folder.
func (lb *localBench) mirror(dir string, paths []string) error {
	for _, rel := range paths {
		src, dst := filepath.Join(dir, rel), filepath.Join(lb.bare, rel)
		info, err := os.Stat(src)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if info.IsDir() {
			if err := os.MkdirAll(dst, 0o700); err != nil {
				return err
			}
			if err := os.Chown(dst, bareUID, bareUID); err != nil {
				return err
			}
			continue
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// start starts a bare sandbox and returns the time until it ran: bwrap
// reported its init (on the info descriptor) and the command wrote its
// first line (the provider's says "ready"), or ended. The sandbox is then
// killed, untimed.
func (b *bareBwrap) start() (time.Duration, error) { return b.run(nil) }

// run starts a bare sandbox as start does, then, if then is not nil, calls
// it with the host pid of the sandbox's init; it returns the time until
// then returned. Its descriptors are the provider's: the info pipe (3), a
// pipe its init waits on (4 and 5), then the files bwrap copies in.
func (b *bareBwrap) run(then func(initPID int) error) (time.Duration, error) {
	var files []*os.File
	defer func() {
		for _, f := range files {
			_ = f.Close()
		}
	}()
	infoR, infoW, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	holdR, holdW, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	files = append(files, infoR, infoW, outR, outW, holdR, holdW)
	//nolint:noctx // killed below, once it ran
	cmd := exec.Command(b.path, b.args...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = outW, &stderr
	cmd.ExtraFiles = []*os.File{infoW, holdR, holdW} // descriptors 3, 4 and 5
	for _, path := range b.data {                    // 6 and on
		f, err := os.Open(path)
		if err != nil {
			return 0, err
		}
		files = append(files, f)
		cmd.ExtraFiles = append(cmd.ExtraFiles, f)
	}
	cmd.Env = b.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true,
		Credential: &syscall.Credential{Uid: bareUID, Gid: bareUID, Groups: []uint32{}}}
	start := time.Now()
	err = cmd.Start()
	_ = infoW.Close()
	_ = outW.Close()
	if err != nil {
		return 0, fmt.Errorf("bare bwrap: %w", err)
	}
	var info struct {
		ChildPID int `json:"child-pid"`
	}
	infoErr := json.NewDecoder(infoR).Decode(&info)
	_, _ = bufio.NewReader(outR).ReadString('\n')
	var thenErr error
	if infoErr == nil && then != nil {
		thenErr = then(info.ChildPID)
	}
	took := time.Since(start)
	if info.ChildPID > 0 {
		_ = syscall.Kill(info.ChildPID, syscall.SIGKILL) // the sandbox's init, and all in it
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	switch {
	case infoErr != nil:
		return 0, fmt.Errorf("bare bwrap did not start a sandbox: %s", strings.TrimSpace(stderr.String()))
	case thenErr != nil:
		return 0, thenErr
	}
	return took, nil
}

// bwrapOptionsDropped are the options of the provider's bwrap that the
// baseline leaves out, each with its one value: the seccomp filter (a
// cost of Tether's isolation, which the baseline does not pay) and the
// descriptors the provider reads; the baseline asks for the info
// descriptor itself.
var bwrapOptionsDropped = []string{"--seccomp", "--add-seccomp-fd", "--info-fd", "--json-status-fd"}

// bwrapOptionsRefused read from descriptors the baseline cannot reproduce.
var bwrapOptionsRefused = []string{"--args", "--file", "--bind-data", "--userns", "--userns2",
	"--pidns", "--sync-fd", "--block-fd", "--userns-block-fd"}

// bareBwrapArgs turns the arguments of a local sandbox's bwrap (without
// argv[0]) into the baseline's: the same options, binds and command, less
// bwrapOptionsDropped, plus "--info-fd 3"; every option value in the
// sandbox's folder dir moves to the same place under mirror. paths are
// those values, relative to dir, for the caller to make under mirror.
// Each --ro-bind-data reads descriptor 6 and on instead (after the info
// pipe and the pipe the init waits on, as the provider's); dests are their
// destinations in the sandbox, in that order, for the caller to fill.
func bareBwrapArgs(args []string, dir, mirror string) (out, paths, dests []string, err error) {
	for i := 0; i < len(args); i++ {
		arg := args[i]
		switch {
		case arg == "--":
			out = append(out, "--info-fd", "3")
			return append(out, withoutExecServer(args[i:])...), paths, dests, nil
		case slices.Contains(bwrapOptionsDropped, arg):
			i++ // and its value
			continue
		case arg == "--ro-bind-data" && i+2 < len(args):
			out = append(out, arg, strconv.Itoa(6+len(dests)), args[i+2])
			dests = append(dests, args[i+2])
			i += 2
			continue
		case slices.Contains(bwrapOptionsRefused, arg):
			return nil, nil, nil, fmt.Errorf("its bwrap reads %s from a descriptor; the baseline cannot reproduce that", arg)
		}
		if rel, ok := strings.CutPrefix(arg, dir+"/"); ok {
			paths = append(paths, rel)
			arg = filepath.Join(mirror, rel)
		}
		out = append(out, arg)
	}
	return nil, nil, nil, errors.New("its bwrap command line has no \"--\" before the command")
}

// withoutExecServer is the command after bwrap's "--" less the exec
// server: the provider's init script becomes it when given the
// descriptors of its binary and socket (its arguments after the
// open-files limit), which the baseline does not pass; with them blank,
// the script is the sh that says ready and waits, the baseline's init.
// (The server's start counts on Tether's side of request → ready.)
func withoutExecServer(command []string) []string {
	command = slices.Clone(command)
	if len(command) == 8 && command[1] == "/bin/sh" && command[2] == "-c" && command[4] == "sh" {
		command[6], command[7] = "", ""
	}
	return command
}

// bwrapProcess is a running bwrap process: a sandbox's monitor runs in
// the sandbox's folder (Cwd), its init is the monitor's child.
type bwrapProcess = hostos.Process

// bwrapProcesses lists the host's bwrap processes.
func bwrapProcesses() ([]bwrapProcess, error) { return hostos.Processes("bwrap") }

// names reports whether p runs in a folder under prefix, or an argument
// of its command line starts with prefix (an older provider's bwrap).
func names(p bwrapProcess, prefix string) bool {
	return strings.HasPrefix(p.Cwd+"/", prefix) ||
		slices.ContainsFunc(p.Args, func(arg string) bool { return strings.HasPrefix(arg, prefix) })
}

// sandboxInit returns the host pid of the init of the sandbox whose bwrap
// names prefix: the monitor's bwrap child, the process the provider's
// commands enter.
func sandboxInit(procs []bwrapProcess, prefix string) (int, error) {
	if monitor := sandboxMonitor(procs, prefix); monitor != nil {
		for _, p := range procs {
			if p.PPID == monitor.PID {
				return p.PID, nil
			}
		}
	}
	return 0, fmt.Errorf("no running sandbox init names %s", prefix)
}

// statusUID returns the real uid of a /proc/PID/status.
func statusUID(status string) (int, error) {
	for line := range strings.SplitSeq(status, "\n") {
		if v, ok := strings.CutPrefix(line, "Uid:"); ok {
			if fields := strings.Fields(v); len(fields) > 0 {
				return strconv.Atoi(fields[0])
			}
		}
	}
	return 0, errors.New("status has no Uid line")
}
