package cli

import (
	"os/exec"
	"strings"
	"testing"
)

// TestShellCommandKeepsArgv runs shellCommand's line with every shell on
// this host that a sandbox may have as sh, and checks the command it runs
// sees exactly the argv it was given.
func TestShellCommandKeepsArgv(t *testing.T) {
	t.Parallel()
	argv := []string{"it's", `"double"`, "a b  c", "$HOME", "${PATH:-x}", "line1\nline2", "", `back\slash`, "*", "?", "[a]", "~", "~root",
		"$(id)", "`id`", "'", "''", `'\''`, "%1", "if", "a=b", "-n", "--", "tab\there", "é ü 中", "!", "#not a comment", ";", "&&", "|",
		"<", ">x", "(", ")", "{", "}", "{a,b}", "\\", "\r", "\x1b[2J", "\u00a0"}
	var shells []string
	for _, sh := range []string{"sh", "dash", "bash", "busybox", "mksh", "zsh"} {
		if path, err := exec.LookPath(sh); err == nil {
			shells = append(shells, path)
		}
	}
	if len(shells) == 0 {
		t.Skip("no shell on this host")
	}
	line, err := shellCommand(append([]string{"printf", `%s\0`}, argv...))
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range shells {
		args := []string{"-c", line}
		if strings.HasSuffix(sh, "busybox") {
			args = append([]string{"sh"}, args...)
		}
		out, err := exec.Command(sh, args...).Output()
		if err != nil {
			t.Errorf("%s -c %q: %v", sh, line, err)
			continue
		}
		got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
		if len(got) != len(argv) || strings.Join(got, "\x00") != strings.Join(argv, "\x00") {
			t.Errorf("%s -c %q saw\n%q\nwant\n%q", sh, line, got, argv)
		}
	}
	// A first word is a program's name: reserved words and assignments
	// are quoted there (and only there).
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"if", "then"}, "'if' then"},
		{[]string{"FOO=bar", "env"}, "'FOO=bar' env"},
		{[]string{"sh", "-c", "exit 3"}, "sh -c 'exit 3'"},
		{[]string{"echo", "a=b", "time", "it's"}, `echo 'a=b' time 'it'\''s'`},
		{[]string{"/bin/ls", "-la", "/tmp/"}, "/bin/ls -la /tmp/"},
	} {
		if got, err := shellCommand(tc.argv); err != nil || got != tc.want {
			t.Errorf("shellCommand(%q) = %q, %v; want %q", tc.argv, got, err, tc.want)
		}
	}
	if _, err := shellCommand([]string{"echo", "bad \xff"}); err == nil {
		t.Error("an argument that is not UTF-8 was taken")
	}
}
