package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
)

func newRouter() *gin.Engine {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	Register(r)
	return r
}

func get(t *testing.T, h http.Handler, target string, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, target, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// wantSecurityHeaders checks the headers every console response carries.
func wantSecurityHeaders(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	csp := rec.Header().Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'self'", "script-src 'self'", "object-src 'none'", "frame-ancestors 'none'", "base-uri 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("Content-Security-Policy = %q, want it to contain %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") || strings.Contains(csp, "*") {
		t.Errorf("Content-Security-Policy = %q allows inline code, eval or any origin", csp)
	}
	if got := rec.Header().Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("X-Content-Type-Options = %q, want nosniff", got)
	}
}

func TestIndexIsServed(t *testing.T) {
	t.Parallel()
	r := newRouter()
	for _, target := range []string{"/ui/", "/ui/index.html"} {
		rec := get(t, r, target)
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s = %d, want 200", target, rec.Code)
		}
		if got := rec.Header().Get("Content-Type"); got != "text/html; charset=utf-8" {
			t.Errorf("GET %s Content-Type = %q, want text/html; charset=utf-8", target, got)
		}
		if body := rec.Body.String(); !strings.Contains(body, `<script type="module" src="js/app.js"></script>`) {
			t.Errorf("GET %s does not load the console's module:\n%s", target, body)
		}
		wantSecurityHeaders(t, rec)
	}
}

// TestTerminalPagePolicy: the terminal's page, whose xterm.js writes
// inline styles, is the one page allowed them (style-src-elem and
// style-src-attr, never script), and the console's own page may frame it;
// every other file keeps the strict policy and DENY.
func TestTerminalPagePolicy(t *testing.T) {
	t.Parallel()
	r := newRouter()
	rec := get(t, r, "/ui/terminal.html")
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `<script type="module" src="js/terminal.js"></script>`) {
		t.Fatalf("GET /ui/terminal.html = %d:\n%s", rec.Code, rec.Body.String())
	}
	directives := map[string]string{}
	for _, d := range strings.Split(rec.Header().Get("Content-Security-Policy"), ";") {
		name, value, _ := strings.Cut(strings.TrimSpace(d), " ")
		directives[name] = value
	}
	for name, want := range map[string]string{
		"default-src": "'self'", "script-src": "'self'", "style-src": "'self'",
		"style-src-elem": "'self' 'unsafe-inline'", "style-src-attr": "'unsafe-inline'",
		"connect-src": "'self'", "object-src": "'none'", "base-uri": "'none'", "frame-ancestors": "'self'",
	} {
		if directives[name] != want {
			t.Errorf("terminal.html's %s is %q, want %q", name, directives[name], want)
		}
	}
	for name, value := range directives {
		if strings.Contains(value, "unsafe-inline") && name != "style-src-elem" && name != "style-src-attr" ||
			strings.Contains(value, "unsafe-eval") || strings.Contains(value, "*") {
			t.Errorf("terminal.html's %s %q allows more than inline styles", name, value)
		}
	}
	if got := rec.Header().Get("X-Frame-Options"); got != "SAMEORIGIN" {
		t.Errorf("terminal.html's X-Frame-Options = %q, want SAMEORIGIN", got)
	}
	for target := range assets() {
		if target == terminalPage {
			continue
		}
		rec := get(t, r, "/ui/"+target)
		wantSecurityHeaders(t, rec)
		if got := rec.Header().Get("X-Frame-Options"); got != "DENY" {
			t.Errorf("%s: X-Frame-Options = %q, want DENY", target, got)
		}
	}
}

func TestBareUIRedirects(t *testing.T) {
	t.Parallel()
	rec := get(t, newRouter(), "/ui")
	if rec.Code != http.StatusMovedPermanently || rec.Header().Get("Location") != "/ui/" {
		t.Fatalf("GET /ui = %d to %q, want 301 to /ui/ (the page's relative links need the slash)", rec.Code, rec.Header().Get("Location"))
	}
}

func TestAssetsHaveTheirContentTypes(t *testing.T) {
	t.Parallel()
	r := newRouter()
	for target, want := range map[string]string{
		"/ui/console.css":           "text/css; charset=utf-8",
		"/ui/js/app.js":             "text/javascript; charset=utf-8",
		"/ui/js/views/sandboxes.js": "text/javascript; charset=utf-8",
		"/ui/js/views/pools.js":     "text/javascript; charset=utf-8",
		"/ui/js/views/webhooks.js":  "text/javascript; charset=utf-8",
		"/ui/favicon.svg":           "image/svg+xml",
	} {
		rec := get(t, r, target)
		if rec.Code != http.StatusOK {
			t.Errorf("GET %s = %d, want 200", target, rec.Code)
			continue
		}
		if got := rec.Header().Get("Content-Type"); got != want {
			t.Errorf("GET %s Content-Type = %q, want %q", target, got, want)
		}
		if rec.Body.Len() == 0 {
			t.Errorf("GET %s: empty body", target)
		}
		wantSecurityHeaders(t, rec)
	}
}

