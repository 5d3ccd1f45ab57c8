package chaos

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The sim's calls.log (see internal/provider/sim): every create and
// destroy call, begun and ended. From it the harness finds two create
// calls of one sandbox that ran at once, and the moment each sandbox's
// resource was removed.

// providerCall is one create or destroy call of the sim's log.
type providerCall struct {
	op, id  string
	pid     int
	epoch   int64
	start   time.Time
	end     time.Time // zero: cut short by its process's death (no end line)
	outcome string
}

// parseCalls reads calls.log: each call once, with its end if it ended.
func parseCalls(r io.Reader) ([]providerCall, error) {
	type key struct {
		op, id string
		pid    int
		start  string
	}
	var calls []providerCall
	at := map[key]int{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || (f[0] != "begin" && f[0] != "end") {
			return nil, fmt.Errorf("calls.log: bad line %q", sc.Text())
		}
		pid, err1 := strconv.Atoi(f[3])
		epoch, err2 := strconv.ParseInt(f[4], 10, 64)
		start, err3 := time.Parse(time.RFC3339Nano, f[5])
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, fmt.Errorf("calls.log: bad line %q", sc.Text())
		}
		k := key{f[1], f[2], pid, f[5]}
		i, seen := at[k]
		if !seen {
			i = len(calls)
			at[k] = i
			calls = append(calls, providerCall{op: f[1], id: f[2], pid: pid, epoch: epoch, start: start})
		}
		if f[0] == "end" {
			if len(f) != 8 {
				return nil, fmt.Errorf("calls.log: bad end line %q", sc.Text())
			}
			end, err := time.Parse(time.RFC3339Nano, f[6])
			if err != nil {
				return nil, fmt.Errorf("calls.log: bad line %q", sc.Text())
			}
			calls[i].end, calls[i].outcome = end, f[7]
		}
	}
	return calls, sc.Err()
}

// overlappingCreates returns the sandboxes two of whose create calls ran
// at once, on one replica or two. A call with no end ran until its process
// died: died gives that moment for a pid (zero: it is still running, so
// until now).
func overlappingCreates(calls []providerCall, died func(pid int) time.Time, now time.Time) []string {
	byID := map[string][]providerCall{}
	for _, c := range calls {
		if c.op == "create" {
			byID[c.id] = append(byID[c.id], c)
		}
	}
	var out []string
	for id, cs := range byID {
		ends := make([]time.Time, len(cs))
		for i, c := range cs {
			ends[i] = c.end
			if ends[i].IsZero() {
				if ends[i] = died(c.pid); ends[i].IsZero() {
					ends[i] = now
				}
			}
		}
		for i := range cs {
			for j := i + 1; j < len(cs); j++ {
				if cs[i].start.Before(ends[j]) && cs[j].start.Before(ends[i]) {
					out = append(out, fmt.Sprintf("%s: create by pid %d epoch %d at %s and by pid %d epoch %d at %s overlapped",
						id, cs[i].pid, cs[i].epoch, cs[i].start.Format("15:04:05.000"), cs[j].pid, cs[j].epoch, cs[j].start.Format("15:04:05.000")))
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// removals returns, per sandbox, when a destroy call removed its resource.
func removals(calls []providerCall) map[string]time.Time {
	out := map[string]time.Time{}
	for _, c := range calls {
		if c.op == "destroy" && c.outcome == "removed" {
			out[c.id] = c.end
		}
	}
	return out
}

// calls reads the sim's calls.log (TestChaos).
func (h *chaos) calls() []providerCall {
	f, err := os.Open(filepath.Join(h.simDir, "calls.log"))
	if err != nil {
		h.t.Errorf("calls.log: %v", err)
		return nil
	}
	defer func() { _ = f.Close() }()
	calls, err := parseCalls(f)
	if err != nil {
		h.t.Error(err)
	}
	return calls
}

// died returns when the replica process pid ended (zero: it runs, or is
// not a replica's).
func (h *chaos) died(pid int) time.Time {
	for _, r := range h.replicas {
		for _, l := range r.Lives() {
			if l.PID == pid {
				return l.To
			}
		}
	}
	return time.Time{}
}
