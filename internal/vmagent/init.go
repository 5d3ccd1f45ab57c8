//go:build linux

// Package vmagent is Tether's agent inside a microVM guest: the guest's
// first process. As init (Init) it loads the kernel modules the guest
// needs, mounts the sandbox's disks and switches into its root, then
// starts the server (Serve) and reaps orphans for as long as the guest
// runs. The server speaks vmwire over the virtio-serial port named
// "tether": commands, files, archives and connections to the guest's own
// loopback, each on a stream of its own.
//
// The agent runs as root in the guest; the commands it starts run as the
// guest's user (uid 1000), each in a cgroup of its own. Everything the
// agent knows comes from the guest's own disks and kernel command line:
// nothing of the host's environment, files or descriptors is in the
// guest.
package vmagent

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ServeArg is the agent's argument in its server mode.
const ServeArg = "serve"

// Guest layout.
const (
	newRoot   = "/newroot"
	modules   = "/modules"
	workspace = "/workspace"
	// UserID is the uid and gid commands run as.
	UserID = 1000
)

// Disk serials, as the provider names its drives.
const (
	RootSerial      = "tether-root"
	WorkspaceSerial = "tether-workspace"
)

// Init is the guest's pid 1. It returns only on failure, after which the
// caller powers the guest off.
func Init() error {
	if err := mountEarly(); err != nil {
		return err
	}
	if err := loadModules(); err != nil {
		return err
	}
	if err := mountRoot(); err != nil {
		return err
	}
	if err := setupGuest(); err != nil {
		return err
	}
	return superviseServer()
}

func mountEarly() error {
	for _, m := range []struct{ src, dst, fstype string }{
		{"proc", "/proc", "proc"},
		{"sysfs", "/sys", "sysfs"},
		{"devtmpfs", "/dev", "devtmpfs"},
	} {
		if err := os.MkdirAll(m.dst, 0o755); err != nil {
			return fmt.Errorf("vmagent: %w", err)
		}
		if err := unix.Mount(m.src, m.dst, m.fstype, unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("vmagent: mounting %s: %w", m.dst, err)
		}
	}
	return nil
}

// loadModules loads the modules listed in /modules/order, in order, each
// with the parameters the kernel command line gives it (module.param=v,
// as modprobe would pass them: the kernel applies those only to built-in
// code).
func loadModules() error {
	order, err := os.ReadFile(filepath.Join(modules, "order"))
	if err != nil {
		return fmt.Errorf("vmagent: reading the module list: %w", err)
	}
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return fmt.Errorf("vmagent: %w", err)
	}
	for _, name := range strings.Fields(string(order)) {
		mod := strings.ReplaceAll(strings.TrimSuffix(filepath.Base(name), ".ko"), "-", "_")
		var params []string
		for _, arg := range strings.Fields(string(cmdline)) {
			if key, _, ok := strings.Cut(arg, "="); ok && strings.HasPrefix(strings.ReplaceAll(key, "-", "_"), mod+".") {
				params = append(params, strings.TrimPrefix(arg, key[:len(mod)+1]))
			}
		}
		if err := loadModule(filepath.Join(modules, name), strings.Join(params, " ")); err != nil {
			return err
		}
	}
	return nil
}

func loadModule(path, params string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("vmagent: %w", err)
	}
	defer func() { _ = f.Close() }()
	if err := unix.FinitModule(int(f.Fd()), params, 0); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("vmagent: loading %s: %w", filepath.Base(path), err)
	}
	return nil
}

