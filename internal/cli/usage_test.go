package cli

import (
	"os"
	"strings"
	"testing"
)

// TestUsageIsDocumented: docs/configuration.md lists the ops commands as
// `tether help` prints them, line for line.
func TestUsageIsDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(Usage, "\n") {
		if !strings.HasPrefix(line, "  ") {
			continue // the header and the footer, said in prose there
		}
		if !strings.Contains(string(doc), "\n"+line[2:]+"\n") {
			t.Errorf("docs/configuration.md lacks the usage line\n%s", line[2:])
		}
	}
}
