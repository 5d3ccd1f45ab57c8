package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"testing"
)

func filesPath(id, path string) string {
	return "/v1/sandboxes/" + id + "/files?path=" + url.QueryEscape(path)
}

// TestBinaryExecOutput: `head -c 4096 /dev/urandom` comes back byte for
// byte with output_encoding base64, equal to the copy the command wrote
// and the files route reads; as text it is valid UTF-8 and shorter.
func TestBinaryExecOutput(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.createReady(map[string]any{"provider": "local"})
	body, _ := json.Marshal(map[string]any{"command": "head -c 4096 /dev/urandom | tee /workspace/random.bin", "output_encoding": "base64"})
	code, answer := e.raw(http.MethodPost, "/v1/sandboxes/"+id+"/exec", body)
	var res struct {
		Output       string `json:"output"`
		OutputBase64 []byte `json:"output_base64"`
		ExitCode     int    `json:"exit_code"`
	}
	if err := json.Unmarshal(answer, &res); code != http.StatusOK || err != nil {
		t.Fatalf("exec = %d %s (%v)", code, answer, err)
	}
	code, file := e.raw(http.MethodGet, filesPath(id, "/workspace/random.bin"), nil)
	if code != http.StatusOK || len(file) != 4096 {
		t.Fatalf("the command's copy: %d, %d bytes", code, len(file))
	}
	if !bytes.Equal(res.OutputBase64, file) || res.Output != "" || res.ExitCode != 0 {
		t.Errorf("output_base64: %d bytes, equal to the file: %v; output %q, exit %d; want the 4096 bytes exactly",
			len(res.OutputBase64), bytes.Equal(res.OutputBase64, file), res.Output, res.ExitCode)
	}
	body, _ = json.Marshal(map[string]any{"command": "cat /workspace/random.bin"})
	_, answer = e.raw(http.MethodPost, "/v1/sandboxes/"+id+"/exec", body)
	var text map[string]any
	if err := json.Unmarshal(answer, &text); err != nil || text["output_base64"] != nil || text["output"] == "" {
		t.Errorf("the default, text: %d bytes (%v), output_base64 %v; want output alone", len(answer), err, text["output_base64"] != nil)
	}
	output, _ := text["output"].(string)
	t.Logf("4096 random bytes: %d in base64, %d characters as text", len(base64.StdEncoding.EncodeToString(file)), len([]rune(output)))
}

// TestUploadRace: a batch of uploads of D/f and D at once, as deepagents'
// upload_files sends them (8 in flight), many times over. Every PUT that
// answered 204 has its exact body at its path afterwards; every other one
// answered 400 IS_DIRECTORY or INVALID_PATH. (The commit used to move a
// staged file into D once D had become a folder, and answer 204.)
func TestUploadRace(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.createReady(map[string]any{"provider": "local"})
	const rounds, pairs = 40, 4
	type put struct {
		path   string
		body   []byte
		status int
		answer []byte
	}
	written, refused := 0, 0
	for round := range rounds {
		var puts []*put
		for pair := range pairs {
			dir := fmt.Sprintf("/workspace/race/r%d-p%d", round, pair)
			puts = append(puts, &put{path: dir + "/f", body: fmt.Appendf(nil, "inner %d %d", round, pair)},
				&put{path: dir, body: fmt.Appendf(nil, "outer %d %d", round, pair)})
		}
		var wg sync.WaitGroup
		for _, p := range puts {
			wg.Go(func() { p.status, p.answer = e.raw(http.MethodPut, filesPath(id, p.path), p.body) })
		}
		wg.Wait()
		for _, p := range puts {
			if p.status != http.StatusNoContent {
				var problem struct{ Code string }
				_ = json.Unmarshal(p.answer, &problem)
				if p.status != http.StatusBadRequest || (problem.Code != "IS_DIRECTORY" && problem.Code != "INVALID_PATH") {
					t.Errorf("PUT %s = %d %s; want 204, or 400 IS_DIRECTORY or INVALID_PATH", p.path, p.status, p.answer)
				}
				refused++
				continue
			}
			written++
			if code, got := e.raw(http.MethodGet, filesPath(id, p.path), nil); code != http.StatusOK || !bytes.Equal(got, p.body) {
				t.Errorf("PUT %s answered 204, but GET = %d %q; want %q: a lost write", p.path, code, got, p.body)
			}
		}
	}
	t.Logf("%d racing pairs: %d uploads written and read back, %d refused", rounds*pairs, written, refused)
}

// raw sends a request with a raw body and returns the status and body.
func (e *env) raw(method, path string, body []byte) (int, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.replica.URL()+path, bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}
