package local

// outputRing is the latest output of a process that its supervisor keeps
// (supervisor.go): at most limit bytes, in chunks that say which stream
// they came from, each at its offset in all the process's output. What
// falls out of it is counted (start), never kept.
//
// The bytes of a chunk never change once written: a reader may hold a
// chunk's bytes (read) after the ring's lock is released while the ring
// goes on. A chunk only grows (appended past its length) or is cut from
// its front (resliced).
type outputRing struct {
	limit int64
	// chunks[head:] are the chunks kept, oldest first; start is the
	// offset of the first byte kept (so the bytes dropped), end the
	// offset past the last.
	chunks     []outChunk
	head       int
	start, end int64
}

// outChunk is a run of one stream's output from offset off.
type outChunk struct {
	stream string
	off    int64
	data   []byte
}

// Bounds of a ring's chunks.
const (
	// chunkCap is the least room a new chunk is made with, so that many
	// small writes (a terminal's echo) share one.
	chunkCap = 4 << 10
	// maxChunks bounds how many chunks a ring holds whatever their sizes
	// (one-byte writes alternating between stdout and stderr): past it
	// the oldest are dropped as if the window were full.
	maxChunks = 4096
)

func newOutputRing(limit int64) outputRing {
	return outputRing{limit: max(limit, 1)}
}

// write appends p, of stream, dropping what falls out of the window.
func (r *outputRing) write(stream string, p []byte) {
	if len(p) == 0 {
		return
	}
	if int64(len(p)) > r.limit { // only its end fits
		cut := int64(len(p)) - r.limit
		r.dropAll()
		r.start, r.end = r.end+cut, r.end+cut
		p = p[cut:]
	}
	if n := len(r.chunks); n > r.head && r.chunks[n-1].stream == stream && cap(r.chunks[n-1].data)-len(r.chunks[n-1].data) >= len(p) {
		last := &r.chunks[n-1]
		last.data = append(last.data, p...)
	} else {
		data := make([]byte, len(p), max(len(p), min(chunkCap, int(r.limit))))
		copy(data, p)
		r.chunks = append(r.chunks, outChunk{stream: stream, off: r.end, data: data})
	}
	r.end += int64(len(p))
	r.trim()
}

// trim drops what is past the window, or past maxChunks, from the front.
func (r *outputRing) trim() {
	for r.end-r.start > r.limit || len(r.chunks)-r.head > maxChunks {
		first := &r.chunks[r.head]
		over := r.end - r.start - r.limit
		if over <= 0 || over >= int64(len(first.data)) {
			r.start = first.off + int64(len(first.data))
			r.chunks[r.head] = outChunk{}
			r.head++
			continue
		}
		first.data = first.data[over:]
		first.off += over
		r.start = first.off
	}
	if r.head > 64 && r.head*2 > len(r.chunks) {
		r.chunks = append(r.chunks[:0:0], r.chunks[r.head:]...)
		r.head = 0
	}
}

// dropAll drops every chunk kept.
func (r *outputRing) dropAll() {
	r.chunks, r.head = nil, 0
	r.start = r.end
}

// read returns the chunks from offset from (at least start) on, cut to
// at most limit bytes in all and each to at most maxChunk bytes.
func (r *outputRing) read(from int64, limit int) []outChunk {
	var out []outChunk
	for i := r.head; i < len(r.chunks) && limit > 0; i++ {
		c := r.chunks[i]
		end := c.off + int64(len(c.data))
		if end <= from {
			continue
		}
		if from > c.off {
			c.data, c.off = c.data[from-c.off:], from
		}
		for len(c.data) > 0 && limit > 0 {
			n := min(len(c.data), maxChunk, limit)
			out = append(out, outChunk{stream: c.stream, off: c.off, data: c.data[:n:n]})
			c.data, c.off, limit = c.data[n:], c.off+int64(n), limit-n
		}
	}
	return out
}

// kept is how many bytes the ring holds.
func (r *outputRing) kept() int64 { return r.end - r.start }
