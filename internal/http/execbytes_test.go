package http_test

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/domain"
)

// everyByte is every byte value once: output no text encoding holds.
func everyByte() []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

// streamChunks are what nodeSim's stream-chunks emits: characters cut
// between chunks (é after one byte, ✓ after two, each stream on its own),
// then bytes that are not UTF-8, then a character whose end never comes.
var streamChunks = []struct{ stream, data string }{
	{domain.Stdout, "h\xc3"},
	{domain.Stderr, "err \xe2\x9c"},
	{domain.Stdout, "\xa9llo "},
	{domain.Stderr, "\x93\n"},
	{domain.Stdout, "\xff\xfe ok \xe2\x9c"},
}

// sseData returns, per event name, the data of a stream's events in order.
func sseData(t *testing.T, body []byte) map[string][]json.RawMessage {
	t.Helper()
	out := map[string][]json.RawMessage{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	name := ""
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			name = v
		} else if v, ok := strings.CutPrefix(line, "data: "); ok {
			out[name] = append(out[name], json.RawMessage(v))
		}
	}
	return out
}

// TestExecOutputEncoding: an exec's output that is not UTF-8 comes back
// whole with output_encoding base64, in the JSON answer and in a stream's
// events, on the sandbox's node and through another; without it, the
// answer is text as before, and a stream's text splits no character.
func TestExecOutputEncoding(t *testing.T) {
	t.Parallel()
	n := setupTwoNodes(t, 1024, nil)
	path := "/v1/sandboxes/" + n.onB + "/exec"
	for _, via := range []*bundle{n.b, n.a} {
		var res map[string]any
		r := via.do(t, http.MethodPost, path, map[string]any{"command": "output-every-byte", "output_encoding": "base64"}, as(keyA))
		wantStatus(t, r, http.StatusOK)
		r.decode(t, &res)
		got, err := base64.StdEncoding.DecodeString(res["output_base64"].(string))
		if err != nil || !bytes.Equal(got, everyByte()) || res["output"] != "" {
			t.Errorf("base64: output_base64 decodes to %q (%v), output %q; want the 256 bytes, and no text", got, err, res["output"])
		}

		res = nil
		r = via.do(t, http.MethodPost, path, map[string]any{"command": "output-every-byte"}, as(keyA))
		wantStatus(t, r, http.StatusOK)
		r.decode(t, &res)
		if want := strings.ToValidUTF8(string(everyByte()), "\uFFFD"); res["output"] != want {
			t.Errorf("text: output %q; want %q", res["output"], want)
		}
		if _, ok := res["output_base64"]; ok {
			t.Errorf("text: the answer has output_base64: %s", r.Body)
		}
	}

	r := n.a.do(t, http.MethodPost, path, map[string]any{"command": "stream-chunks", "output_encoding": "base64"}, as(keyA), header("Accept", "text/event-stream"))
	if r.Status != http.StatusOK || mediaType(r) != "text/event-stream" {
		t.Fatalf("stream: %s", r)
	}
	var streamed []byte
	events := sseData(t, r.Body)
	for _, name := range []string{"stdout", "stderr"} {
		for _, data := range events[name] {
			var chunk struct {
				Data       string `json:"data"`
				DataBase64 []byte `json:"data_base64"`
			}
			if err := json.Unmarshal(data, &chunk); err != nil || chunk.Data != "" {
				t.Fatalf("a base64 %s event: %s (%v); want data_base64 alone", name, data, err)
			}
			streamed = append(streamed, chunk.DataBase64...)
		}
	}
	var stdout, stderr []byte
	for _, c := range streamChunks {
		if c.stream == domain.Stdout {
			stdout = append(stdout, c.data...)
		} else {
			stderr = append(stderr, c.data...)
		}
	}
	if want := append(append([]byte(nil), stdout...), stderr...); !bytes.Equal(streamed, want) || len(events["exit"]) != 1 {
		t.Errorf("base64 stream: %q and %d exit events; want %q and one", streamed, len(events["exit"]), want)
	}

	r = n.a.do(t, http.MethodPost, path, map[string]any{"command": "stream-chunks"}, as(keyA), header("Accept", "text/event-stream"))
	if r.Status != http.StatusOK || mediaType(r) != "text/event-stream" {
		t.Fatalf("stream: %s", r)
	}
	events = sseData(t, r.Body)
	text := map[string]string{}
	for _, name := range []string{"stdout", "stderr"} {
		for _, data := range events[name] {
			var chunk struct {
				Data string `json:"data"`
			}
			if err := json.Unmarshal(data, &chunk); err != nil {
				t.Fatal(err)
			}
			text[name] += chunk.Data
		}
	}
	if text["stdout"] != "héllo \uFFFD ok \uFFFD" || text["stderr"] != "err ✓\n" {
		t.Errorf("text stream: stdout %q, stderr %q; want whole characters, U+FFFD only for bytes that are not UTF-8", text["stdout"], text["stderr"])
	}
	wantProblem(t, n.a.do(t, http.MethodPost, path, map[string]any{"command": "true", "output_encoding": "hex"}, as(keyA)), http.StatusBadRequest, "INVALID_REQUEST")
}
