package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// phaseCost is what one phase cost: its operations, the CPU that Tether and
// Postgres spent on them (from /proc, the phase and the settling of its
// work after it), Tether's CPU profile bucketed by what it was doing, and
// Postgres's statements (pg_stat_statements) per operation.
type phaseCost struct {
	Name string `json:"name"`
	// Binary is the Tether that ran: "this" (the working tree) or the
	// -ab baseline's git revision.
	Binary string `json:"binary"`
	Ops    int64  `json:"ops"`
	// Rate is operations per second over the phase (not its settling).
	Rate float64 `json:"rate_per_s"`
	// Seconds is the phase's length plus the settling after it.
	Seconds float64 `json:"seconds"`
	// TetherUS and PostgresUS are CPU microseconds per operation (user +
	// system, Postgres summed over all its processes).
	TetherUS   float64 `json:"tether_cpu_us_per_op"`
	PostgresUS float64 `json:"postgres_cpu_us_per_op"`
	// Buckets split Tether's profile by the innermost component a sample
	// was in; Entries by the goroutine's root (who asked for the work).
	Buckets    []share     `json:"profile_buckets,omitempty"`
	Entries    []share     `json:"profile_entries,omitempty"`
	Profile    string      `json:"profile,omitempty"`
	Statements []statement `json:"statements,omitempty"`
}

// share is a part of a profile, as a fraction of its samples.
type share struct {
	Name     string  `json:"name"`
	Fraction float64 `json:"fraction"`
}

// statement is one normalised statement of pg_stat_statements over a
// phase, per operation of the phase.
type statement struct {
	Query       string  `json:"query"`
	CallsPerOp  float64 `json:"calls_per_op"`
	MeanMS      float64 `json:"mean_ms"`
	TotalMSOp   float64 `json:"total_ms_per_op"`
	RowsPerOp   float64 `json:"rows_per_op"`
	WALBytesOp  float64 `json:"wal_bytes_per_op"`
	BlocksPerOp float64 `json:"shared_blocks_per_op"`
}

// profiler measures phases: it holds the admin connection that reads and
// resets pg_stat_statements (nil when the extension is not loaded), and the
// folder profiles are written to.
type profiler struct {
	admin *pgxpool.Pool
	dir   string
	logf  func(string, ...any)
}

// newProfiler prepares pg_stat_statements on the server of admin, if it is
// preloaded (scripts/postgres.sh does for cluster "bench").
func newProfiler(ctx context.Context, admin *pgxpool.Pool, dir string, logf func(string, ...any)) *profiler {
	p := &profiler{dir: filepath.Join(dir, "profiles"), logf: logf}
	if _, err := admin.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		logf("pg_stat_statements not available (%v): no per-statement costs", err)
	} else if _, err := admin.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
		logf("pg_stat_statements not preloaded (%v): no per-statement costs", err)
	} else {
		p.admin = admin
	}
	_ = os.MkdirAll(p.dir, 0o755)
	return p
}

