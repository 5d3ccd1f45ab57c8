package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// baselines are pgbench's numbers on the same server, measured in the same
// run: the physical limit Tether is compared against.
type baselines struct {
	TPCBTPS         float64 `json:"tpcb_tps"`
	SingleLatencyMS float64 `json:"single_client_latency_ms"`
	SelectOnlyTPS   float64 `json:"select_only_tps"`
	InsertTPS       float64 `json:"insert_tps"`
}

// pgbench runs pgbench against the database at dbURL.
type pgbench struct {
	bin  string
	args []string // connection arguments
	env  []string
	// execSQL runs a statement on the same database (pgbench itself cannot).
	execSQL func(ctx context.Context, sql string) error
	// Set by prepare.
	insertScript, secs, clients string
}

func newPgbench(dbURL string) (*pgbench, error) {
	bin, err := exec.LookPath("pgbench")
	if err != nil {
		matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pgbench")
		if len(matches) == 0 {
			return nil, fmt.Errorf("pgbench not found (Debian package postgresql-client or postgresql)")
		}
		bin = matches[len(matches)-1]
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		return nil, err
	}
	user := "postgres"
	if u.User != nil && u.User.Username() != "" {
		user = u.User.Username()
	}
	env := os.Environ()
	if pw, ok := u.User.Password(); ok {
		env = append(env, "PGPASSWORD="+pw)
	}
	return &pgbench{
		bin:  bin,
		args: []string{"-h", u.Hostname(), "-p", u.Port(), "-U", user, strings.TrimPrefix(u.Path, "/")},
		env:  env,
	}, nil
}

func (p *pgbench) run(ctx context.Context, args ...string) (string, error) {
	return p.runWith(ctx, p.args, args...)
}

// runWith is run with the connection arguments conn.
func (p *pgbench) runWith(ctx context.Context, conn []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, p.bin, append(args, conn...)...)
	cmd.Env = p.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("pgbench %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

var (
	tpsRe     = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)
	latencyRe = regexp.MustCompile(`latency average = ([0-9.]+) ms`)
)

func parseFloat(re *regexp.Regexp, out string) (float64, error) {
	m := re.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("pgbench output lacks %s:\n%s", re, out)
	}
	return strconv.ParseFloat(m[1], 64)
}

// prepare initialises pgbench's tables and the insert baseline's table and
// script, and sets how long and with how many clients the baselines run.
func (p *pgbench) prepare(ctx context.Context, d time.Duration, scale, clients int) (cleanup func(), err error) {
	if _, err := p.run(ctx, "-i", "-q", "-s", strconv.Itoa(scale)); err != nil {
		return nil, err
	}
	if _, err := p.runSQL(ctx, "DROP TABLE IF EXISTS bench_insert; CREATE TABLE bench_insert (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, payload text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())"); err != nil {
		return nil, err
	}
	script, err := writeScript("pgbench-insert-*.sql", "INSERT INTO bench_insert (payload) VALUES (md5(random()::text));\n")
	if err != nil {
		return nil, err
	}
	p.insertScript = script
	p.secs = strconv.Itoa(max(1, int(d/time.Second)))
	p.clients = strconv.Itoa(clients)
	return func() { _ = os.Remove(script) }, nil
}

// writeScript writes a pgbench script to a new temporary file named after
// pattern and returns its path; the caller removes it.
func writeScript(pattern, text string) (string, error) {
	f, err := os.CreateTemp("", pattern)
	if err != nil {
		return "", err
	}
	_, err = f.WriteString(text)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// The four baselines. Each runs for the phase's length, with as many
// clients as the Tether phase it is compared with (one for the latency),
// just before that phase: the machine's speed drifts within a run, and
// adjacent measurements drift least.

func (p *pgbench) tpcb(ctx context.Context) (float64, error) {
	return p.measure(ctx, tpsRe, "-M", "prepared", "-c", p.clients, "-j", "2", "-T", p.secs)
}

func (p *pgbench) singleLatency(ctx context.Context) (float64, error) {
	return p.measure(ctx, latencyRe, "-M", "prepared", "-b", "simple-update", "-c", "1", "-T", p.secs)
}

func (p *pgbench) selectOnly(ctx context.Context) (float64, error) {
	return p.measure(ctx, tpsRe, "-M", "prepared", "-S", "-c", p.clients, "-j", "2", "-T", p.secs)
}

func (p *pgbench) insert(ctx context.Context) (float64, error) {
	return p.measure(ctx, tpsRe, "-M", "prepared", "-n", "-f", p.insertScript, "-c", p.clients, "-j", "2", "-T", p.secs)
}

func (p *pgbench) measure(ctx context.Context, re *regexp.Regexp, args ...string) (float64, error) {
	return p.measureOn(ctx, "", re, args...)
}

// measureOn is measure on the database db of the same server ("": the
// baselines' own).
func (p *pgbench) measureOn(ctx context.Context, db string, re *regexp.Regexp, args ...string) (float64, error) {
	conn := p.args
	if db != "" {
		conn = append(slices.Clone(p.args[:len(p.args)-1]), db)
	}
	out, err := p.runWith(ctx, conn, args...)
	if err != nil {
		return 0, err
	}
	return parseFloat(re, out)
}

// runSQL runs a statement through execSQL.
func (p *pgbench) runSQL(ctx context.Context, sql string) (string, error) {
	if p.execSQL == nil {
		return "", fmt.Errorf("no SQL runner")
	}
	return "", p.execSQL(ctx, sql)
}