// disk waits for the block device whose serial is serial.
func disk(serial string) (string, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		blocks, _ := filepath.Glob("/sys/block/vd*")
		for _, b := range blocks {
			s, err := os.ReadFile(filepath.Join(b, "serial"))
			if err == nil && strings.TrimSpace(string(s)) == serial {
				return "/dev/" + filepath.Base(b), nil
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("vmagent: no disk with serial %s", serial)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func mountRoot() error {
	root, err := disk(RootSerial)
	if err != nil {
		return err
	}
	ws, err := disk(WorkspaceSerial)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(newRoot, 0o755); err != nil {
		return fmt.Errorf("vmagent: %w", err)
	}
	if err := unix.Mount(root, newRoot, "ext4", 0, ""); err != nil {
		return fmt.Errorf("vmagent: mounting the root disk: %w", err)
	}
	mounts := []struct {
		src, dst, fstype string
		flags            uintptr
		data             string
	}{
		{ws, workspace, "ext4", unix.MS_NOSUID | unix.MS_NODEV, ""},
		{"proc", "/proc", "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{"sysfs", "/sys", "sysfs", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{"cgroup2", "/sys/fs/cgroup", "cgroup2", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{"devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID | unix.MS_NOEXEC, ""},
		{"devpts", "/dev/pts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620,gid=5"},
		{"tmpfs", "/dev/shm", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
		{"tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
		{"tmpfs", "/run", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=0755"},
	}
	for _, m := range mounts {
		dst := filepath.Join(newRoot, m.dst)
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return fmt.Errorf("vmagent: %w", err)
		}
		if err := unix.Mount(m.src, dst, m.fstype, m.flags, m.data); err != nil {
			return fmt.Errorf("vmagent: mounting %s: %w", m.dst, err)
		}
	}
	if err := os.Chown(filepath.Join(newRoot, workspace), UserID, UserID); err != nil {
		return fmt.Errorf("vmagent: %w", err)
	}
	if err := unix.Chroot(newRoot); err != nil {
		return fmt.Errorf("vmagent: entering the root: %w", err)
	}
	return os.Chdir("/")
}

// setupGuest brings the loopback up, names the guest and enables the
// controllers that every command's cgroup reports from.
func setupGuest() error {
	if err := loopbackUp(); err != nil {
		return err
	}
	if name := cmdlineValue("tether.hostname"); name != "" {
		_ = unix.Sethostname([]byte(name))
	}
	_ = os.WriteFile("/sys/fs/cgroup/cgroup.subtree_control", []byte("+memory +pids"), 0o644)
	return newMachineID()
}

func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("vmagent: %w", err)
	}
	defer func() { _ = unix.Close(fd) }()
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("vmagent: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("vmagent: reading lo's flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("vmagent: bringing lo up: %w", err)
	}
	return nil
}

// cmdlineValue returns the value of key=value on the kernel command line.
func cmdlineValue(key string) string {
	b, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return ""
	}
	for _, arg := range strings.Fields(string(b)) {
		if k, v, ok := strings.Cut(arg, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// superviseServer starts the server and reaps every child, the server's
// orphans among them, starting the server again if it ends.
func superviseServer() error {
	for {
		server := exec.Command("/proc/self/exe", ServeArg) //nolint:noctx // the guest's lifetime
		server.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
		server.Stdout, server.Stderr = os.Stdout, os.Stderr
		if err := server.Start(); err != nil {
			return fmt.Errorf("vmagent: starting the server: %w", err)
		}
		for {
			var status unix.WaitStatus
			pid, err := unix.Wait4(-1, &status, 0, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return fmt.Errorf("vmagent: waiting: %w", err)
			}
			if pid == server.Process.Pid {
				fmt.Fprintf(os.Stderr, "vmagent: the server ended (%v); starting it again\n", status)
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// PowerOff ends the guest.
func PowerOff() {
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	os.Exit(1)
}

// port finds the virtio-serial port named name.
func port(name string) (string, error) {
	ports, _ := filepath.Glob("/sys/class/virtio-ports/*")
	for _, p := range ports {
		n, err := os.ReadFile(filepath.Join(p, "name"))
		if err == nil && strings.TrimSpace(string(n)) == name {
			return "/dev/" + filepath.Base(p), nil
		}
	}
	return "", fmt.Errorf("vmagent: no virtio-serial port named %s", name)
}
