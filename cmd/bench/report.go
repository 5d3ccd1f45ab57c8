package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// target is one performance target (see BENCHMARKS.md): a measurement, the
// baseline it is compared with, and the verdict.
type target struct {
	Name     string  `json:"name"`
	Measured float64 `json:"measured"`
	Unit     string  `json:"unit"`
	Baseline float64 `json:"baseline"`
	Against  string  `json:"against"`
	Ratio    float64 `json:"ratio"`
	// Want is the bound on Ratio: ">= 0.40" or "<= 4".
	Want string `json:"want"`
	Pass bool   `json:"pass"`
	// Info marks a measurement reported without a target of its own.
	Info bool `json:"info,omitempty"`
}

func atLeast(name string, measured float64, unit string, baseline float64, against string, want float64) target {
	r := measured / baseline
	return target{Name: name, Measured: measured, Unit: unit, Baseline: baseline, Against: against, Ratio: r,
		Want: fmt.Sprintf(">= %.2f", want), Pass: r >= want}
}

func atMost(name string, measured float64, unit string, baseline float64, against string, want float64) target {
	r := measured / baseline
	return target{Name: name, Measured: measured, Unit: unit, Baseline: baseline, Against: against, Ratio: r,
		Want: fmt.Sprintf("<= %.2f", want), Pass: r <= want}
}

type results struct {
	When      time.Time         `json:"when"`
	Machine   string            `json:"machine"`
	Quick     bool              `json:"quick"`
	Baselines baselines         `json:"baselines"`
	Targets   []target          `json:"targets"`
	Notes     []string          `json:"notes"`
	Unloaded  []float64         `json:"request_to_ready_unloaded_ms"`
	Loaded    []float64         `json:"request_to_ready_loaded_ms"`
	Extra     map[string]string `json:"extra"`
	// CPU is where each throughput phase's CPU time went, in cores.
	CPU []string `json:"cpu"`
	// Kube are the kubernetes phases' samples, when they ran.
	Kube *kubeRaw `json:"kubernetes,omitempty"`
	// Costs are each phase's cost per operation, profile and statements
	// (with -profile), for the working tree's Tether, the -ab baseline's
	// and pgbench.
	Costs []phaseCost `json:"costs,omitempty"`
}

func toMS(l latencies) []float64 {
	out := make([]float64, len(l))
	for i, d := range l {
		out[i] = ms(d)
	}
	slices.Sort(out)
	return out
}

func machine() string {
	var parts []string
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		cores := strings.Count(string(b), "processor\t:")
		model := ""
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name\t: "); ok {
				model = v
				break
			}
		}
		parts = append(parts, fmt.Sprintf("%d × %s", cores, model))
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int
		_, _ = fmt.Sscanf(string(b), "MemTotal: %d kB", &kb)
		parts = append(parts, fmt.Sprintf("%.0f GiB RAM", float64(kb)/(1<<20)))
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		parts = append(parts, "Linux "+strings.TrimSpace(string(b)))
	}
	return strings.Join(parts, ", ")
}

// markdown renders the results as the table BENCHMARKS.md shows.
func (r *results) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Run %s on %s%s.\n\n", r.When.Format(time.RFC3339), r.Machine, map[bool]string{true: " (quick smoke run: numbers are not meaningful)", false: ""}[r.Quick])
	if r.Baselines != (baselines{}) { // none with -only
		fmt.Fprintf(&b, "Baselines (pgbench, same server, same run): TPC-B %.0f tps; simple-update 1 client %.3f ms/tx; select-only %.0f tps; single-row insert %.0f tps.\n\n",
			r.Baselines.TPCBTPS, r.Baselines.SingleLatencyMS, r.Baselines.SelectOnlyTPS, r.Baselines.InsertTPS)
	}
	b.WriteString("| target | measured | baseline | ratio | want | result |\n| --- | --- | --- | --- | --- | --- |\n")
	for _, t := range r.Targets {
		verdict := "pass"
		switch {
		case t.Info:
			verdict = "info"
		case !t.Pass:
			verdict = "**FAIL**"
		}
		fmt.Fprintf(&b, "| %s | %s %s | %s %s | %.2f | %s | %s |\n", t.Name, num(t.Measured), t.Unit, num(t.Baseline), t.Against, t.Ratio, t.Want, verdict)
	}
	if len(r.CPU) > 0 {
		b.WriteString("\nCPU used during each throughput phase (the machine has " + strconv.Itoa(runtime.NumCPU()) + " cores):\n\n")
		for _, c := range r.CPU {
			b.WriteString("- " + c + "\n")
		}
	}
	b.WriteString(r.costsMarkdown())
	if len(r.Notes) > 0 {
		b.WriteString("\n")
		for _, n := range r.Notes {
			b.WriteString("- " + n + "\n")
		}
	}
	return b.String()
}

