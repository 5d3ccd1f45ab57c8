package harness

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// configRow is a row of docs/configuration.md's table: | `NAME` | `default` | ...
var configRow = regexp.MustCompile("(?m)^\\| `([A-Z][A-Z0-9_]*)` \\| (?:`([^`]*)`)? *\\|")

// DocumentedSettings returns the environment variables of
// docs/configuration.md's table, each with its documented default ("" for
// none).
func DocumentedSettings(t testing.TB) map[string]string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(RepoRoot(t), "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, m := range configRow.FindAllStringSubmatch(string(doc), -1) {
		out[m[1]] = m[2]
	}
	if len(out) == 0 {
		t.Fatal("docs/configuration.md has no table of settings")
	}
	return out
}
