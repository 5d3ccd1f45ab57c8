package local

import (
	"strings"
	"testing"
)

func TestProcViews(t *testing.T) {
	t.Parallel()
	mem := string(meminfoView(300))
	if !strings.HasPrefix(mem, "MemTotal:         307200 kB\nMemFree:          307200 kB\nMemAvailable:     307200 kB\n") ||
		!strings.Contains(mem, "\nSwapTotal:             0 kB\n") {
		t.Errorf("meminfoView(300) =\n%s", mem)
	}
	host := "cpu  3 4 5 6 7 8 9 0 0 0\ncpu0 1 2 3 4 5 6 7 0 0 0\ncpu1 2 2 2 2 2 2 2 0 0 0\nintr 991 3 4\nctxt 77\nbtime 1796608767\nprocesses 210590\nprocs_running 3\nprocs_blocked 1\nsoftirq 5 6 7\n"
	want := "cpu 0 0 0 0 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0 0 0\ncpu1 0 0 0 0 0 0 0 0 0 0\nbtime 1796608767\n" +
		"intr 0\nctxt 0\nprocesses 0\nprocs_running 1\nprocs_blocked 0\nsoftirq 0\n"
	if got := string(statView([]byte(host))); got != want {
		t.Errorf("statView =\n%s\nwant\n%s", got, want)
	}
}
