package sim_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/provider/sim"
	"github.com/tetherhq/tether/provider"
)

// TestCallsLog: every create and destroy call is in calls.log, begun and
// ended, with its epoch and what came of it, whether or not it made or
// removed anything.
func TestCallsLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p, err := sim.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	id := provider.NewSandboxID()
	for _, epoch := range []int64{3, 4} { // the second finds it made
		if _, err := p.Create(t.Context(), provider.CreateSpec{SandboxID: id, Epoch: epoch}); err != nil {
			t.Fatal(err)
		}
	}
	failing := provider.NewSandboxID()
	if _, err := p.Create(t.Context(), provider.CreateSpec{SandboxID: failing, Epoch: 1, Params: []byte(`{"fail":"create"}`)}); err == nil {
		t.Fatal("an injected create failure succeeded")
	}
	for range 2 { // the second finds nothing
		if err := p.Destroy(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "calls.log"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			t.Fatalf("short line %q", line)
		}
		// begin/end, op, id, epoch and the outcome; not the pid or times.
		s := strings.Join([]string{f[0], f[1], f[2][:4], f[4]}, " ")
		if f[0] == "end" {
			if len(f) != 8 || f[5] > f[6] {
				t.Errorf("end line %q: want START <= END and an outcome", line)
			}
			s += " " + f[7]
		}
		got = append(got, s)
	}
	want := []string{
		"begin create sbx_ 3", "end create sbx_ 3 made",
		"begin create sbx_ 4", "end create sbx_ 4 exists",
		"begin create sbx_ 1", "end create sbx_ 1 failed",
		"begin destroy sbx_ 0", "end destroy sbx_ 0 removed",
		"begin destroy sbx_ 0", "end destroy sbx_ 0 absent",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("calls.log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The log is not a resource.
	if inv, err := p.List(t.Context()); err != nil || len(inv) != 0 {
		t.Errorf("List = %+v, %v; want nothing", inv, err)
	}
}