// TestEveryFileHasAType keeps contentTypes complete: a module served as
// application/octet-stream is refused by the browser (nosniff).
func TestEveryFileHasAType(t *testing.T) {
	t.Parallel()
	if len(assets()) < 5 {
		t.Fatalf("only %d embedded files", len(assets()))
	}
	for name, a := range assets() {
		if _, ok := contentTypes[path.Ext(name)]; !ok {
			t.Errorf("%s: extension %q has no content type in contentTypes", name, path.Ext(name))
		}
		if a.etag == "" {
			t.Errorf("%s: no ETag", name)
		}
	}
}

func TestUnknownFilesAre404(t *testing.T) {
	t.Parallel()
	r := newRouter()
	for _, target := range []string{"/ui/nope.js", "/ui/js/", "/ui/js", "/ui/js/views/../../../console.go", "/ui/static/index.html", "/ui/%2e%2e/console.go"} {
		rec := get(t, r, target)
		if rec.Code != http.StatusNotFound {
			t.Errorf("GET %s = %d, want 404", target, rec.Code)
			continue
		}
		if strings.Contains(rec.Body.String(), "package console") {
			t.Errorf("GET %s served Go source", target)
		}
		wantSecurityHeaders(t, rec)
	}
}

func TestRevalidatesWithETag(t *testing.T) {
	t.Parallel()
	r := newRouter()
	first := get(t, r, "/ui/js/app.js")
	etag := first.Header().Get("ETag")
	if etag == "" || first.Header().Get("Cache-Control") != "no-cache" {
		t.Fatalf("ETag %q, Cache-Control %q: want an ETag and no-cache", etag, first.Header().Get("Cache-Control"))
	}
	if rec := get(t, r, "/ui/js/app.js", "If-None-Match", etag); rec.Code != http.StatusNotModified {
		t.Errorf("GET with If-None-Match: %d, want 304", rec.Code)
	}
}

var (
	scriptTag     = regexp.MustCompile(`(?is)<script\b([^>]*)>(.*?)</script>`)
	inlineHandler = regexp.MustCompile(`(?i)<[^>]*\son[a-z]+\s*=`)
	styleAttr     = regexp.MustCompile(`(?i)<[^>]*\sstyle\s*=`)
	htmlSink      = regexp.MustCompile(`\.(innerHTML|outerHTML|insertAdjacentHTML)\b|document\.write|\beval\(|new Function\(`)
	relImport     = regexp.MustCompile(`(?m)(?:^import|^export)[^'"]*from\s+'(\.[^']+)'`)
)

// TestNoInlineCodeOrHTMLSinks holds the console to what its CSP and its
// handling of API strings rely on: no inline script, handler or style in
// the page (the CSP would block them), and no script that parses strings as
// HTML (API strings reach the page as text only).
func TestNoInlineCodeOrHTMLSinks(t *testing.T) {
	t.Parallel()
	for name, a := range assets() {
		body := string(a.body)
		switch path.Ext(name) {
		case ".html":
			tags := scriptTag.FindAllStringSubmatch(body, -1)
			if len(tags) == 0 {
				t.Errorf("%s loads no script", name)
			}
			for _, m := range tags {
				if !strings.Contains(m[1], "src=") || strings.TrimSpace(m[2]) != "" {
					t.Errorf("%s has an inline script: %q", name, m[0])
				}
			}
			for re, what := range map[*regexp.Regexp]string{inlineHandler: "an inline event handler", styleAttr: "a style attribute"} {
				if m := re.FindString(body); m != "" {
					t.Errorf("%s has %s: %q", name, what, m)
				}
			}
		case ".js":
			// (The vendored packages' .mjs files are theirs, not held to
			// this: see TestVendoredPackagesArePinned.)
			if m := htmlSink.FindString(body); m != "" {
				t.Errorf("%s uses %s: build elements with dom.js h() and text instead", name, m)
			}
			// Every relative import names an embedded file.
			for _, m := range relImport.FindAllStringSubmatch(body, -1) {
				target := path.Join(path.Dir(name), m[1])
				if _, ok := assets()[target]; !ok {
					t.Errorf("%s imports %s, which is not embedded", name, m[1])
				}
			}
		}
	}
	root, _ := fs.Sub(files, "static")
	if _, err := fs.Stat(root, "js/app.js"); err != nil {
		t.Fatalf("js/app.js: %v", err)
	}
}

