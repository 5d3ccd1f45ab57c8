package docs_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tetherhq/tether/docs"
	"github.com/tetherhq/tether/internal/domain"
)

// TestArchitectureEdgesMatchTheLifecycle reads the state-edge table of
// docs/architecture.md ("Who moves each state edge") and checks that it
// names exactly the edges domain.CanTransition allows: none missing, none
// the code refuses.
func TestArchitectureEdgesMatchTheLifecycle(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "## Who moves each state edge")
	if !ok {
		t.Fatal(`docs/architecture.md has no "Who moves each state edge" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	row := regexp.MustCompile("(?m)^\\| ((?:`[a-z]+`/?)+) → `([a-z]+)` \\|")
	state := regexp.MustCompile("`([a-z]+)`")
	documented := map[[2]domain.State]bool{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		for _, from := range state.FindAllStringSubmatch(m[1], -1) {
			documented[[2]domain.State{domain.State(from[1]), domain.State(m[2])}] = true
		}
	}
	if len(documented) == 0 {
		t.Fatal("found no edge rows in the table")
	}
	for _, from := range domain.States {
		for _, to := range domain.States {
			edge := [2]domain.State{from, to}
			switch allowed := domain.CanTransition(from, to); {
			case allowed && !documented[edge]:
				t.Errorf("the code allows %s → %s; docs/architecture.md's table does not name it", from, to)
			case !allowed && documented[edge]:
				t.Errorf("docs/architecture.md's table names %s → %s; the code refuses it", from, to)
			}
		}
	}
}

// TestDescriptionsNameOnlyDocumentedSchemas: a description that says a
// value is "a Problem" or "an ExecResult" names a schema the document has,
// so a client generator (or reader) can find it.
func TestDescriptionsNameOnlyDocumentedSchemas(t *testing.T) {
	t.Parallel()
	var doc struct {
		Components struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(docs.OpenAPIJSON, &doc); err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile(`\b(?:an?|the) ((?:[A-Z][a-z]+){2,})\b`)
	seen := 0
	for _, m := range named.FindAllStringSubmatch(string(docs.OpenAPIJSON), -1) {
		seen++
		if _, ok := doc.Components.Schemas[m[1]]; !ok {
			t.Errorf("a description names %q, which is not a schema of the document", m[1])
		}
	}
	if seen == 0 {
		t.Error("no description names a schema: the pattern is broken")
	}
}

// TestExampleIDsAreValid: a sandbox id the document shows as an example is
// one the API would accept, so a reader who copies it gets a 404, not a 400.
func TestExampleIDsAreValid(t *testing.T) {
	t.Parallel()
	ids := regexp.MustCompile(`"(sbx_[0-9a-z]*)"`).FindAllStringSubmatch(string(docs.OpenAPIJSON), -1)
	if len(ids) == 0 {
		t.Fatal("the document shows no example sandbox id")
	}
	for _, m := range ids {
		if !domain.ValidID(m[1]) {
			t.Errorf("example id %s is not a valid sandbox id", m[1])
		}
	}
}

// TestArchitectureNamesEveryPackage: the package table of
// docs/architecture.md names every package of the module but the test-only
// ones, so that a new package cannot go undescribed.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "## Packages")
	if !ok {
		t.Fatal(`docs/architecture.md has no "Packages" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z0-9/_-]+)` \\|").FindAllStringSubmatch(section, -1) {
		named[m[1]] = true
	}
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}", "github.com/tetherhq/tether/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			t.Fatal(err)
		}
		rel = filepath.ToSlash(rel)
		switch {
		case strings.HasPrefix(rel, "test/"), strings.HasSuffix(rel, "test"), strings.HasPrefix(rel, "internal/openapi/cmd"):
			continue // test-only, or the generator's main
		case strings.HasPrefix(rel, "internal/e2b/envdpb/"):
			rel = "internal/e2b/envdpb" // one row for the generated code
		case strings.HasPrefix(rel, "internal/host/"):
			rel = "internal/host" // one row for the host packages, each named in it
			if !strings.Contains(section, "`"+strings.TrimPrefix(filepath.ToSlash(dir[len(root)+1:]), "internal/host/")+"`") {
				t.Errorf("docs/architecture.md's packages do not name %s", dir[len(root)+1:])
			}
		}
		if !named[rel] {
			t.Errorf("docs/architecture.md's package table has no row for %s", rel)
		}
	}
}