// measure runs fn, which returns how many operations it completed, then
// settle, and returns the phase's cost. With pprofURL (Tether's PPROF_ADDR)
// it takes a CPU profile of the phase's first `length`; db names the
// database whose statements count.
func (p *profiler) measure(ctx context.Context, name, binary string, pid int, pprofURL, db string, length time.Duration,
	fn func() int64, settle func() error,
) (phaseCost, error) {
	pc := phaseCost{Name: name, Binary: binary}
	if p.admin != nil {
		if _, err := p.admin.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
			return pc, fmt.Errorf("reset pg_stat_statements: %w", err)
		}
	}
	profile := make(chan []byte, 1)
	if pprofURL != "" {
		go func() { profile <- fetchProfile(ctx, pprofURL, length) }()
	} else {
		profile <- nil
	}
	before := sampleCPU(pid)
	pc.Ops = fn()
	if err := settle(); err != nil {
		return pc, err
	}
	after := sampleCPU(pid)
	pc.Seconds = after.at.Sub(before.at).Seconds()
	if pc.Ops > 0 && before.ok && after.ok {
		pc.TetherUS = float64((after.tether - before.tether).Microseconds()) / float64(pc.Ops)
		pc.PostgresUS = float64((after.postgres - before.postgres).Microseconds()) / float64(pc.Ops)
	}
	if p.admin != nil && pc.Ops > 0 {
		var err error
		if pc.Statements, err = p.statements(ctx, db, pc.Ops); err != nil {
			return pc, err
		}
	}
	if raw := <-profile; len(raw) > 0 {
		file := filepath.Join(p.dir, slug(binary+"-"+name)+".pprof")
		if err := os.WriteFile(file, raw, 0o644); err == nil {
			pc.Profile = file
			if pc.Buckets, pc.Entries, err = bucketProfile(ctx, file); err != nil {
				p.logf("profile %s: %v", file, err)
			}
		}
	}
	return pc, nil
}

// fetchProfile asks Tether's pprof for a CPU profile of d (at least a
// second); nil if it cannot.
func fetchProfile(ctx context.Context, base string, d time.Duration) []byte {
	secs := max(1, int(d/time.Second))
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs+30)*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, secs), nil)
	if err != nil {
		return nil
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil
	}
	return b
}

var spaces = regexp.MustCompile(`\s+`)

// statements reads pg_stat_statements for database db, the costliest first,
// per operation.
func (p *profiler) statements(ctx context.Context, db string, ops int64) ([]statement, error) {
	rows, err := p.admin.Query(ctx, `
		SELECT query, calls, total_exec_time, rows, wal_bytes::float8, shared_blks_hit + shared_blks_read
		FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1)
		  AND query !~* 'pg_stat_statements'
		ORDER BY total_exec_time DESC`, db)
	if err != nil {
		return nil, fmt.Errorf("read pg_stat_statements: %w", err)
	}
	defer rows.Close()
	var out []statement
	for rows.Next() {
		var (
			q          string
			calls, rws int64
			total, wal float64
			blocks     int64
		)
		if err := rows.Scan(&q, &calls, &total, &rws, &wal, &blocks); err != nil {
			return nil, err
		}
		perOp := func(v float64) float64 { return v / float64(ops) }
		text := strings.TrimSpace(spaces.ReplaceAllString(q, " "))
		out = append(out, statement{Query: text, CallsPerOp: perOp(float64(calls)), MeanMS: total / float64(max(calls, 1)),
			TotalMSOp: perOp(total), RowsPerOp: perOp(float64(rws)), WALBytesOp: perOp(wal), BlocksPerOp: perOp(float64(blocks))})
	}
	return out, rows.Err()
}

// bucketRules name the component of a stack frame, the first that matches
// (function names as pprof prints them). Frames no rule names (the
// runtime's allocator, system calls, internal/poll) count for the nearest
// caller that one does: a pgx read's system call is pgx's.
var bucketRules = []struct{ name, re string }{
	{"pgx (encode, decode, I/O)", `^github\.com/jackc/`},
	{"JSON", `^encoding/json\.`},
	{"logging", `^log/slog\.`},
	{"metrics", `^github\.com/prometheus/`},
	{"auth", `internal/http\.(withAuth|authenticate|bearerKey|clientAddr|\(\*keyCache\)|\(\*authGuard\))`},
	{"rate limiting, quotas", `internal/http\.(\(\*quotas\)|\(\*bucket\)|\(\*tenantQuota\)|withCreateQuota|exceeded)`},
	{"notifier", `internal/store/notify\.`},
	{"sim provider", `internal/provider/sim\.`},
	{"store (SQL, batching, scanning)", `internal/store\.`},
	{"executor (claims, results)", `internal/lifecycle\.`},
	{"handlers", `internal/http\.`},
	{"gin routing, middleware", `^github\.com/gin-gonic/`},
	{"net/http serving", `^net/http\.`},
	{"crypto, hashing", `^crypto/|^hash/`},
}