func num(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

// svgCDF draws the distribution of request-to-ready latencies, unloaded and
// loaded, as cumulative curves on a log-scaled time axis.
func svgCDF(series map[string][]float64, title string) string {
	const w, h, left, right, top, bottom = 720, 400, 60, 20, 40, 50
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range series {
		for _, v := range s {
			if v > 0 {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
	}
	if math.IsInf(lo, 1) {
		lo, hi = 0.1, 1
	}
	lo, hi = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))
	if hi <= lo {
		hi = lo * 10
	}
	x := func(v float64) float64 {
		return left + (math.Log10(v)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*(w-left-right)
	}
	y := func(p float64) float64 { return top + (1-p)*(h-top-bottom) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15">%s</text>`+"\n", left, title)
	for d := lo; d <= hi*1.0001; d *= 10 {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/><text x="%.1f" y="%d" text-anchor="middle">%g ms</text>`+"\n",
			x(d), top, x(d), h-bottom, x(d), h-bottom+16, d)
	}
	for _, p := range []float64{0, 0.5, 0.9, 0.99, 1} {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" text-anchor="end">p%g</text>`+"\n",
			left, y(p), w-right, y(p), left-6, y(p)+4, p*100)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">request → ready (log scale)</text>`+"\n", (w+left)/2, h-12)
	colors := []string{"#1f77b4", "#d62728", "#2ca02c"}
	names := make([]string, 0, len(series))
	for name := range series {
		names = append(names, name)
	}
	slices.Sort(names)
	for i, name := range names {
		s := series[name]
		if len(s) == 0 {
			continue
		}
		var pts []string
		for j, v := range s {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(math.Max(v, lo)), y(float64(j+1)/float64(len(s)))))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", colors[i%len(colors)], strings.Join(pts, " "))
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="%s">%s (n=%d)</text>`+"\n", w-right-220, top+18+18*i, colors[i%len(colors)], name, len(s))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func (r *results) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), js, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(r.markdown()), 0o644); err != nil {
		return err
	}
	svg := svgCDF(map[string][]float64{"unloaded": r.Unloaded, "at 50% of max throughput": r.Loaded},
		"Tether: request → ready latency (sim provider, instant)")
	return os.WriteFile(filepath.Join(dir, "latency.svg"), []byte(svg), 0o644)
}

// kubeRaw are the kubernetes phases' samples in results.json, in ms,
// sorted.
type kubeRaw struct {
	ReadyTether  []float64 `json:"request_to_ready_tether_ms"`
	ReadyBare    []float64 `json:"create_to_ready_bare_ms"`
	ReadyInproc  []float64 `json:"provider_create_inproc_ms"`
	ExecTether   []float64 `json:"exec_tether_ms"`
	ExecBare     []float64 `json:"exec_bare_ms"`
	ExecInproc   []float64 `json:"provider_exec_inproc_ms"`
	LoadBefore   string    `json:"loadavg_before"`
	LoadAfter    string    `json:"loadavg_after"`
	Namespace    string    `json:"namespace"`
	Kubeconfig   string    `json:"kubeconfig"`
	PodSpecShape string    `json:"pod_spec_shape"`
}

// info is a row reported without a bound of its own: the measurement, its
// baseline and their ratio.
func info(name string, measured float64, unit string, baseline float64, against string) target {
	return target{Name: name, Measured: measured, Unit: unit, Baseline: baseline, Against: against,
		Ratio: measured / baseline, Want: "none set", Pass: true, Info: true}
}

// loadavg is the machine's load average (1, 5 and 15 minutes), or "?".
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}
