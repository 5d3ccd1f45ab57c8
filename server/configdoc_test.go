package server

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// TestConfigurationDocMatchesCode: docs/configuration.md's table is the
// settings table, row by row: the same names in the same order, each with
// the same default; and the settings are all the configuration reads.
func TestConfigurationDocMatchesCode(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `([A-Z][A-Z0-9_]*)` \\| *(`([^`]*)`)? *\\|")
	type entry struct{ name, def string }
	var documented []entry
	for line := range strings.SplitSeq(string(b), "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			documented = append(documented, entry{m[1], m[3]})
		}
	}
	table := settings()
	seen := map[string]bool{}
	for i, s := range table {
		if seen[s.name] {
			t.Errorf("%s is in the settings table twice", s.name)
		}
		seen[s.name] = true
		if s.doc == "" {
			t.Errorf("%s has no doc line", s.name)
		}
		if i >= len(documented) {
			t.Errorf("row %d: %s is not documented (the doc's table ends before it)", i+1, s.name)
			continue
		}
		d := documented[i]
		if d.name != s.name {
			t.Fatalf("row %d: the doc has %s where the settings table has %s (same order, please)", i+1, d.name, s.name)
		}
		if d.def != s.def {
			t.Errorf("%s: the doc's default %q is not the code's %q", s.name, d.def, s.def)
		}
	}
	for _, d := range documented[min(len(table), len(documented)):] {
		t.Errorf("%s is documented but not in the settings table", d.name)
	}

	// The configuration reads the settings and nothing else, and each
	// default is what the code does when the variable is unset.
	const db = "postgres://x@127.0.0.1/tether"
	read := map[string]bool{}
	base, err := loadConfig(func(name string) string {
		read[name] = true
		if name == "DATABASE_URL" {
			return db
		}
		return ""
	})
	if err != nil {
		t.Fatalf("loadConfig with defaults: %v", err)
	}
	for name := range read {
		if !seen[name] {
			t.Errorf("loadConfig reads %s, which is not in the settings table", name)
		}
	}
	for _, s := range table {
		if !read[s.name] {
			t.Errorf("%s is in the settings table but loadConfig does not read it", s.name)
		}
		if s.def == "" {
			continue // required, unset by default, or worked out at start
		}
		cfg, err := loadConfig(func(n string) string {
			switch n {
			case "DATABASE_URL":
				return db
			case s.name:
				return s.def
			}
			return ""
		})
		if err != nil {
			t.Errorf("%s=%s (its default) is refused: %v", s.name, s.def, err)
			continue
		}
		cfg.WorkerID = base.WorkerID // random per call
		if !reflect.DeepEqual(cfg, base) {
			t.Errorf("%s: setting its default %q changes the configuration", s.name, s.def)
		}
	}
}