// entryRules name who a goroutine works for, by the outermost frame that
// matches.
var entryRules = []struct{ name, re string }{
	{"HTTP requests", `^net/http\.\(\*conn\)\.serve`},
	{"webhook worker", `internal/lifecycle\.\(\*Webhooks\)`},
	{"executor", `internal/lifecycle\.`},
	{"notifier", `internal/store/notify\.`},
	{"GC", `^runtime\.(gcBgMarkWorker|bgsweep|bgscavenge)`},
	{"store (batches, background)", `internal/store\.`},
}

type rule struct {
	name string
	re   *regexp.Regexp
}

func compileRules(rs []struct{ name, re string }) []rule {
	out := make([]rule, len(rs))
	for i, r := range rs {
		out[i] = rule{r.name, regexp.MustCompile(r.re)}
	}
	return out
}

var (
	compiledBuckets = compileRules(bucketRules)
	compiledEntries = compileRules(entryRules)
)

// bucketProfile splits a CPU profile by component and by entry, from
// `go tool pprof -traces`.
func bucketProfile(ctx context.Context, file string) (buckets, entries []share, err error) {
	out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-traces", file).Output()
	if err != nil {
		return nil, nil, fmt.Errorf("go tool pprof -traces: %w", err)
	}
	byBucket, byEntry := map[string]float64{}, map[string]float64{}
	var total float64
	for _, tr := range parseTraces(out) {
		total += tr.value
		byBucket[classify(tr.frames, compiledBuckets, false, "runtime (scheduler, GC, netpoll)")] += tr.value
		byEntry[classify(tr.frames, compiledEntries, true, "other (runtime, timers)")] += tr.value
	}
	return shares(byBucket, total), shares(byEntry, total), nil
}

type trace struct {
	value  float64 // seconds
	frames []string
}

// parseTraces reads `go tool pprof -traces` output: blocks separated by
// dashed lines, each a value and the leaf frame on its first line and the
// callers below, one a line.
func parseTraces(out []byte) []trace {
	var (
		res []trace
		cur *trace
	)
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "-----") {
			cur = nil
			continue
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if cur == nil {
			if len(fields) < 2 {
				continue
			}
			v, ok := parseDuration(fields[0])
			if !ok {
				continue
			}
			res = append(res, trace{value: v})
			cur = &res[len(res)-1]
			fields = fields[1:]
		}
		cur.frames = append(cur.frames, fields[0])
	}
	return res
}

// parseDuration reads pprof's "10ms", "1.20s", "500us".
func parseDuration(s string) (float64, bool) {
	for _, u := range []struct {
		suffix string
		scale  float64
	}{{"ms", 1e-3}, {"us", 1e-6}, {"µs", 1e-6}, {"ns", 1e-9}, {"s", 1}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f * u.scale, err == nil
		}
	}
	return 0, false
}

// classify names a stack (leaf first) by the first frame a rule matches,
// from the leaf or, with outermost, from the root.
func classify(frames []string, rules []rule, outermost bool, fallback string) string {
	for i := range frames {
		f := frames[i]
		if outermost {
			f = frames[len(frames)-1-i]
		}
		for _, r := range rules {
			if r.re.MatchString(f) {
				return r.name
			}
		}
	}
	return fallback
}

func shares(m map[string]float64, total float64) []share {
	out := make([]share, 0, len(m))
	for name, v := range m {
		if total > 0 {
			out = append(out, share{name, v / total})
		}
	}
	slices.SortFunc(out, func(a, b share) int {
		if a.Fraction != b.Fraction {
			if a.Fraction > b.Fraction {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

var nonWord = regexp.MustCompile(`[^a-z0-9]+`)

func slug(s string) string {
	return strings.Trim(nonWord.ReplaceAllString(strings.ToLower(s), "-"), "-")
}
