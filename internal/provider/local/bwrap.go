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
// sandbox's /etc/hosts) are copied in from descriptors, dataFD and on, that
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
			own["hosts"] = true // egressHosts'
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
	if hosts := egressHosts(workspace, prm); hosts != "" {
		data, dests = append(data, hosts), append(dests, "/etc/hosts")
	}
	for i, dest := range dests {
		args = append(args, "--ro-bind-data", strconv.Itoa(dataFD+i), dest)
	}
	args = append(args, "--proc", "/proc")
	args = append(args, procMasks...)
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

// initScript is the sandbox's first process: it says it runs, then waits
// until the sandbox ends, needing nothing of the sandbox's root but /bin/sh
// (see start).
const initScript = `[ "$1" = 0 ] || ulimit -n "$1" || exit 126; echo ready; exec </dev/null >/dev/null 2>&1; while read -r _ <&4; do :; done`

// start launches the sandbox and returns the host pid of its init. The
// bwrap process is Tether's child (reaped by a waiter) but in a session of
// its own, so signals for Tether's process group do not reach it and it
// outlives Tether.
func (p *Provider) start(id string, uid int, prm Params, lim Limits) (int, error) {
	dataFD := 6 // after the info pipe, 3, the held pipe, 4 and 5, and the filter
	if p.sandboxFilter != nil {
		dataFD = 7
	}
	args, data, err := p.bwrapArgs(filepath.Join(p.sandboxDir(id), "workspace"), "sbx-"+id[len(id)-12:], prm, lim, dataFD) // the id's random end
	if err != nil {
		return 0, err
	}
	dataFiles, err := openAll(data)
	if err != nil {
		return 0, err
	}
	defer closeAll(dataFiles)
	// The init says when it runs: bwrap reports the child's pid (on fd 3)
	// before it has finished building the sandbox, and entering it earlier
	// would find a half-made mount namespace. Then it waits for ever with
	// nothing but the sandbox's sh: reading a pipe (fd 4) of which it holds
	// the only write end (fd 5) besides bwrap's.
	filterArgs, filter, err := p.seccompArgs(6) // after the info pipe, 3, and the held pipe, 4 and 5
	if err != nil {
		return 0, err
	}
	if filter != nil {
		defer func() { _ = filter.Close() }()
	}
	args = append(args, filterArgs...)
	args = append(args, "--info-fd", "3", "--", "/bin/sh", "-c", initScript, "sh", strconv.Itoa(lim.OpenFiles))
	holdR, holdW, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer func() { _ = holdR.Close(); _ = holdW.Close() }()
	infoR, infoW, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer func() { _ = infoR.Close() }()
	logf, err := os.OpenFile(filepath.Join(p.sandboxDir(id), "bwrap.log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		_ = infoW.Close()
		return 0, err
	}
	defer func() { _ = logf.Close() }()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		_ = infoW.Close()
		return 0, err
	}
	defer func() { _ = readyR.Close() }()
	//nolint:noctx // the sandbox outlives the request that creates it, and Tether itself
	cmd := exec.Command(p.bwrap, args...)
	cmd.Stdout, cmd.Stderr = readyW, logf
	cmd.ExtraFiles = []*os.File{infoW, holdR, holdW}
	if filter != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, filter)
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, dataFiles...)
	cmd.Env = sandboxEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: uidpool.Credential(uid)}
	// Started in the sandbox's groups (cgroups.enter): its init, and all
	// it will ever start, counted against its limits from the first.
	var groups []string
	if p.cg != nil && lim.Pids > 0 {
		groups = p.cg.Dirs(id)
	}
	if err := startSandbox(id, prm, func() error {
		if len(groups) > 0 {
			done, err := p.cg.Enter(groups, cmd.SysProcAttr)
			if err != nil {
				return err
			}
			defer done()
		}
		return cmd.Start()
	}); err != nil {
		_ = infoW.Close()
		_ = readyW.Close()
		return 0, err
	}
	_ = infoW.Close()
	_ = readyW.Close()
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait() // reap bwrap when its sandbox ends
		close(done)
	}()
	p.mu.Lock()
	p.waiters[id] = done
	p.mu.Unlock()

	var info struct {
		ChildPID int `json:"child-pid"`
	}
	failed := func() (int, error) {
		if info.ChildPID > 0 {
			_ = syscall.Kill(info.ChildPID, syscall.SIGKILL) // the sandbox's init, and all in it
		}
		_ = cmd.Process.Kill()
		<-done
		log, _ := os.ReadFile(filepath.Join(p.sandboxDir(id), "bwrap.log"))
		return 0, fmt.Errorf("bwrap did not start the sandbox: %s", strings.TrimSpace(string(log)))
	}
	if err := json.NewDecoder(infoR).Decode(&info); err != nil || info.ChildPID <= 0 {
		return failed()
	}
	line := make([]byte, len("ready\n"))
	if _, err := io.ReadFull(readyR, line); err != nil || string(line) != "ready\n" {
		return failed()
	}
	return info.ChildPID, nil
}
