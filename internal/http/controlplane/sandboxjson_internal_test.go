package controlplane

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/http/jsoncodec"
)

// TestSandboxJSONMatchesEncodingJSON: the hand-written encoding of a
// Sandbox is byte for byte what encoding/json makes of it (SetEscapeHTML
// off), for random sandboxes whose strings hold every kind of character
// the encoder treats apart.
func TestSandboxJSONMatchesEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pieces := []string{"a", "Z", "0", " ", "\"", "\\", "/", "<", ">", "&", "\b", "\f", "\n", "\r", "\t", "\x00", "\x1f", "\x7f",
		"é", "日本", "\u2028", "\u2029", "\U0001F600", "\xff", "\xc3", "\xed\xa0\x80", "sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w"}
	str := func() string {
		var b []byte
		for range rng.IntN(6) {
			b = append(b, pieces[rng.IntN(len(pieces))]...)
		}
		return string(b)
	}
	opt := func() *string {
		if rng.IntN(3) == 0 {
			return nil
		}
		s := str()
		return &s
	}
	zones := []*time.Location{time.UTC, time.FixedZone("x", 5*3600+30*60), time.FixedZone("y", -7*3600)}
	tm := func() time.Time {
		return time.Unix(rng.Int64N(4e9), rng.Int64N(1e9)/int64([]int{1, 1000, 1e6, 1e9}[rng.IntN(4)])).In(zones[rng.IntN(len(zones))])
	}
	optTime := func() *time.Time {
		if rng.IntN(2) == 0 {
			return nil
		}
		v := tm()
		return &v
	}
	for i := range 5000 {
		var labels map[string]string
		if rng.IntN(5) > 0 {
			labels = map[string]string{}
			for range rng.IntN(12) {
				labels[str()] = str()
			}
		}
		sb := Sandbox{ID: str(), State: str(), Provider: str(), Owner: opt(), Labels: labels, Reason: opt(), Error: opt(),
			Released: rng.IntN(2) == 0, ReleaseError: opt(), ProviderID: opt(), WorkDir: opt(), Node: opt(),
			Attempts: rng.IntN(1000) - 10, CreatedAt: tm(), UpdatedAt: tm(), ReadyAt: optTime(), EndedAt: optTime(),
			ReleasedAt: optTime(), ExpiresAt: tm(), CreateDeadline: tm(), PauseDeadline: optTime(),
			OnEnd: opt(), FromSnapshot: opt()}
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(sb); err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := jsoncodec.Encode(&got, sb); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Fatalf("sandbox %d:\n got %s\nwant %s", i, got.Bytes(), want.Bytes())
		}
	}
}

// TestSandboxJSONOutOfRangeTime: a time encoding/json refuses is refused
// the same way, not written.
func TestSandboxJSONOutOfRangeTime(t *testing.T) {
	sb := Sandbox{CreatedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}
	var buf bytes.Buffer
	if err := jsoncodec.Encode(&buf, sb); err == nil {
		t.Fatalf("encodeJSON of year 10000 = %s, want an error", buf.Bytes())
	}
}

// TestSandboxJSONCoversEveryField: a Sandbox with every field set (by
// reflection, so a field added later is set too) encodes as encoding/json
// encodes it: appendJSON cannot fall behind the struct.
func TestSandboxJSONCoversEveryField(t *testing.T) {
	var sb Sandbox
	v := reflect.ValueOf(&sb).Elem()
	when := time.Date(2026, 12, 2, 4, 5, 6, 7000, time.UTC)
	for i := range v.NumField() {
		f, name := v.Field(i), v.Type().Field(i).Name
		switch x := f.Addr().Interface().(type) {
		case *string:
			*x = "v-" + name
		case **string:
			s := "p-" + name
			*x = &s
		case *bool:
			*x = true
		case *int:
			*x = i + 1
		case *time.Time:
			*x = when.Add(time.Duration(i) * time.Second)
		case **time.Time:
			w := when.Add(time.Duration(i) * time.Minute)
			*x = &w
		case *map[string]string:
			*x = map[string]string{"k": name}
		default:
			t.Fatalf("Sandbox.%s is a %s: teach this test (and appendJSON) about it", name, f.Type())
		}
	}
	var want, got bytes.Buffer
	enc := json.NewEncoder(&want)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(sb); err != nil {
		t.Fatal(err)
	}
	if err := jsoncodec.Encode(&got, sb); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("every field set:\n got %s\nwant %s", got.Bytes(), want.Bytes())
	}
}
