package console

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path"
	"regexp"
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
