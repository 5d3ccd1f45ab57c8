package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	t.Parallel()
	none := func(string) string { return "" }
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"bogus"}, `unknown command "bogus"`},
		{[]string{"serve"}, `unknown command "serve"`}, // the server's, not tetherctl's
		// The ops commands want a server, not a database.
		{[]string{"sandboxes", "ls"}, "TETHER_URL"},
		{[]string{"keys", "ls"}, "TETHER_URL"},
		{[]string{"keys", "create", "--name", "bot"}, "TETHER_URL"},
		{[]string{"owners"}, "want ls, or end OWNER"},
	}
	for _, tc := range cases {
		err := run(t.Context(), tc.args, none, nil, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%v) = %v, want an error mentioning %q", tc.args, err, tc.want)
		}
	}
	for _, args := range [][]string{nil, {"help"}} {
		var out bytes.Buffer
		if err := run(t.Context(), args, none, nil, &out, io.Discard); err != nil || !strings.Contains(out.String(), "tether sandboxes ls") {
			t.Errorf("run(%v) = %v, %q; want the ops commands' usage", args, err, out.String())
		}
	}
}
