package local

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
)

// A sandbox's pid 1 is bubblewrap's init: it reaps orphans, and the kernel
// delivers no signal from inside the pid namespace to it that it has no
// handler for (SIGKILL and SIGSTOP never), nor may anything there ptrace
// it. But it exits, ending the sandbox, as soon as it has no child left,
// and its children are the sandbox's own: its first process (the sh of
// initScript, or the exec server it became: execserver.go), which the
// sandbox's user may kill like any other, and orphans. Commands that
// enter the sandbox are nsenter's children, those the exec server starts
// its own, none the init's. So `kill -9 -1`, `kill -9 2` or `pkill -x
// sh`, ordinary clean-up for an agent, used to end the sandbox.
//
// The keeper is a child the sandbox cannot kill: a process that Tether
// starts in the sandbox's pid namespace as keeperUID, a user no process of
// the sandbox runs as (each sandbox has a uid of its own, uid.go) and
// without CAP_KILL there, so every signal from inside it is EPERM. Its
// shell exits at once, leaving it to the init, which it keeps alive until
// Destroy kills the init (and the namespace with it). It is `sleep
// infinity` of the host, in the host's mount namespace, with no
// descriptors, no capabilities, no_new_privs, the exec filter, and in the
// keepers' control group beside the sandboxes' (counted in the host share,
// so a sandbox keeps every pid of its limit); the sandbox's processes can
// see it in ps and nothing more: its /proc entries that matter need ptrace
// access, which neither the uid nor the filter gives them.

// keeperUID is the uid and gid of every sandbox's keeper: nobody, which no
// sandbox made since each has its own uid runs as.
const keeperUID = legacyUID

// keeperScript is what the keeper's shell runs: it lowers the open-files
// limit to its first argument (0: leaves it), as every process of the
// sandbox has it, then starts $0 (sleep) in the background with nothing
// open and exits, orphaning it to the sandbox's init.
const keeperScript = `[ "$1" = 0 ] || ulimit -n "$1" || exit 126; "$0" infinity </dev/null >/dev/null 2>&1 &`

// startKeeper starts the keeper of the sandbox whose init is initPID and
// waits for its shell to leave it behind.
func (p *Provider) startKeeper(initPID int, lim Limits) error {
	var groups []string
	if p.cg != nil && lim.Pids > 0 {
		var err error
		if groups, err = p.cg.KeeperDirs(); err != nil {
			return fmt.Errorf("starting the sandbox's keeper: %w", err)
		}
	}
	uid := strconv.Itoa(keeperUID)
	// The sandbox sees the keeper's command line: "sleep infinity", found
	// on a PATH of its folder alone, rather than the host's path to it.
	//nolint:noctx // its shell ends at once, leaving the keeper behind
	cmd := exec.Command(p.nsenter, "--target", strconv.Itoa(initPID), "--pid",
		"--setuid", uid, "--setgid", uid, "--", p.sh, "-c", keeperScript, filepath.Base(p.sleep), strconv.Itoa(lim.OpenFiles))
	cmd.Env = append(sandboxEnv(), "PATH="+filepath.Dir(p.sleep))
	cmd.Dir = "/"
	if err := p.startCommand(cmd, groups); err != nil {
		return fmt.Errorf("starting the sandbox's keeper: %w", err)
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("starting the sandbox's keeper: %w", err)
	}
	return nil
}
