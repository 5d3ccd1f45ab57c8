package local

import (
	"bytes"
	"strings"
	"testing"
)

// readAll is what r holds from from on, as one string, checking that the
// chunks are contiguous and none is longer than maxChunk.
func readAll(t *testing.T, r *outputRing, from int64) string {
	t.Helper()
	var b strings.Builder
	next := max(from, r.start)
	for _, c := range r.read(from, 1<<30) {
		if c.off != next || len(c.data) > maxChunk || len(c.data) == 0 {
			t.Fatalf("chunk at %d of %d bytes, want one at %d of 1 to %d", c.off, len(c.data), next, maxChunk)
		}
		next += int64(len(c.data))
		b.Write(c.data)
	}
	if next != r.end {
		t.Fatalf("the chunks end at %d, the ring at %d", next, r.end)
	}
	return b.String()
}

func TestOutputRingKeepsTheLatestWindow(t *testing.T) {
	t.Parallel()
	r := newOutputRing(10)
	r.write(streamStdout, []byte("hello "))
	r.write(streamStderr, []byte("world"))
	if got := readAll(t, &r, 0); got != "ello world" || r.start != 1 || r.end != 11 || r.kept() != 10 {
		t.Errorf("after 11 bytes in a ring of 10: %q, start %d, end %d", got, r.start, r.end)
	}
	// The streams stay apart, and a read from the middle of a chunk starts there.
	chunks := r.read(4, 100)
	if len(chunks) != 2 || chunks[0].stream != streamStdout || string(chunks[0].data) != "o " || chunks[1].stream != streamStderr {
		t.Errorf("read from 4 = %+v", chunks)
	}
	// One write larger than the window keeps its end only.
	r.write(streamStdout, []byte("0123456789abcdef"))
	if got := readAll(t, &r, 0); got != "6789abcdef" || r.start != 17 || r.end != 27 {
		t.Errorf("after a write past the window: %q, start %d, end %d", got, r.start, r.end)
	}
	// A reader's bytes stay as they were while the ring goes on.
	held := r.read(r.start, 100)
	before := string(held[0].data)
	r.write(streamStdout, []byte("XYZ"))
	if string(held[0].data) != before {
		t.Errorf("a chunk read before changed under its reader: %q, was %q", held[0].data, before)
	}
}

func TestOutputRingSmallWritesShareChunks(t *testing.T) {
	t.Parallel()
	r := newOutputRing(1 << 20)
	for range 10_000 {
		r.write(streamPTY, []byte("x"))
	}
	if n := len(r.chunks) - r.head; n > 10_000/chunkCap+1 {
		t.Errorf("10000 one-byte writes made %d chunks", n)
	}
	// Alternating streams cannot share: the chunk count is bounded
	// anyway, as if the window were full.
	for i := range 3 * maxChunks {
		r.write([]string{streamStdout, streamStderr}[i%2], []byte("y"))
	}
	if n := len(r.chunks) - r.head; n > maxChunks {
		t.Errorf("%d chunks kept, over %d", n, maxChunks)
	}
	if got := readAll(t, &r, 0); int64(len(got)) != r.kept() || !strings.HasSuffix(got, "yy") {
		t.Errorf("kept %d bytes, read %d", r.kept(), len(got))
	}
	// Reads are cut to the limit asked for.
	var total int
	for _, c := range r.read(0, 1000) {
		total += len(c.data)
	}
	if total != 1000 {
		t.Errorf("a read of at most 1000 bytes returned %d", total)
	}
}

func TestOutputRingLargeOutput(t *testing.T) {
	t.Parallel()
	r := newOutputRing(1 << 16)
	want := bytes.Repeat([]byte("0123456789"), 30_000)
	for i := 0; i < len(want); i += 777 {
		r.write(streamStdout, want[i:min(i+777, len(want))])
	}
	got := readAll(t, &r, 0)
	if r.end != int64(len(want)) || r.kept() != 1<<16 || got != string(want[len(want)-1<<16:]) {
		t.Errorf("after %d bytes: end %d, kept %d, the kept bytes are not the last ones", len(want), r.end, r.kept())
	}
}
