package local_test

import (
	"strings"
	"testing"

	"github.com/tetherhq/tether/provider"
)

// TestOpenFilesLimit: every process of a sandbox, its init and what exec
// starts, holds at most the open-files limit, soft and hard, and cannot
// raise it; a create may ask for another within the maximum.
func TestOpenFilesLimit(t *testing.T) {
	t.Parallel()
	p, _ := newProvider(t)
	res := create(t, p, provider.CreateSpec{})
	check := func(id, want string) {
		t.Helper()
		// Every process but pid 1, bubblewrap's own reaper, which runs
		// no code of the sandbox's: the init's shell and the command.
		if r := run(t, p, id, `ulimit -Sn; ulimit -Hn; for d in /proc/[0-9]*; do [ "$d" = /proc/1 ] || grep 'Max open files' "$d/limits" 2>/dev/null; done | tr -s ' ' | cut -d' ' -f4,5 | sort -u`); r.Output != want+"\n"+want+"\n"+want+" "+want+"\n" {
			t.Errorf("limits in the sandbox = %q; want %s soft and hard, for every process", r.Output, want)
		}
		if r := run(t, p, id, `ulimit -n 65536 2>&1; echo exit=$?`); !strings.Contains(r.Output, "exit=2") && !strings.Contains(r.Output, "exit=1") {
			t.Errorf("raising the limit inside = %q; want it refused", r.Output)
		}
		// Opening more than the limit fails inside; the host is not asked.
		if r := run(t, p, id, `i=0; while [ $i -lt `+want+` ]; do exec 3</dev/null 2>/dev/null; i=$((i+1)); done; python3 -c "
import os
fds=[]
try:
    while True: fds.append(os.open('/dev/null', os.O_RDONLY))
except OSError as e: print('stopped at', len(fds), e.strerror)
" 2>/dev/null || echo no-python`); !strings.Contains(r.Output, "Too many open files") && !strings.Contains(r.Output, "no-python") {
			t.Errorf("opening files past the limit = %q; want EMFILE", r.Output)
		}
	}
	check(res.SandboxID, "1024")
	asked := create(t, p, provider.CreateSpec{Params: []byte(`{"open_files": 128}`)})
	check(asked.SandboxID, "128")
	for _, raw := range []string{`{"open_files": 10}`, `{"open_files": 1000000}`, `{"open_files": "many"}`} {
		if err := p.ValidateParams([]byte(raw)); provider.ErrorCode(err) != provider.CodeInvalidRequest {
			t.Errorf("ValidateParams(%s) = %v, want INVALID_REQUEST", raw, err)
		}
	}
}
