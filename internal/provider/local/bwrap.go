package local

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tetherhq/tether/internal/host/image"
	"github.com/tetherhq/tether/internal/host/uidpool"
)

// The sandbox's bwrap: its arguments (its root, its own files, its
// namespaces) and the start of its init.

// openAll opens each of paths for reading; on an error none stays open.
func openAll(paths []string) ([]*os.File, error) {
	files := make([]*os.File, 0, len(paths))
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			closeAll(files)
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}

// bwrapArgs builds the sandbox's options (everything before bwrap's "--"):
// an empty root holding read-only binds of the host's system folders and a
// curated /etc, or of prm.Image's entries, the sandbox's own /etc/passwd
// and /etc/group, fresh /proc, /dev, /tmp and /run, and workspace at
// /workspace. Create and the probe share them.
//
// The sandbox's own files (its /etc/passwd and /etc/group, an allow-list
// sandbox's /etc/hosts, /etc/resolv.conf and trust bundle) are copied in from descriptors, dataFD and on, that
// the caller opens from data, in order: bound from the state folder, they
// would name it in the sandbox's mount table.
func (p *Provider) bwrapArgs(workspace, hostname string, prm Params, lim Limits, dataFD int) (args, data []string, err error) {
	args = []string{"--tmpfs", "/"}
	if prm.Image != "" {
		img := p.images[prm.Image]
		if img == nil {
			return nil, nil, fmt.Errorf("image %q is not registered", prm.Image)
		}
		own := map[string]bool{"passwd": true, "group": true}
		if prm.Network == networkAllowlist {
			own["hosts"], own["resolv.conf"] = true, true // egressFiles'
		}
		rootArgs, err := image.RootArgs(img.root, own)
		if err != nil {
			return nil, nil, err
		}
		args, data = sandboxArgs(append(args, rootArgs...), workspace, hostname, prm, lim, p.procMasks, dataFD)
		return args, data, nil
	}
	args, data = sandboxArgs(append(args, image.HostRootArgs()...), workspace, hostname, prm, lim, p.procMasks, dataFD)
	return args, data, nil
}

// sandboxArgs are bwrap's options for what every sandbox has of its own,
// after args, which fill its root; procMasks mask files of its /proc. The
// files in data (see bwrapArgs) are read from descriptors dataFD and on.
func sandboxArgs(args []string, workspace, hostname string, prm Params, lim Limits, procMasks []string, dataFD int) (_, data []string) {
	etc := filepath.Join(filepath.Dir(workspace), "etc") // writeSandboxEtc's
	data = []string{filepath.Join(etc, "passwd"), filepath.Join(etc, "group")}
	dests := []string{"/etc/passwd", "/etc/group"}
	egressData, egressDests := egressFiles(workspace, prm)
	data, dests = append(data, egressData...), append(dests, egressDests...)
	for i, dest := range dests {
		args = append(args, "--ro-bind-data", strconv.Itoa(dataFD+i), dest)
	}
	args = append(args, "--proc", "/proc")
	args = append(args, procMasks...)
	// Bound over the new /proc: the sandbox's views of meminfo and stat.
	views, viewDests := procViews(etc, lim)
	for i, dest := range viewDests {
		args = append(args, "--ro-bind-data", strconv.Itoa(dataFD+len(data)+i), dest)
	}
	data = append(data, views...)
	args = append(args, "--dev", "/dev")
	if lim.MemoryMB > 0 {
		// /tmp counts against the sandbox's memory; it cannot be larger.
		args = append(args, "--size", strconv.FormatInt(int64(lim.MemoryMB)<<20, 10))
	}
	args = append(args, "--tmpfs", "/tmp", "--tmpfs", "/run",
		"--bind", workspace, WorkDir,
		"--remount-ro", "/",
		"--chdir", WorkDir,
		"--unshare-pid", "--unshare-ipc", "--unshare-uts",
		"--hostname", hostname,
		"--cap-drop", "ALL",
	)
	if prm.Network != "host" && prm.Network != networkAllowlist { // an allow-list sandbox starts in the namespace made for it
		args = append(args, "--unshare-net")
	}
	return args, data
}

// initScript is the sandbox's first process: it lowers the open-files
// limit to its first argument and says it runs; then, given the
// descriptors of the exec server's binary and socket ($2 and $3), it
// becomes the exec server (execserver.go), and without them it waits
// until the sandbox ends, needing nothing of the sandbox's root but
// /bin/sh (see start). It says ready before the server starts, so that
// the server's start (a Go program's, tens of milliseconds for Tether's
// whole binary) is not the create's: an exec that comes meanwhile waits
// in the socket's queue.
const initScript = `[ "$1" = 0 ] || ulimit -n "$1" || exit 126; echo ready; exec </dev/null >/dev/null 2>&1; if [ -n "$2" ]; then export GOMAXPROCS=1 GOTRACEBACK=none; exec "/proc/self/fd/$2" ` + serverArg + ` "$3"; fi; while read -r _ <&4; do :; done`

