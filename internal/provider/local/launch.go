package local

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tetherhq/tether/internal/host/hostos"
	"github.com/tetherhq/tether/internal/host/seccomp"
)

// How the provider starts processes for a sandbox: every one from an OS
// thread of its own that holds what the process must start with (its
// control groups, no_new_privs, the exec filter), so that nothing of that
// reaches the rest of Tether.

// startCommand starts cmd, a command that enters a sandbox, in the
// control groups whose folders are groups (none: where it is), with
// no_new_privs and under the exec filter: it is forked from an OS thread
// of its own that holds all three (hostos.OnOwnThread), so cmd and everything it
// starts inherit them, and they outlive nothing else. no_new_privs is set
// here rather than by a tool inside the sandbox, so that a sandbox's root
// (an operator's image) needs nothing but /bin/sh.
func (p *Provider) startCommand(cmd *exec.Cmd, groups []string) error {
	return hostos.OnOwnThread(func() error {
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		done, err := p.enterGroups(groups, cmd.SysProcAttr)
		if err != nil {
			return err
		}
		defer done()
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("setting no_new_privs: %w", err)
		}
		if p.execFilter != nil {
			if err := seccomp.Install(p.execFilter); err != nil {
				return err
			}
		}
		return cmd.Start()
	})
}

// enterGroups moves the calling OS thread, one of its own, into the control
// groups whose folders are groups (none: it stays where it is), so that the
// process it forks next starts in them (cgroup.Groups.Enter); the returned
// func is called once it has.
func (p *Provider) enterGroups(groups []string, attr *syscall.SysProcAttr) (func(), error) {
	if len(groups) == 0 {
		return func() {}, nil
	}
	return p.cg.Enter(groups, attr)
}

// seccompArgs are bwrap's options that install the sandbox filter, read
// from file, which the caller passes to bwrap as descriptor fd and closes
// once bwrap started. Both are empty where there is no filter.
func (p *Provider) seccompArgs(fd int) (args []string, file *os.File, err error) {
	if p.sandboxFilter == nil {
		return nil, nil, nil
	}
	if file, err = seccomp.Pipe(p.sandboxFilter); err != nil {
		return nil, nil, err
	}
	return []string{"--seccomp", strconv.Itoa(fd)}, file, nil
}
