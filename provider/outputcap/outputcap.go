// Package outputcap holds a command's output to a limit as it passes it
// on: the head as it comes, the latest bytes in a ring, and at the end a
// marker saying how much of the middle was left out. It owns nothing of
// the host: no output is ever stored on disk.
package outputcap

import "fmt"

// omittedFormat is the marker that replaces the middle of an output longer
// than the exec's limit: the head and the tail of the output stay, and the
// marker between them says how many bytes were left out.
const omittedFormat = "\n[tether: %d bytes of output omitted]\n"

// markerRoom is the room kept within the limit for the marker: its
// longest form, with a 19-digit count.
const markerRoom = len(omittedFormat) - len("%d") + 19

// maxSegments bounds the runs of one stream that the held tail records, so
// that output alternating between stdout and stderr in tiny pieces cannot
// grow the bookkeeping past the tail's own size. Past it the oldest runs of
// the tail are dropped (and counted as omitted).
const maxSegments = 4096

// Cap passes a command's output on while holding no more than limit
// bytes of it: the first part (the head) is passed on as it comes; what
// follows is held in a ring of the latest bytes, passed on when the command
// ends. If the output fit in limit, all of it was passed on, in order; if
// not, the ring is cut to the tail and the marker goes before it, so that
// head, marker and tail together are at most limit bytes. Below 4×markerRoom
// there is no room for a useful tail: the head is the whole limit and a cut
// output has no marker (Truncated says it was cut).
//
// It is not safe for concurrent use.
type Cap struct {
	limit    int
	headLeft int // bytes still to pass on as they come
	tailKeep int // bytes of the ring kept after a cut
	ring     []byte
	start    int // where the ring's oldest byte is
	size     int // bytes in the ring
	segs     []segment
	total    int64  // bytes written in all
	marker   string // the stream the marker goes to
	emit     func(stream string, chunk []byte) error
}

// segment is a run of the ring's bytes from one stream.
type segment struct {
	stream string
	n      int
}

// New returns a Cap of limit bytes that passes output on to emit, the
// marker to markerStream (stderr, say).
func New(limit int, markerStream string, emit func(stream string, chunk []byte) error) *Cap {
	c := &Cap{limit: limit, headLeft: limit, marker: markerStream, emit: emit}
	if limit >= 4*markerRoom {
		keep := limit - markerRoom
		c.headLeft = keep / 2
		c.tailKeep = keep - c.headLeft
		c.ring = make([]byte, limit-c.headLeft)
	}
	return c
}

// Write takes the next chunk of the output, from stream.
func (c *Cap) Write(stream string, p []byte) error {
	c.total += int64(len(p))
	if c.headLeft > 0 {
		n := min(len(p), c.headLeft)
		c.headLeft -= n
		if err := c.emit(stream, p[:n]); err != nil {
			return err
		}
		p = p[n:]
	}
	if len(p) == 0 || len(c.ring) == 0 {
		return nil
	}
	if len(p) >= len(c.ring) {
		c.drop(c.size)
		p = p[len(p)-len(c.ring):]
	}
	if over := c.size + len(p) - len(c.ring); over > 0 {
		c.drop(over)
	}
	end := (c.start + c.size) % len(c.ring)
	n := copy(c.ring[end:], p)
	copy(c.ring, p[n:])
	c.size += len(p)
	if last := len(c.segs) - 1; last >= 0 && c.segs[last].stream == stream {
		c.segs[last].n += len(p)
	} else {
		c.segs = append(c.segs, segment{stream: stream, n: len(p)})
	}
	if len(c.segs) > maxSegments {
		c.drop(c.segs[0].n)
	}
	return nil
}

// drop forgets the ring's n oldest bytes.
func (c *Cap) drop(n int) {
	c.start = (c.start + n) % max(len(c.ring), 1)
	c.size -= n
	for n > 0 {
		if c.segs[0].n > n {
			c.segs[0].n -= n
			return
		}
		n -= c.segs[0].n
		c.segs = c.segs[1:]
	}
}

// Finish passes on what the ring holds, after the marker if the output was
// longer than the limit, and reports whether it was.
func (c *Cap) Finish() (truncated bool, err error) {
	if c.total > int64(c.limit) {
		truncated = true
		if c.size > c.tailKeep {
			c.drop(c.size - c.tailKeep)
		}
		if c.tailKeep > 0 {
			omitted := c.total - int64(c.limit-c.tailKeep-markerRoom) - int64(c.size)
			if err := c.emit(c.marker, fmt.Appendf(nil, omittedFormat, omitted)); err != nil {
				return truncated, err
			}
		}
	}
	for _, s := range c.segs {
		first := min(s.n, len(c.ring)-c.start)
		if err := c.emit(s.stream, c.ring[c.start:c.start+first]); err != nil {
			return truncated, err
		}
		if first < s.n {
			if err := c.emit(s.stream, c.ring[:s.n-first]); err != nil {
				return truncated, err
			}
		}
		c.start = (c.start + s.n) % len(c.ring)
	}
	c.segs, c.size = nil, 0
	return truncated, nil
}
