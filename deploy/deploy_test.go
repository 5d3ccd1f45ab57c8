// Package deploy_test checks the deployment files against what Tether needs
// of them.
package deploy_test

import (
	"encoding/json"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v2"
)

// TestComposeRunsTetherAsAPlainRole: compose.yaml connects Tether as the
// role that deploy/postgres-init.sh makes, which is not a superuser.
func TestComposeRunsTetherAsAPlainRole(t *testing.T) {
	b, err := os.ReadFile("../compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Environment map[string]string `yaml:"environment"`
			Volumes     []string          `yaml:"volumes"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &compose); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	raw := os.Expand(compose.Services["tether"].Environment["DATABASE_URL"], func(string) string { return "x" })
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		t.Fatalf("tether's DATABASE_URL %q: %v", raw, err)
	}
	if user := u.User.Username(); user != "tether" {
		t.Errorf("Tether connects as %q, want the role tether", user)
	}
	mounted := false
	for _, v := range compose.Services["postgres"].Volumes {
		mounted = mounted || strings.HasPrefix(v, "./deploy/postgres-init.sh:/docker-entrypoint-initdb.d/")
	}
	if !mounted {
		t.Error("deploy/postgres-init.sh is not mounted into the postgres service's init folder")
	}
	script, err := os.ReadFile("postgres-init.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CREATE ROLE tether LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE", "CREATE DATABASE tether OWNER tether"} {
		if !strings.Contains(string(script), want) {
			t.Errorf("deploy/postgres-init.sh lacks %q", want)
		}
	}
}

// TestAlertRules checks the Prometheus alert rules with promtool and runs
// their unit tests (scripts/deps.sh installs promtool).
func TestAlertRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is needed to check deploy/prometheus (Debian package prometheus; scripts/deps.sh installs it)")
	}
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "prometheus"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestDashboardsUseRealMetrics: every metric the alerts and the Grafana
// dashboard name is one Tether exports.
func TestDashboardsUseRealMetrics(t *testing.T) {
	exported := map[string]bool{}
	name := regexp.MustCompile(`"(tether_[a-z_]+)"`)
	err := filepath.WalkDir("../internal", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		for _, m := range name.FindAllStringSubmatch(string(b), -1) {
			exported[m[1]] = true
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	used := regexp.MustCompile(`tether_[a-z_]+`)
	suffixes := []string{"_bucket", "_count", "_sum"}
	for _, file := range []string{"prometheus/alerts.yml", "grafana/tether.json"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(file, ".json") {
			var v map[string]any
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
		}
		for _, m := range used.FindAllString(string(b), -1) {
			base := m
			for _, s := range suffixes {
				base = strings.TrimSuffix(base, s)
			}
			if !exported[base] {
				t.Errorf("%s uses %s, which Tether does not export", file, m)
			}
		}
	}
}
