package sim

import (
	"encoding/json"
	"testing"
)

// BenchmarkParseEmptyParams is what a create that names no params pays
// to read them (the executor's every sim create in cmd/bench).
func BenchmarkParseEmptyParams(b *testing.B) {
	raw := json.RawMessage(`{}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseParams(raw); err != nil {
			b.Fatal(err)
		}
	}
}
