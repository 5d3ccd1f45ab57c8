package outputcap

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// The streams, as the sandbox API names them.
const stdout, stderr = "stdout", "stderr"

type chunk struct {
	stream string
	data   string
}

// capture feeds writes through a Cap of limit and returns what it
// passed on, chunk by chunk (runs of one stream merged), and whether it cut.
func capture(t *testing.T, limit int, writes []chunk) ([]chunk, bool) {
	t.Helper()
	var got []chunk
	c := New(limit, stderr, func(stream string, p []byte) error {
		if len(p) == 0 {
			t.Errorf("empty chunk passed on")
		}
		if n := len(got); n > 0 && got[n-1].stream == stream {
			got[n-1].data += string(p)
		} else {
			got = append(got, chunk{stream, string(p)})
		}
		return nil
	})
	for _, w := range writes {
		if err := c.Write(w.stream, []byte(w.data)); err != nil {
			t.Fatal(err)
		}
	}
	truncated, err := c.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return got, truncated
}

func joined(chunks []chunk) string {
	var b strings.Builder
	for _, c := range chunks {
		b.WriteString(c.data)
	}
	return b.String()
}

// TestOutputCapKeepsHeadAndTail: output within the limit passes whole and
// in order; longer output keeps its head and its tail with the marker
// between them saying exactly how much was left out, all within the limit.
func TestOutputCapKeepsHeadAndTail(t *testing.T) {
	t.Parallel()
	const limit = 1000
	keep := limit - markerRoom
	head, tail := keep/2, keep-keep/2

	// Within the limit, however it is written: whole, streams in order.
	fits := []chunk{{stdout, strings.Repeat("a", 600)}, {stderr, "err"}, {stdout, strings.Repeat("b", limit-603)}}
	got, truncated := capture(t, limit, fits)
	if truncated || len(got) != 3 || got[1] != (chunk{stderr, "err"}) || joined(got) != joined(fits) {
		t.Errorf("output of exactly the limit = %d chunks, truncated %v", len(got), truncated)
	}

	// One byte over: cut, with a marker.
	var total strings.Builder
	for i := range limit + 1 {
		total.WriteByte(byte('a' + i%26))
	}
	all := total.String()
	for _, size := range []int{1, 7, 100, 4096} { // in pieces of various sizes
		var writes []chunk
		for i := 0; i < len(all); i += size {
			writes = append(writes, chunk{stdout, all[i:min(i+size, len(all))]})
		}
		got, truncated := capture(t, limit, writes)
		out := joined(got)
		marker := fmt.Sprintf(omittedFormat, len(all)-head-tail)
		want := all[:head] + marker + all[len(all)-tail:]
		if !truncated || out != want || len(out) > limit {
			t.Errorf("pieces of %d: truncated %v, %d bytes; want head, %q, tail (%d bytes)", size, truncated, len(out), marker, len(want))
		}
	}

	// A gigabyte-like flood in large writes: still head, marker, tail.
	flood := []chunk{{stdout, "HEAD"}}
	for range 50 {
		flood = append(flood, chunk{stdout, strings.Repeat("x", 3000)})
	}
	flood = append(flood, chunk{stderr, "TAIL"})
	got, truncated = capture(t, limit, flood)
	out := joined(got)
	omitted := 4 + 50*3000 + 4 - head - tail
	if !truncated || !strings.HasPrefix(out, "HEAD") || !strings.HasSuffix(out, "TAIL") ||
		!strings.Contains(out, fmt.Sprintf("[tether: %d bytes of output omitted]", omitted)) || len(out) > limit {
		t.Errorf("flood: truncated %v, %d bytes: %.60q ... %.60q", truncated, len(out), out, out[max(0, len(out)-60):])
	}
	// The marker comes on stderr; the tail keeps its streams.
	if n := len(got); n < 3 || got[n-1] != (chunk{stderr, "TAIL"}) || got[n-2].stream != stdout || !strings.HasPrefix(got[n-3].data, "\n[tether:") {
		t.Errorf("flood chunks end with %+v", got[max(0, len(got)-3):])
	}
}

// TestOutputCapSmallLimit: below room for a marker, the head alone is kept.
func TestOutputCapSmallLimit(t *testing.T) {
	t.Parallel()
	got, truncated := capture(t, 10, []chunk{{stdout, "0123456789abc"}})
	if !truncated || joined(got) != "0123456789" {
		t.Errorf("got %q, truncated %v", joined(got), truncated)
	}
}

// TestOutputCapAlternatingStreams: stdout and stderr alternating in tiny
// pieces cannot grow the bookkeeping past maxSegments runs; what is kept is
// still the head, the marker with the exact count, and an unbroken tail.
func TestOutputCapAlternatingStreams(t *testing.T) {
	t.Parallel()
	const limit = 60000 // a ring of ~30000 bytes: more than maxSegments runs of 6
	var writes []chunk
	for i := range 3 * maxSegments {
		writes = append(writes, chunk{[]string{stdout, stderr}[i%2], fmt.Sprintf("%05d,", i)})
	}
	all := joined(writes)
	c := New(limit, stderr, func(string, []byte) error { return nil })
	for _, w := range writes {
		if err := c.Write(w.stream, []byte(w.data)); err != nil {
			t.Fatal(err)
		}
		if len(c.segs) > maxSegments {
			t.Fatalf("%d runs recorded", len(c.segs))
		}
	}
	got, truncated := capture(t, limit, writes)
	out := joined(got)
	keep := limit - markerRoom
	head := keep / 2
	before, tail, ok := strings.Cut(out[head:], "]\n")
	var omitted int
	if _, err := fmt.Sscanf(before, "\n[tether: %d bytes of output omitted", &omitted); err != nil || !ok {
		t.Fatalf("no marker after the head: %.80q (%v)", out[head:], err)
	}
	if !truncated || out[:head] != all[:head] || !strings.HasSuffix(all, tail) || head+omitted+len(tail) != len(all) || len(out) > limit {
		t.Errorf("truncated %v, head ok %v, tail of %d bytes ok %v, omitted %d of %d", truncated, out[:head] == all[:head], len(tail), strings.HasSuffix(all, tail), omitted, len(all))
	}
	for _, c := range got {
		if c.stream == stdout && strings.Contains(c.data, "[") {
			t.Errorf("the marker came on stdout")
		}
		for _, piece := range strings.Split(strings.TrimSuffix(c.data, ","), ",") {
			var n int
			if _, err := fmt.Sscanf(piece, "%d", &n); err == nil && len(piece) == 5 && []string{stdout, stderr}[n%2] != c.stream {
				t.Fatalf("piece %s passed on as %s", piece, c.stream)
			}
		}
	}
}

// TestOutputCapEmitFailure: a failing emit is reported, at once.
func TestOutputCapEmitFailure(t *testing.T) {
	t.Parallel()
	boom := errors.New("client gone")
	c := New(1000, stderr, func(string, []byte) error { return boom })
	if err := c.Write(stdout, []byte("x")); !errors.Is(err, boom) {
		t.Errorf("write = %v, want the emit's error", err)
	}
}
