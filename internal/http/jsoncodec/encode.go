package jsoncodec

import (
	"encoding/json"
	"io"
	"sync"
)

// Appender is a body that appends its own JSON, byte for byte as
// encoding/json (without HTML escaping) would encode it, without
// reflection; ok is false when it cannot, and Encode uses encoding/json.
// A type that embeds an Appender and adds fields of its own must answer
// ok false itself, or its fields are left out.
type Appender interface {
	AppendJSON(b []byte) (_ []byte, ok bool)
}

// Encode writes v as JSON without escaping HTML characters, and a
// newline, as json.Encoder does. An Appender (a Sandbox, the most common
// body) writes itself, without reflection.
func Encode(w io.Writer, v any) error {
	if a, ok := v.(Appender); ok {
		buf := buffers.Get().(*[]byte)
		b, ok := a.AppendJSON((*buf)[:0])
		if !ok {
			buffers.Put(buf)
			return encodeReflect(w, v)
		}
		b = append(b, '\n')
		_, err := w.Write(b)
		if cap(b) <= 16<<10 {
			*buf = b
			buffers.Put(buf)
		}
		return err
	}
	return encodeReflect(w, v)
}

// encodeReflect is Encode through encoding/json.
func encodeReflect(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// buffers are the buffers Appenders' bodies are built in.
var buffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}
