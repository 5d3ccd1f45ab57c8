package main

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// TestConfigurationDocMatchesCode: docs/configuration.md lists every
// variable loadConfig reads, and nothing else, and each documented default
// is what the code does when the variable is unset.
func TestConfigurationDocMatchesCode(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `([A-Z_]+)` \\| *(`([^`]*)`)? *\\|")
	documented := map[string]string{}
	for line := range strings.SplitSeq(string(b), "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			if _, dup := documented[m[1]]; dup {
				t.Errorf("%s is documented twice", m[1])
			}
			documented[m[1]] = m[3]
		}
	}

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
		if _, ok := documented[name]; !ok {
			t.Errorf("%s is read by the code but not documented", name)
		}
	}
	for name, def := range documented {
		if !read[name] {
			t.Errorf("%s is documented but the code does not read it", name)
			continue
		}
		if def == "" {
			continue // required, unset by default, or computed (WORKER_ID)
		}
		// Setting the documented default must change nothing.
		cfg, err := loadConfig(func(n string) string {
			switch n {
			case "DATABASE_URL":
				return db
			case name:
				return def
			}
			return ""
		})
		if err != nil {
			t.Errorf("%s=%s (the documented default) is refused: %v", name, def, err)
			continue
		}
		cfg.WorkerID = base.WorkerID // random per call
		if !reflect.DeepEqual(cfg, base) {
			t.Errorf("%s: the documented default %q differs from the code's", name, def)
		}
	}
}
