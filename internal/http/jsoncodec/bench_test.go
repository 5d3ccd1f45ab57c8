package jsoncodec

import (
	"encoding/json"
	"testing"
)

// createBody is a typical create request.
var createBody = []byte(`{"provider":"sim","owner":"agent-1","labels":{"team":"search","task":"fix-123"},"ttl_seconds":600,"env":{"A":"1","B":"two"},"setup":"pip install -q pytest"}`)

// BenchmarkDuplicateKeyCheck is what refusing repeated JSON keys adds to a
// request body; compare BenchmarkDecodeCreateBody, the decoding it precedes.
func BenchmarkDuplicateKeyCheck(b *testing.B) {
	for b.Loop() {
		if err := noDuplicateKeys(createBody); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeCreateBody is the decoding of a create body alone.
func BenchmarkDecodeCreateBody(b *testing.B) {
	for b.Loop() {
		var v map[string]any
		if err := json.Unmarshal(createBody, &v); err != nil {
			b.Fatal(err)
		}
	}
}
