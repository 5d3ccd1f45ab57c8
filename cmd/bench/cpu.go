package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// cpuSample is the CPU time used so far by the load generator (this
// process), Tether, Postgres (all its processes) and the whole machine, read
// from /proc. It shows where the time of a phase went: on two shared cores
// a throughput is only as good as its share of them. The client is this
// process, or pgbench for the baselines (it is our child).
type cpuSample struct {
	at                        time.Time
	loadgen, tether, postgres time.Duration
	busy, idle                time.Duration
	ok                        bool
}

// clockTick is USER_HZ, the unit of /proc's CPU times; it is 100 on every
// Linux architecture Go supports.
const clockTick = 100

func sampleCPU(tetherPID int) cpuSample {
	s := cpuSample{at: time.Now()}
	var err error
	if s.loadgen, _, _, err = procCPU("/proc/self/stat"); err != nil {
		return s
	}
	s.tether, _, _, _ = procCPU(filepath.Join("/proc", strconv.Itoa(tetherPID), "stat"))
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range stats {
		t, comm, ppid, err := procCPU(path)
		if err != nil || comm != "postgres" {
			continue
		}
		// Only the bench's own server when it is known: other clusters on
		// a shared machine are someone else's load.
		if pm := postmasterPID; pm == 0 || ppid == pm || path == filepath.Join("/proc", strconv.Itoa(pm), "stat") {
			s.postgres += t
		}
	}
	if s.busy, s.idle, err = machineCPU(); err != nil {
		return s
	}
	s.ok = true
	return s
}

// procCPU returns a process's user+system time, plus that of its children
// it has reaped (Postgres backends that exited count for the postmaster),
// its command name and its parent's pid.
func procCPU(path string) (time.Duration, string, int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, "", 0, err
	}
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return 0, "", 0, fmt.Errorf("%s: malformed", path)
	}
	fields := strings.Fields(string(b[end+1:]))
	// After the command, fields start at 3 (state) of stat(5): ppid is
	// field 4, utime 14, stime 15, cutime 16, cstime 17.
	if len(fields) < 15 {
		return 0, "", 0, fmt.Errorf("%s: malformed", path)
	}
	ppid, _ := strconv.Atoi(fields[1])
	var sum int64
	for _, f := range fields[11:15] {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, "", 0, fmt.Errorf("%s: malformed", path)
		}
		sum += v
	}
	return ticks(sum), string(b[open+1 : end]), ppid, nil
}

// postmasterPID is the bench's Postgres server's main process, whose
// children are its backends; 0 (every postgres process counts) when it is
// not known (a server given by URL on another machine).
var postmasterPID int

// findPostmaster reads the server's pid from its data folder, when this
// process can.
func findPostmaster(ctx context.Context, admin *pgxpool.Pool) int {
	var dir string
	if err := admin.QueryRow(ctx, `SELECT setting FROM pg_settings WHERE name = 'data_directory'`).Scan(&dir); err != nil {
		return 0
	}
	b, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid
}

// machineCPU returns the machine's busy and idle time from /proc/stat.
func machineCPU() (busy, idle time.Duration, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	fields := strings.Fields(string(line))
	if len(fields) < 5 || fields[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: malformed")
	}
	for i, f := range fields[1:] {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: %w", err)
		}
		switch i {
		case 3, 4: // idle, iowait
			idle += ticks(v)
		case 8, 9: // guest time is counted in user already
		default:
			busy += ticks(v)
		}
	}
	return busy, idle, nil
}

func ticks(n int64) time.Duration { return time.Duration(n) * time.Second / clockTick }

// cpuSplit describes the CPU used between two samples, in cores.
func cpuSplit(a, b cpuSample) string {
	if !a.ok || !b.ok {
		return "CPU split not available (no /proc)"
	}
	wall := b.at.Sub(a.at).Seconds()
	cores := func(d time.Duration) string { return fmt.Sprintf("%.2f", d.Seconds()/wall) }
	other := (b.busy - a.busy) - (b.loadgen - a.loadgen) - (b.tether - a.tether) - (b.postgres - a.postgres)
	return fmt.Sprintf("client %s, Tether %s, Postgres %s, other %s, idle %s cores",
		cores(b.loadgen-a.loadgen), cores(b.tether-a.tether), cores(b.postgres-a.postgres),
		cores(max(other, 0)), cores(b.idle-a.idle))
}
