package e2b

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"path"
	"strings"
)

// fileEntry is envd's EntryInfo of an uploaded file.
type fileEntry struct {
	Path string `json:"path"`
	Name string `json:"name"`
	Type string `json:"type"`
}

// defaultDir is where a relative path starts when the sandbox names no
// working directory.
const defaultDir = "/workspace"

// absPath is p made absolute against the sandbox's working directory (a
// Tether sandbox's home); an empty path is refused.
func absPath(s v1Sandbox, p string) (string, error) {
	if strings.TrimSpace(p) == "" {
		return "", errorf(http.StatusBadRequest, "path is required")
	}
	if strings.ContainsRune(p, 0) {
		return "", errorf(http.StatusBadRequest, "path must not contain NUL")
	}
	if path.IsAbs(p) {
		return path.Clean(p), nil
	}
	dir := s.WorkDir
	if dir == "" {
		dir = defaultDir
	}
	return path.Join(dir, p), nil
}

// fileTarget resolves a /files call's sandbox, answering its errors: an
// unknown or ended sandbox as E2B's proxy does, 502.
func (e envd) fileTarget(w http.ResponseWriter, r *http.Request) (target, bool) {
	t, err := e.resolve(r.Context(), r)
	if errors.Is(err, errNoSandbox) {
		err = errorf(http.StatusBadGateway, "the sandbox is not running")
	}
	if err == nil && t.sb.State != "ready" {
		err = errorf(http.StatusBadGateway, "the sandbox is %s", t.sb.State)
	}
	if err != nil {
		writeError(w, err)
		return t, false
	}
	return t, true
}

// download answers the file at ?path= through /v1's files.
func (e envd) download(w http.ResponseWriter, r *http.Request) {
	t, ok := e.fileTarget(w, r)
	if !ok {
		return
	}
	p, err := absPath(t.sb, r.URL.Query().Get("path"))
	if err != nil {
		writeError(w, err)
		return
	}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, sandboxPath(t.sb.ID, "/files", url.Values{"path": {p}}), http.NoBody)
	if err != nil {
		writeError(w, err)
		return
	}
	rep := e.core.do(req, r, t.key, "")
	if !rep.ok() {
		writeError(w, fromV1(rep))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", fmt.Sprint(len(rep.body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(rep.body) // the client may be gone; nothing to do about it
}

// upload writes the request's file or files: an application/octet-stream
// body to ?path=, or each part of a multipart/form-data body to its file
// name (or ?path=), gzip-encoded or not; it answers their EntryInfo.
func (e envd) upload(w http.ResponseWriter, r *http.Request) {
	t, ok := e.fileTarget(w, r)
	if !ok {
		return
	}
	entries, err := e.writeFiles(r, t)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, entries)
}

// writeFiles writes the upload's files, in order.
func (e envd) writeFiles(r *http.Request, t target) ([]fileEntry, error) {
	body := io.Reader(r.Body)
	switch strings.ToLower(r.Header.Get("Content-Encoding")) {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return nil, errorf(http.StatusBadRequest, "the body is not gzip: %v", err)
		}
		body = zr
	default:
		return nil, errorf(http.StatusBadRequest, "Content-Encoding %q is not supported: use gzip or none", r.Header.Get("Content-Encoding"))
	}
	query := r.URL.Query().Get("path")
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "multipart/form-data" {
		one, err := e.writeFile(r, t, query, body)
		if err != nil {
			return nil, err
		}
		return []fileEntry{one}, nil
	}
	if params["boundary"] == "" {
		return nil, errorf(http.StatusBadRequest, "a multipart body needs its boundary")
	}
	mr := multipart.NewReader(body, params["boundary"])
	var out []fileEntry
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, errorf(http.StatusBadRequest, "the multipart body is not valid: %v", err)
		}
		if part.FormName() != "file" {
			continue
		}
		p := query
		if p == "" {
			// The file name whole: Part.FileName keeps only its last element.
			_, dp, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
			p = dp["filename"]
		}
		one, err := e.writeFile(r, t, p, part)
		if err != nil {
			return nil, err
		}
		out = append(out, one)
	}
	if len(out) == 0 {
		return nil, errorf(http.StatusBadRequest, "the multipart body has no file part")
	}
	return out, nil
}

// writeFile writes body to the file p through /v1's files.
func (e envd) writeFile(r *http.Request, t target, p string, body io.Reader) (fileEntry, error) {
	abs, err := absPath(t.sb, p)
	if err != nil {
		return fileEntry{}, err
	}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodPut, sandboxPath(t.sb.ID, "/files", url.Values{"path": {abs}}), body)
	if err != nil {
		return fileEntry{}, fmt.Errorf("e2b: upload %s: %w", abs, err)
	}
	rep := e.core.do(req, r, t.key, "application/octet-stream")
	if !rep.ok() {
		return fileEntry{}, fromV1(rep)
	}
	return fileEntry{Path: abs, Name: path.Base(abs), Type: "file"}, nil
}