// exactVersion is an npm version pinned exactly: no range, no tag.
var exactVersion = regexp.MustCompile(`^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`)

// readJSON decodes the JSON file at name (a path on disk) into v.
func readJSON(t *testing.T, name string, v any) {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// vendoredFiles are the embedded files under static/vendor, by the npm
// package they belong to (vendor/@scope/name/... or vendor/name/...), as
// paths inside the package.
func vendoredFiles(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := fs.WalkDir(files, "static/vendor", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		parts := strings.Split(strings.TrimPrefix(name, "static/vendor/"), "/")
		n := 1
		if strings.HasPrefix(parts[0], "@") {
			n = 2
		}
		if len(parts) <= n {
			t.Errorf("%s is not inside a package's folder", name)
			return nil
		}
		pkg := strings.Join(parts[:n], "/")
		out[pkg] = append(out[pkg], strings.Join(parts[n:], "/"))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestVendoredPackagesArePinned: static/vendor holds exactly the npm
// packages package.json depends on, each pinned to one version, at the
// version package-lock.json resolved (its package.json says so), with its
// LICENSE. When node_modules is installed (make console-vendor, or npm ci
// here), every vendored file is the package's, byte for byte: they are a
// dependency's files, never edited.
func TestVendoredPackagesArePinned(t *testing.T) {
	t.Parallel()
	var manifest struct {
		Dependencies    map[string]string `json:"dependencies"`
		DevDependencies map[string]string `json:"devDependencies"`
	}
	readJSON(t, "package.json", &manifest)
	var lock struct {
		Packages map[string]struct {
			Version string `json:"version"`
		} `json:"packages"`
	}
	readJSON(t, "package-lock.json", &lock)
	if len(manifest.DevDependencies) > 0 {
		t.Errorf("package.json has devDependencies %v: what is vendored is a dependency", manifest.DevDependencies)
	}
	vendored := vendoredFiles(t)
	for name, pin := range manifest.Dependencies {
		if !exactVersion.MatchString(pin) {
			t.Errorf("package.json: %s %q is not one exact version", name, pin)
		}
		if locked := lock.Packages["node_modules/"+name].Version; locked != pin {
			t.Errorf("package-lock.json has %s at %q, package.json pins %q: run npm install there", name, locked, pin)
		}
		got := vendored[name]
		delete(vendored, name)
		if !slices.Contains(got, "LICENSE") || !slices.Contains(got, "package.json") {
			t.Errorf("static/vendor/%s lacks its LICENSE or package.json (has %v): run make console-vendor", name, got)
			continue
		}
		var meta struct{ Name, Version string }
		readJSON(t, path.Join("static/vendor", name, "package.json"), &meta)
		if meta.Name != name || meta.Version != pin {
			t.Errorf("static/vendor/%s is %s %s, want %s: run make console-vendor", name, meta.Name, meta.Version, pin)
		}
		sameAsInstalled(t, name, pin, got)
	}
	for name := range vendored {
		t.Errorf("static/vendor/%s is no dependency in package.json", name)
	}
}

// sameAsInstalled checks that the vendored files of package name are
// node_modules' copy of it, when that copy is the pinned version.
func sameAsInstalled(t *testing.T, name, pin string, vendored []string) {
	t.Helper()
	installed := path.Join("node_modules", name)
	var meta struct{ Version string }
	data, err := os.ReadFile(path.Join(installed, "package.json"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		t.Logf("%s is not installed in node_modules (npm ci): its files are not compared with the package's", name)
		return
	case err != nil:
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &meta); err != nil || meta.Version != pin {
		t.Logf("node_modules has %s %q, not %s (npm ci): its files are not compared with the package's", name, meta.Version, pin)
		return
	}
	for _, f := range vendored {
		want, err := os.ReadFile(path.Join(installed, f))
		if err != nil {
			t.Errorf("static/vendor/%s/%s: not in the package: %v", name, f, err)
			continue
		}
		got, _ := fs.ReadFile(files, path.Join("static/vendor", name, f))
		if !bytes.Equal(got, want) {
			t.Errorf("static/vendor/%s/%s differs from the package's file: run make console-vendor", name, f)
		}
	}
}
