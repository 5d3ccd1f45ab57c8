package store

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// TestDecodeStringMapMatchesJSON checks decodeStringMap's hand-read path
// against encoding/json: on inputs it must read, on inputs it must pass
// on (escapes, invalid UTF-8, other values), and on malformed ones.
func TestDecodeStringMapMatchesJSON(t *testing.T) {
	inputs := []string{
		`{}`, ` { } `, `{"a": "b"}`, `{"a":"b","c":"d"}`, "{\n\"a\" :\t\"b\" }", `{"a": "b", "a": "c"}`,
		`{"a": "\u00e9"}`, `{"a": "\"q\""}`, `{"a": "x\\y"}`, `{"é": "ü ✓"}`, "{\"a\": \"\xff\"}",
		`{"a": 1}`, `{"a": null}`, `{"a": ["b"]}`, `{"a": "b",}`, `{"a" "b"}`, `{"a": "b"`, `{"a": "b"} x`,
		`{"a": "b"}}`, `[]`, `null`, ``, `{`, `{"a`, `{"a": "b" "c": "d"}`, "{\"a\": \"b\x01\"}", `{,}`,
	}
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []rune("ab é✓🙂\"\\\n\t<&>")
	for range 2000 {
		m := map[string]string{}
		for range rng.IntN(5) {
			var k, v strings.Builder
			for range rng.IntN(6) {
				k.WriteRune(alphabet[rng.IntN(len(alphabet))])
			}
			for range rng.IntN(6) {
				v.WriteRune(alphabet[rng.IntN(len(alphabet))])
			}
			m[k.String()] = v.String()
		}
		b, _ := json.Marshal(m)
		// jsonb's own spacing: a space after each colon and comma.
		s := strings.ReplaceAll(strings.ReplaceAll(string(b), `":"`, `": "`), `","`, `", "`)
		inputs = append(inputs, s, string(b))
	}
	for _, in := range inputs {
		got, err := decodeStringMap([]byte(in))
		var want map[string]string
		wantErr := json.Unmarshal([]byte(in), &want)
		if in == "{}" {
			want = map[string]string{}
		}
		if (err != nil) != (wantErr != nil) {
			t.Errorf("%q: err %v, encoding/json's %v", in, err, wantErr)
			continue
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Errorf("%q: %v, encoding/json's %v", in, got, want)
		}
	}
}
