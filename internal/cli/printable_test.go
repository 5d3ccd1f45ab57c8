package cli

import (
	"encoding/json"
	"testing"
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

func TestCell(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"team=ops":            "team=ops",
		"two\nlines\tand tab": `two\x0alines\x09and tab`,
		"\x1b]0;pwned\x07":    `\x1b]0;pwned\x07`,
		"\u2067rtl":           `\u2067rtl`,
	} {
		if got := cell(in); got != want {
			t.Errorf("cell(%q) = %q; want %q", in, got, want)
		}
	}
}

// TestJSONSafe: -o json writes the same value, with C1 controls and
// bidirectional overrides (which encoding/json leaves as they are) escaped.
func TestJSONSafe(t *testing.T) {
	t.Parallel()
	in := map[string]string{"note": "\x1b]0;x\x07 \u009b2J \u202eabc é"}
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	safe := jsonSafe(data)
	var out map[string]string
	if err := json.Unmarshal(safe, &out); err != nil || out["note"] != in["note"] {
		t.Fatalf("jsonSafe(%s) = %s: decodes to %q, %v", data, safe, out, err)
	}
	if want := `{"note":"\u001b]0;x\u0007 \u009b2J \u202eabc é"}`; string(safe) != want {
		t.Errorf("jsonSafe(%s) = %s; want %s", data, safe, want)
	}
}
