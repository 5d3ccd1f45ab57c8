package hostos

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Process is a process of the host as /proc shows it.
type Process struct {
	PID  int
	PPID int      // 0 if its stat could not be read
	Args []string // its command line
	Cwd  string   // its working directory, removed or not; "" if unreadable
}

// Processes lists the host's processes whose command (its first argument)
// has the base name name, bwrap say. A process that ends while it is read
// is listed with what could be read of it, or not at all.
func Processes(name string) ([]Process, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []Process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || len(b) == 0 {
			continue
		}
		args := SplitNUL(b)
		if filepath.Base(args[0]) != name {
			continue
		}
		p := Process{PID: pid, Args: args}
		if fields, err := StatFields(pid); err == nil && len(fields) >= 2 {
			p.PPID, _ = strconv.Atoi(fields[1])
		}
		if cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd"); err == nil {
			p.Cwd = strings.TrimSuffix(cwd, " (deleted)")
		}
		out = append(out, p)
	}
	return out, nil
}

// StatFields is /proc/PID/stat from its third field on (state, ppid, …):
// the command name, the second, may hold spaces and parentheses.
func StatFields(pid int) ([]string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, errors.New("malformed stat")
	}
	return strings.Fields(string(b[i+1:])), nil
}

// SplitNUL splits a NUL-separated /proc list (cmdline, environ).
func SplitNUL(b []byte) []string {
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}
