package cli

import "testing"

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
