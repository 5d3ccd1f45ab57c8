package docs_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// goSwaggerVersion is the go-swagger that TestGoSwaggerClient generates a
// client with; the client's module requires the go-openapi modules at the
// versions this go-swagger's go.mod names.
const goSwaggerVersion = "v0.36.7"

// TestGoSwaggerClient shows that docs/swagger.json (Swagger 2.0, which
// go-swagger needs) makes a go-swagger client that compiles unedited, and
// that an error response (application/problem+json) decodes into the
// operation's typed error with its Problem, once the transport has a consumer
// for that media type: go-openapi's runtime registers none by default, so a
// user adds one line,
//
//	transport.Consumers["application/problem+json"] = runtime.JSONConsumer()
//
// (or sets transport.MatchSuffix = true). The generated module's own test,
// goSwaggerClientTest, checks both and that without either the error is
// `no consumer: "application/problem+json"`.
//
// go-swagger runs with --skip-validation: swag writes an example on path,
// query and header parameters, which Swagger 2.0 does not allow (OpenAPI 3.0
// does; the converter keeps them), and go-swagger's validation rejects the
// document for it. Nothing else in the document fails validation.
//
// It needs the Go module proxy (or a warm module cache) for go-swagger and
// the go-openapi modules; -short skips it.
func TestGoSwaggerClient(t *testing.T) {
	if testing.Short() {
		t.Skip("generates and builds a go-swagger client (downloads modules); not with -short")
	}
	t.Parallel()
	spec, err := filepath.Abs("swagger.json")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	run := func(name string, args ...string) []byte {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local", "GOWORK=off")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, stdout.Bytes(), stderr.Bytes())
		}
		return stdout.Bytes()
	}

	// The go-openapi modules at go-swagger's versions.
	var info struct{ GoMod string }
	if err := json.Unmarshal(run("go", "mod", "download", "-json", "github.com/go-swagger/go-swagger@"+goSwaggerVersion), &info); err != nil {
		t.Fatal(err)
	}
	requires, err := goOpenAPIRequires(info.GoMod)
	if err != nil {
		t.Fatal(err)
	}
	goMod := "module example.com/tetherclient\n\ngo 1.26\n\nrequire (\n" + requires + ")\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(goMod), 0o644); err != nil {
		t.Fatal(err)
	}

	run("go", "run", "github.com/go-swagger/go-swagger/cmd/swagger@"+goSwaggerVersion,
		"generate", "client", "--quiet", "--skip-validation", "-f", spec, "-t", dir)
	if err := os.WriteFile(filepath.Join(dir, "problem_test.go"), []byte(goSwaggerClientTest), 0o644); err != nil {
		t.Fatal(err)
	}
	run("go", "mod", "tidy")
	run("go", "build", "./...")
	run("go", "vet", "./...")
	out := run("go", "test", "-count=1", "-v", ".")
	t.Logf("the generated client's test:\n%s", out)
}

// goOpenAPIRequires returns the go-openapi requirements of the go.mod at
// path, as lines of a require block.
func goOpenAPIRequires(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && strings.HasPrefix(fields[0], "github.com/go-openapi/") &&
			!strings.HasPrefix(fields[0], "github.com/go-openapi/testify") {
			fmt.Fprintf(&b, "\t%s %s\n", fields[0], fields[1])
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	if !strings.Contains(b.String(), "github.com/go-openapi/runtime ") {
		return "", fmt.Errorf("%s requires no github.com/go-openapi/runtime", path)
	}
	return b.String(), nil
}

// goSwaggerClientTest is the generated client module's test: GET
// /v1/sandboxes/{id} against a server that answers 404 with a Problem, as
// Tether does.
const goSwaggerClientTest = `package tetherclient_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/go-openapi/runtime"
	httptransport "github.com/go-openapi/runtime/client"
	"github.com/go-openapi/strfmt"

	"example.com/tetherclient/client"
	"example.com/tetherclient/client/sandboxes"
)

const problem = ` + "`" + `{"type":"https://github.com/tetherhq/tether/blob/main/docs/errors.md#not_found","title":"Not Found","status":404,"detail":"sandbox sbx_missing not found","code":"NOT_FOUND","request_id":"req-1"}` + "`" + `

func getSandbox(t *testing.T, setup func(*httptransport.Runtime)) error {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/v1/sandboxes/sbx_missing" || r.Header.Get("Authorization") != "Bearer k" {
			t.Errorf("unexpected request: %s %s, Authorization %q", r.Method, r.URL.Path, r.Header.Get("Authorization"))
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.Header().Set("X-Request-ID", "req-1")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, problem)
	}))
	defer srv.Close()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	transport := httptransport.New(u.Host, client.DefaultBasePath, []string{"http"})
	setup(transport)
	c := client.New(transport, strfmt.Default)
	ok, err := c.Sandboxes.GetSandbox(sandboxes.NewGetSandboxParams().WithID("sbx_missing"), httptransport.BearerToken("k"))
	if err == nil {
		t.Fatalf("got %+v, want an error", ok)
	}
	return err
}

func TestProblemNeedsAConsumer(t *testing.T) {
	err := getSandbox(t, func(*httptransport.Runtime) {})
	if !strings.Contains(err.Error(), ` + "`" + `no consumer: "application/problem+json"` + "`" + `) {
		t.Fatalf("got %T %v, want go-openapi's no consumer error", err, err)
	}
}

func TestProblemIsTyped(t *testing.T) {
	for name, setup := range map[string]func(*httptransport.Runtime){
		"Consumers":   func(rt *httptransport.Runtime) { rt.Consumers["application/problem+json"] = runtime.JSONConsumer() },
		"MatchSuffix": func(rt *httptransport.Runtime) { rt.MatchSuffix = true },
	} {
		t.Run(name, func(t *testing.T) {
			err := getSandbox(t, setup)
			var nf *sandboxes.GetSandboxNotFound
			if !errors.As(err, &nf) {
				t.Fatalf("got %T %v, want *sandboxes.GetSandboxNotFound", err, err)
			}
			p := nf.GetPayload()
			if nf.Code() != 404 || p == nil || p.Code == nil || *p.Code != "NOT_FOUND" || p.Status == nil || *p.Status != 404 ||
				p.RequestID != "req-1" || nf.XRequestID != "req-1" {
				t.Fatalf("got %s, X-Request-ID %q", nf, nf.XRequestID)
			}
			if err := p.Validate(strfmt.Default); err != nil {
				t.Fatalf("the Problem does not validate: %v", err)
			}
			t.Logf("%s", nf)
		})
	}
}
`
