// Package deploy_test checks the deployment files against what Tether needs
// of them.
package deploy_test

import (
	"net/url"
	"os"
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
