// Package console is Tether's web console: plain HTML, CSS and JavaScript
// modules embedded in the binary and served at /ui/, with no build step and
// nothing loaded from anywhere else. The console runs in the browser, signs
// in with an API key and uses only the public REST API (/v1), so it can do
// nothing its key could not do with curl. Its files need no authentication.
// The npm packages it uses (xterm.js, for a sandbox's terminal) are their
// built files as npm ships them, copied into static/vendor/ at the
// versions package-lock.json pins (make console-vendor).
package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
)

//go:embed static
var files embed.FS

// ContentSecurityPolicy lets a console page load only the console's own
// files and talk only to its own origin: no inline script or style, no
// plugins, no framing, no other origin's code. Every page has it but the
// terminal's (TerminalContentSecurityPolicy).
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// terminalPage is the page of a sandbox's terminal, which the sandbox's
// page shows in a frame (js/views/terminal.js).
const terminalPage = "terminal.html"

// TerminalContentSecurityPolicy is the terminal page's policy: the
// console's, but for two things. xterm.js, which draws the terminal,
// styles it with <style> elements and style attributes it writes (its
// dimensions, colours and scrollbar, from the terminal's state), which no
// 'self' or hash can allow: inline styles are allowed there, in
// style-src-elem and style-src-attr only, never inline script. And the
// console's own page may frame it (frame-ancestors 'self'). Everything
// else of the console keeps the strict policy (docs/security.md).
const TerminalContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; " +
	"style-src-elem 'self' 'unsafe-inline'; style-src-attr 'unsafe-inline'; img-src 'self' data:; " +
	"connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'self'"

// contentTypes are the types the console's files are served with, by
// extension. A file of another extension is application/octet-stream, which
// a browser will not run: TestEveryFileHasAType keeps the list complete.
// The vendored npm packages (static/vendor) bring .mjs modules, their
// package.json and a LICENSE without an extension.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".mjs":  "text/javascript; charset=utf-8",
	".svg":  "image/svg+xml",
	".json": "application/json",
	"":      "text/plain; charset=utf-8",
}

// asset is one embedded file, ready to serve.
type asset struct {
	body        []byte
	contentType string
	etag        string
}

// assets reads the embedded files once.
var assets = sync.OnceValue(func() map[string]asset {
	out := map[string]asset{}
	root, _ := fs.Sub(files, "static") // "static" is a valid path: Sub cannot fail
	_ = fs.WalkDir(root, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(root, name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		ct, ok := contentTypes[path.Ext(name)]
		if !ok {
			ct = "application/octet-stream"
		}
		out[name] = asset{body: body, contentType: ct, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		return nil
	})
	return out
})

// Register serves the console at /ui/ on r. GET /ui is redirected there by
// gin (a trailing-slash redirect), so that the page's relative links resolve
// under /ui/. The route takes no middleware of its own: mount it outside the
// API's authentication.
func Register(r gin.IRouter) {
	r.GET("/ui/*filepath", func(c *gin.Context) {
		serve(c.Writer, c.Request, c.Param("filepath"))
	})
}

// serve writes the file at name (a path under /ui, "/" for the page itself)
// with the console's security headers, or 404.
func serve(w http.ResponseWriter, r *http.Request, name string) {
	h := w.Header()
	name = strings.TrimPrefix(name, "/")
	if name == "" {
		name = "index.html"
	}
	if name == terminalPage {
		h.Set("Content-Security-Policy", TerminalContentSecurityPolicy)
		h.Set("X-Frame-Options", "SAMEORIGIN")
	} else {
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Frame-Options", "DENY")
	}
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	a, ok := assets()[name]
	if !ok {
		h.Set("Content-Type", "text/plain; charset=utf-8")
		h.Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte("404 not found\n"))
		return
	}
	h.Set("Content-Type", a.contentType)
	// The files change with the binary, under the same names: a browser
	// revalidates each time and gets 304 while the ETag matches.
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", a.etag)
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(a.body))
}