// start launches the sandbox and returns the host pid of its init. The
// bwrap process is Tether's child (reaped by a waiter) but in a session of
// its own, so signals for Tether's process group do not reach it and it
// outlives Tether.
func (p *Provider) start(id string, uid int, prm Params, lim Limits) (int, error) {
	b, err := p.bwrapCommand(id, uid, prm, lim)
	if err != nil {
		return 0, err
	}
	defer b.close()
	// Started in the sandbox's groups (cgroup.Groups.Enter): its init, and
	// all it will ever start, counted against its limits from the first.
	var groups []string
	if p.cg != nil && lim.Pids > 0 {
		groups = p.cg.Dirs(id)
	}
	err = startSandbox(id, prm, func() error {
		done, err := p.enterGroups(groups, b.cmd.SysProcAttr)
		if err != nil {
			return err
		}
		defer done()
		return b.cmd.Start()
	})
	closeAll(b.childEnds) // the child holds them now: EOF once it ends
	if err != nil {
		return 0, err
	}
	done := make(chan struct{})
	go func() {
		_ = b.cmd.Wait() // reap bwrap when its sandbox ends
		close(done)
	}()
	p.mu.Lock()
	p.waiters[id] = done
	p.mu.Unlock()
	pid, ready := awaitInit(b.info, b.ready)
	if !ready {
		if pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL) // the sandbox's init, and all in it
		}
		_ = b.cmd.Process.Kill()
		<-done
		log := b.stderr()
		_ = os.WriteFile(filepath.Join(p.sandboxDir(id), "bwrap.log"), log, 0o600)
		return 0, fmt.Errorf("bwrap did not start the sandbox: %s", strings.TrimSpace(string(log)))
	}
	return pid, nil
}

// awaitInit waits for the sandbox's init to say it runs: bwrap reports the
// child's pid (on info) before it has finished building the sandbox, and
// entering it earlier would find a half-made mount namespace; then the
// init writes "ready" (on ready). It returns the pid bwrap reported (0 if
// none) and whether the init got that far.
func awaitInit(info, ready io.Reader) (int, bool) {
	var reported struct {
		ChildPID int `json:"child-pid"`
	}
	if err := json.NewDecoder(info).Decode(&reported); err != nil || reported.ChildPID <= 0 {
		return max(reported.ChildPID, 0), false
	}
	line := make([]byte, len("ready\n"))
	if _, err := io.ReadFull(ready, line); err != nil || string(line) != "ready\n" {
		return reported.ChildPID, false
	}
	return reported.ChildPID, true
}

// bwrapCmd is the bwrap command of a sandbox about to start, and the
// files it holds: the parent's copies of what the child writes to
// (childEnds), closed once it started, and everything else (files),
// closed once the start is over.
type bwrapCmd struct {
	cmd *exec.Cmd
	// info and ready are where bwrap reports the init's pid and the init
	// says it runs.
	info, ready *os.File
	// log is bwrap's stderr: a file in memory, which a sandbox's processes
	// that look at their init's descriptors see as "/memfd:bwrap-stderr",
	// where a file on the host would show its path.
	log       *os.File
	childEnds []*os.File
	files     []*os.File
}

// stderr is what bwrap wrote to its stderr so far (at most 64 KiB).
func (b *bwrapCmd) stderr() []byte {
	buf := make([]byte, 64<<10)
	n, _ := b.log.ReadAt(buf, 0)
	return buf[:n]
}

func (b *bwrapCmd) close() {
	closeAll(b.childEnds)
	closeAll(b.files)
}

// pipe makes a pipe whose ends b closes.
func (b *bwrapCmd) pipe() (r, w *os.File, err error) {
	if r, w, err = os.Pipe(); err == nil {
		b.files = append(b.files, r, w)
	}
	return r, w, err
}

