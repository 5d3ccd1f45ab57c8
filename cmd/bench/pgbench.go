package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	cmd := exec.CommandContext(ctx, p.bin, append(args, p.args...)...)
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

// measureBaselines initialises pgbench's tables and runs the four baseline
// workloads, each for d.
func measureBaselines(ctx context.Context, p *pgbench, d time.Duration, scale, clients int, logf func(string, ...any), cpu func(string, func())) (baselines, error) {
	var b baselines
	if _, err := p.run(ctx, "-i", "-q", "-s", strconv.Itoa(scale)); err != nil {
		return b, err
	}
	secs := strconv.Itoa(max(1, int(d/time.Second)))
	c, j := strconv.Itoa(clients), "2"

	logf("pgbench: TPC-B, %s clients, %ss", c, secs)
	var out string
	var err error
	cpu("pgbench TPC-B", func() { out, err = p.run(ctx, "-M", "prepared", "-c", c, "-j", j, "-T", secs) })
	if err != nil {
		return b, err
	}
	if b.TPCBTPS, err = parseFloat(tpsRe, out); err != nil {
		return b, err
	}

	logf("pgbench: simple-update, 1 client, %ss", secs)
	out, err = p.run(ctx, "-M", "prepared", "-b", "simple-update", "-c", "1", "-T", secs)
	if err != nil {
		return b, err
	}
	if b.SingleLatencyMS, err = parseFloat(latencyRe, out); err != nil {
		return b, err
	}

	logf("pgbench: select-only, %s clients, %ss", c, secs)
	cpu("pgbench select-only", func() { out, err = p.run(ctx, "-M", "prepared", "-S", "-c", c, "-j", j, "-T", secs) })
	if err != nil {
		return b, err
	}
	if b.SelectOnlyTPS, err = parseFloat(tpsRe, out); err != nil {
		return b, err
	}

	logf("pgbench: single-row insert, %s clients, %ss", c, secs)
	script, err := os.CreateTemp("", "pgbench-insert-*.sql")
	if err != nil {
		return b, err
	}
	defer func() { _ = os.Remove(script.Name()) }()
	if _, err := script.WriteString("INSERT INTO bench_insert (payload) VALUES (md5(random()::text));\n"); err != nil {
		return b, err
	}
	_ = script.Close()
	if _, err := p.runSQL(ctx, "DROP TABLE IF EXISTS bench_insert; CREATE TABLE bench_insert (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, payload text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())"); err != nil {
		return b, err
	}
	cpu("pgbench insert", func() {
		out, err = p.run(ctx, "-M", "prepared", "-n", "-f", script.Name(), "-c", c, "-j", j, "-T", secs)
	})
	if err != nil {
		return b, err
	}
	b.InsertTPS, err = parseFloat(tpsRe, out)
	return b, err
}

// runSQL runs a statement through execSQL.
func (p *pgbench) runSQL(ctx context.Context, sql string) (string, error) {
	if p.execSQL == nil {
		return "", fmt.Errorf("no SQL runner")
	}
	return "", p.execSQL(ctx, sql)
}
