package main

import (
	"fmt"
	"strings"
)

// costsMarkdown renders the phases' costs: CPU per operation (and the A/B
// against the -ab baseline), then for each Tether phase its profile's top
// buckets and Postgres's costliest statements.
func (r *results) costsMarkdown() string {
	if len(r.Costs) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\nCPU per operation (from /proc: user + system time over the phase and the settling of its work, ÷ operations; Postgres summed over its processes):\n\n")
	b.WriteString("| phase | Tether | ops/s | Tether CPU µs/op | Postgres CPU µs/op | Postgres statements ms/op | WAL bytes/op |\n| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, c := range r.Costs {
		var stmtMS, wal float64
		for _, st := range c.Statements {
			stmtMS += st.TotalMSOp
			wal += st.WALBytesOp
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %.0f | %.0f | %.3f | %.0f |\n", c.Name, c.Binary, num(c.Rate), c.TetherUS, c.PostgresUS, stmtMS, wal)
	}
	b.WriteString(r.abMarkdown())
	for _, c := range r.Costs {
		if c.Binary == "pgbench" {
			continue
		}
		fmt.Fprintf(&b, "\n%s (%s): Tether's CPU profile", c.Name, c.Binary)
		if c.Profile != "" {
			fmt.Fprintf(&b, " (`%s`)", c.Profile)
		}
		b.WriteString(" by component — ")
		b.WriteString(joinShares(c.Buckets, 10))
		b.WriteString("; by goroutine — ")
		b.WriteString(joinShares(c.Entries, 6))
		b.WriteString(".\n")
		if len(c.Statements) == 0 {
			continue
		}
		b.WriteString("\n| statement | calls/op | mean ms | ms/op | rows/op | WAL bytes/op | blocks/op |\n| --- | --- | --- | --- | --- | --- | --- |\n")
		for i, st := range c.Statements {
			if i == 8 {
				break
			}
			fmt.Fprintf(&b, "| `%s` | %.2f | %.3f | %.3f | %.2f | %.0f | %.1f |\n", shorten(st.Query, 90),
				st.CallsPerOp, st.MeanMS, st.TotalMSOp, st.RowsPerOp, st.WALBytesOp, st.BlocksPerOp)
		}
	}
	return b.String()
}

// abMarkdown compares each phase of the working tree's Tether with the
// -ab baseline's in the same run.
func (r *results) abMarkdown() string {
	base := map[string]phaseCost{}
	var rev string
	for _, c := range r.Costs {
		if c.Binary != "this" && c.Binary != "pgbench" {
			base[c.Name], rev = c, c.Binary
		}
	}
	if len(base) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nA/B in this run, this tree against %s (ratio this ÷ %s; below 1 is cheaper or, for ops/s, slower):\n\n", rev, rev)
	b.WriteString("| phase | ops/s ratio | Tether CPU/op ratio | Postgres CPU/op ratio |\n| --- | --- | --- | --- |\n")
	for _, c := range r.Costs {
		o, ok := base[c.Name]
		if c.Binary != "this" || !ok {
			continue
		}
		fmt.Fprintf(&b, "| %s | %.2f | %.2f | %.2f |\n", c.Name, ratio(c.Rate, o.Rate), ratio(c.TetherUS, o.TetherUS), ratio(c.PostgresUS, o.PostgresUS))
	}
	return b.String()
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func joinShares(s []share, n int) string {
	var parts []string
	for i, sh := range s {
		if i == n {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.0f%%", sh.Name, 100*sh.Fraction))
	}
	if len(parts) == 0 {
		return "no samples"
	}
	return strings.Join(parts, ", ")
}

func shorten(s string, n int) string {
	s = strings.ReplaceAll(s, "|", "\\|")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
