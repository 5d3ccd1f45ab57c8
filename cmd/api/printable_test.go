package main

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/provider/local"
	"github.com/tetherhq/tether/internal/store/storetest"
	"github.com/tetherhq/tether/test/harness"
)

func TestPrintable(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain\ttext\n":              "plain\ttext\n",
		"\x1b]0;pwned\x07":           `\x1b]0;pwned\x07`,
		"\x1b[2J\rover":              `\x1b[2J\x0dover`,
		"é ok \u009b31m":             `é ok \u009b31m`,
		"bad \xff utf8":              `bad \xff utf8`,
		"\u202egnp.exe":              `\u202egnp.exe`,
		"del\x7f and nul\x00":        `del\x7f and nul\x00`,
		"\x1b]52;c;cGF3bmVk\x07rest": `\x1b]52;c;cGF3bmVk\x07rest`,
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %q; want %q", in, got, want)
		}
	}
}

// TestCLIExecShowsEscapes: `tether sandboxes exec` of a command that prints
// terminal escapes (a window title, a screen clear, a clipboard write)
// shows them as text; --raw passes them on.
func TestCLIExecShowsEscapes(t *testing.T) {
	t.Parallel()
	state := harness.ReachableTempDir(t)
	s := start(t, map[string]string{
		"DATABASE_URL": storetest.NewURL(t), "BOOTSTRAP_API_KEY": "k",
		"PROVIDERS": "local", "LOCAL_STATE_DIR": state, "LOCAL_WORKSPACE_MB": "0",
	})
	code, sb := s.do(t, http.MethodPost, "/v1/sandboxes", "k", `{}`)
	if code != http.StatusAccepted {
		t.Fatalf("create = %d %v", code, sb)
	}
	id, _ := sb["id"].(string)
	t.Cleanup(func() {
		if p, err := local.New(state); err == nil {
			_ = p.Destroy(context.Background(), id)
		}
	})
	if code, sb = s.do(t, http.MethodGet, "/v1/sandboxes/"+id+"?wait=30s", "k", ""); code != http.StatusOK || sb["state"] != "ready" {
		t.Fatalf("wait for ready = %d %v", code, sb)
	}
	env := map[string]string{"TETHER_URL": s.base, "TETHER_API_KEY": "k"}
	exec := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		if err := run(ctx, append([]string{"sandboxes", "exec"}, args...), func(k string) string { return env[k] }, &out, &errOut); err != nil {
			t.Fatalf("exec: %v %s", err, errOut.String())
		}
		return out.String()
	}
	cmd := []string{id, "--", `printf '\033]0;pwned\007\033[2Jhi\n'`}
	if got := exec(cmd...); strings.ContainsRune(got, 0x1b) || got != `\x1b]0;pwned\x07\x1b[2Jhi`+"\n" {
		t.Errorf("exec printed %q; want the escapes shown as text", got)
	}
	if got := exec(append([]string{"--raw"}, cmd...)...); got != "\x1b]0;pwned\x07\x1b[2Jhi\n" {
		t.Errorf("exec --raw printed %q; want the output as is", got)
	}
}