// bwrapCommand builds the sandbox's bwrap command. Its descriptors: the
// info pipe (3); a pipe (4 and 5) that the init waits on for ever with
// nothing but the sandbox's sh, holding its only write end besides
// bwrap's; the seccomp filter (6), if any; then the sandbox's own files
// (bwrapArgs); then, for a sandbox with an exec server, its binary and its
// listening socket; last its arguments (bwrapArgsFile). The init's stdout
// is the ready pipe.
func (p *Provider) bwrapCommand(id string, uid int, prm Params, lim Limits) (*bwrapCmd, error) {
	b := &bwrapCmd{}
	fail := func(err error) (*bwrapCmd, error) {
		b.close()
		return nil, err
	}
	dataFD := 6 // after the info pipe, 3, the held pipe, 4 and 5, and the filter
	if p.sandboxFilter != nil {
		dataFD = 7
	}
	args, data, err := p.bwrapArgs(filepath.Join(p.sandboxDir(id), "workspace"), "sbx-"+id[len(id)-12:], prm, lim, dataFD) // the id's random end
	if err != nil {
		return fail(err)
	}
	dataFiles, err := openAll(data)
	if err != nil {
		return fail(err)
	}
	b.files = append(b.files, dataFiles...)
	filterArgs, filter, err := p.seccompArgs(6)
	if err != nil {
		return fail(err)
	}
	if filter != nil {
		b.files = append(b.files, filter)
	}
	args = append(args, filterArgs...)
	// The exec server's binary and listening socket come after the
	// sandbox's own files.
	serverFDs := []string{"", ""}
	var serverFiles []*os.File
	if p.serverFor(prm) {
		ln, err := p.execListener(id)
		if err != nil {
			return fail(err)
		}
		b.files = append(b.files, ln)
		serverFiles = []*os.File{p.serverExe, ln}
		next := dataFD + len(dataFiles)
		serverFDs = []string{strconv.Itoa(next), strconv.Itoa(next + 1)}
	}
	args = append(args, "--unshare-cgroup-try", "--info-fd", "3")
	command := []string{"/bin/sh", "-c", initScript, "sh", strconv.Itoa(lim.OpenFiles), serverFDs[0], serverFDs[1]}
	extra := []*os.File{filter}
	extra = append(append(extra, dataFiles...), serverFiles...)
	if err := b.build(p.bwrap, p.sandboxDir(id), args, command, extra, uid); err != nil {
		return fail(err)
	}
	return b, nil
}

// bwrapArgsFile is the file in a sandbox's folder that holds its bwrap's
// options, NUL-separated: bwrap reads them from it (--args), so that its
// command line, which the sandbox sees as its pid 1's, names nothing of
// the host (only the command after "--", which bwrap takes from its
// command line alone, the init script); and it records them for whoever
// looks after the sandbox.
const bwrapArgsFile = "bwrap.args"

// bwrapArgv0 is bwrap's argv[0], for the same reason: not the host's path
// to it.
const bwrapArgv0 = "bwrap"

// build makes b's command: bwrap at path, run in the sandbox's folder dir
// (its working directory is how the provider finds it, sandboxProcesses)
// as uid, reading its options args from bwrapArgsFile, then running
// command; with the pipes and the files of extra (nil entries left out)
// after them, then the options' file.
func (b *bwrapCmd) build(path, dir string, args, command []string, extra []*os.File, uid int) error {
	argsFile, err := writeArgs(filepath.Join(dir, bwrapArgsFile), args)
	if err != nil {
		return err
	}
	b.files = append(b.files, argsFile)
	infoR, infoW, err := b.pipe()
	if err != nil {
		return err
	}
	holdR, holdW, err := b.pipe()
	if err != nil {
		return err
	}
	readyR, readyW, err := b.pipe()
	if err != nil {
		return err
	}
	b.info, b.ready, b.childEnds = infoR, readyR, []*os.File{infoW, readyW}
	fd, err := unix.MemfdCreate("bwrap-stderr", unix.MFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("making bwrap's stderr: %w", err)
	}
	b.log = os.NewFile(uintptr(fd), "bwrap-stderr")
	b.files = append(b.files, b.log)
	// Root's alone: a sandbox process may not open it through
	// /proc/1/fd/2 (bwrap writes through the descriptor it holds).
	if err := unix.Fchmod(fd, 0o600); err != nil {
		return fmt.Errorf("making bwrap's stderr: %w", err)
	}
	files := []*os.File{infoW, holdR, holdW}
	for _, f := range extra {
		if f != nil {
			files = append(files, f)
		}
	}
	files = append(files, argsFile)
	//nolint:noctx // the sandbox outlives the request that creates it, and Tether itself
	b.cmd = exec.Command(path, append([]string{"--args", strconv.Itoa(2 + len(files)), "--"}, command...)...)
	b.cmd.Args[0] = bwrapArgv0
	b.cmd.Dir = dir
	b.cmd.Stdout, b.cmd.Stderr = readyW, b.log
	b.cmd.ExtraFiles = files
	b.cmd.Env = sandboxEnv()
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: uidpool.Credential(uid)}
	return nil
}

// writeArgs writes args to the file path, NUL-separated, and returns it
// open for reading from its start.
func writeArgs(path string, args []string) (*os.File, error) {
	var buf strings.Builder
	for _, a := range args {
		buf.WriteString(a)
		buf.WriteByte(0)
	}
	if err := os.WriteFile(path, []byte(buf.String()), 0o600); err != nil {
		return nil, fmt.Errorf("writing bwrap's arguments: %w", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("writing bwrap's arguments: %w", err)
	}
	return f, nil
}
