// Package vmwire is the protocol between Tether and its agent inside a
// microVM guest (internal/vmagent), spoken over one virtio-serial port.
//
// The port is a single byte stream that outlives either end's
// connection: a guest keeps its end open across Tether restarts, and bytes
// of an earlier connection may still be in flight when a new one starts.
// So each connection begins with a handshake (Hello, Greet) that skips
// whatever came before it, and then carries a yamux session: Tether opens
// one stream per operation, the guest serves it. On a stream the first
// frame is a Request; what follows depends on its Op.
//
// Frames are a kind byte, a big-endian uint32 length and that many bytes;
// no frame is longer than MaxFrame. Nothing the guest sends is trusted by
// Tether beyond its bounds: the guest is the sandbox.
package vmwire

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"
)

// MaxFrame bounds every frame's payload, on both sides.
const MaxFrame = 1 << 20

// Frame kinds. Requests, data and stdin go from Tether to the guest;
// output, exits, failures and acknowledgements from the guest to Tether.
const (
	KindRequest    byte = 'R' // JSON Request, the first frame of a stream
	KindStdout     byte = 'o' // a chunk of a command's stdout
	KindStderr     byte = 'e' // a chunk of a command's stderr
	KindExit       byte = 'x' // JSON Exit: the command ended
	KindFailure    byte = 'f' // JSON Failure: the operation failed
	KindOK         byte = 'k' // the operation is under way or done
	KindData       byte = 'd' // a chunk of a file or archive
	KindEnd        byte = 'z' // the end of the data
	KindStdin      byte = 'i' // a chunk of a command's stdin
	KindStdinClose byte = 'c' // the command's stdin ends
	KindSignal     byte = 's' // one byte: a signal for the command's processes
)

// Operations.
const (
	OpPing      = "ping"      // answered KindOK
	OpExec      = "exec"      // output frames then KindExit
	OpReadFile  = "readfile"  // KindOK, data frames, KindEnd; or KindFailure
	OpWriteFile = "writefile" // data frames and KindEnd from Tether; KindOK or KindFailure
	OpReadTar   = "readtar"   // as OpReadFile, the data a tar archive
	OpWriteTar  = "writetar"  // as OpWriteFile, the data a tar archive
	OpDial      = "dial"      // KindOK then the stream is the connection; or KindFailure
	OpSync      = "sync"      // flushes the guest's file systems; KindOK
	OpIdentity  = "identity"  // a new name, entropy and clock (a restored copy); KindOK
)

// Request is the first frame of a stream.
type Request struct {
	Op string `json:"op"`
	// Exec: the command's argv, its whole environment and its folder.
	Argv []string `json:"argv,omitempty"`
	Env  []string `json:"env,omitempty"`
	Dir  string   `json:"dir,omitempty"`
	// Files and archives: the path inside the guest and the most bytes
	// it may take.
	Path  string `json:"path,omitempty"`
	Limit int64  `json:"limit,omitempty"`
	// Dial: the port on the guest's loopback.
	Port int `json:"port,omitempty"`
	// Identity: the guest's new host name, entropy to mix into its
	// random pool (credited), and the time (Unix nanoseconds).
	Hostname string `json:"hostname,omitempty"`
	Entropy  []byte `json:"entropy,omitempty"`
	Time     int64  `json:"time,omitempty"`
}

// Exit is how a command ended.
type Exit struct {
	// Code is the exit status, or 128 plus the signal that ended it.
	Code int `json:"code"`
	// OOM is set when the guest's OOM killer killed a process of the
	// command while it ran.
	OOM bool `json:"oom,omitempty"`
}

// Failure codes.
const (
	FailNotFound    = "not_found"
	FailIsDirectory = "is_directory"
	FailNotDir      = "not_directory"
	FailTooLarge    = "too_large"
	FailInvalidPath = "invalid_path"
	FailBadRequest  = "bad_request"
	FailRefused     = "refused"
	FailInternal    = "internal"
)

// Failure says why an operation failed.
type Failure struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (f *Failure) Error() string { return f.Code + ": " + f.Message }

// Writer writes frames; it is safe for concurrent use.
type Writer struct {
	mu sync.Mutex
	w  io.Writer
}

// NewWriter returns a Writer over w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Frame writes one frame, splitting payloads longer than MaxFrame.
func (w *Writer) Frame(kind byte, payload []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		n := min(len(payload), MaxFrame)
		var hdr [5]byte
		hdr[0] = kind
		binary.BigEndian.PutUint32(hdr[1:], uint32(n)) //nolint:gosec // n ≤ MaxFrame
		if _, err := w.w.Write(append(hdr[:], payload[:n]...)); err != nil {
			return fmt.Errorf("vmwire: writing a frame: %w", err)
		}
		payload = payload[n:]
		if len(payload) == 0 {
			return nil
		}
	}
}

// JSON writes a frame holding v as JSON.
func (w *Writer) JSON(kind byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("vmwire: encoding a frame: %w", err)
	}
	return w.Frame(kind, b)
}

// Fail writes a KindFailure frame.
func (w *Writer) Fail(code, format string, args ...any) error {
	return w.JSON(KindFailure, Failure{Code: code, Message: fmt.Sprintf(format, args...)})
}

// ReadFrame reads one frame from r, refusing one over MaxFrame.
func ReadFrame(r io.Reader) (kind byte, payload []byte, err error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > MaxFrame {
		return 0, nil, fmt.Errorf("vmwire: a frame of %d bytes, over the %d allowed", n, MaxFrame)
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, fmt.Errorf("vmwire: reading a frame: %w", noEOF(err))
	}
	return hdr[0], payload, nil
}

// ReadJSON reads one frame of kind into v; a KindFailure frame instead is
// returned as its *Failure.
func ReadJSON(r io.Reader, kind byte, v any) error {
	k, payload, err := ReadFrame(r)
	if err != nil {
		return err
	}
	return Decode(k, payload, kind, v)
}

// Decode decodes a frame already read, as ReadJSON does.
func Decode(k byte, payload []byte, kind byte, v any) error {
	switch k {
	case kind:
		if v == nil {
			return nil
		}
		if err := json.Unmarshal(payload, v); err != nil {
			return fmt.Errorf("vmwire: decoding a frame: %w", err)
		}
		return nil
	case KindFailure:
		f := &Failure{}
		if err := json.Unmarshal(payload, f); err != nil {
			return fmt.Errorf("vmwire: decoding a failure: %w", err)
		}
		return f
	default:
		return fmt.Errorf("vmwire: a frame of kind %q where %q was due", k, kind)
	}
}

func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// DataWriter is an io.Writer that sends what it is given as KindData
// frames.
type DataWriter struct{ W *Writer }

func (d DataWriter) Write(p []byte) (int, error) {
	if err := d.W.Frame(KindData, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// DataReader is an io.Reader over KindData frames up to KindEnd (io.EOF);
// a KindFailure frame is returned as its *Failure.
type DataReader struct {
	R    io.Reader
	buf  []byte
	done bool
}

func (d *DataReader) Read(p []byte) (int, error) {
	for len(d.buf) == 0 {
		if d.done {
			return 0, io.EOF
		}
		k, payload, err := ReadFrame(d.R)
		if err != nil {
			return 0, noEOF(err)
		}
		switch k {
		case KindData:
			d.buf = payload
		case KindEnd:
			d.done = true
		default:
			return 0, Decode(k, payload, KindData, nil)
		}
	}
	n := copy(p, d.buf)
	d.buf = d.buf[n:]
	return n, nil
}

// The handshake. The port is one byte stream that outlives connections:
// when Tether connects, the guest may still be reading with the session
// of an earlier connection (which then breaks on the new bytes), and
// bytes of that connection may still be in flight either way. So each
// side skips to the other's marker, and Tether repeats its hello (with a
// fresh nonce each time) until the guest answers one:
//
//	Tether: HELLO n1, HELLO n2, …      guest: GREET nk  (for each hello it reads)
//	Tether: GO nk  (nk one it sent)    guest: ACK nk    (skipping hellos up to GO)
//
// Tether sends nothing after GO but the session, the guest nothing after
// ACK; each side has skipped everything before, so the session starts
// clean on both.
var (
	hello = []byte("TETHER-VM-HELLO/1\n")
	greet = []byte("TETHER-VM-GREET/1\n")
	goMsg = []byte("TETHER-VM-GO/1\n")
	ack   = []byte("TETHER-VM-ACK/1\n")
)

const nonceSize = 16

// HelloInterval is how often Tether repeats its hello.
const HelloInterval = 100 * time.Millisecond

// maxSkip bounds what either end skips while looking for the other's
// marker (the remains of an earlier connection).
const maxSkip = 64 << 20

// Hello is Tether's side of the handshake over rw. The reader it returns
// holds what followed the guest's ACK. It gives up when the reads fail
// (a deadline the caller set on the connection, say).
func Hello(rw io.ReadWriter) (*bufio.Reader, error) {
	var mu sync.Mutex
	sent := map[string]bool{}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(HelloInterval)
		defer t.Stop()
		for {
			nonce := make([]byte, nonceSize)
			_, _ = rand.Read(nonce)
			mu.Lock()
			sent[string(nonce)] = true
			mu.Unlock()
			if _, err := rw.Write(append(slices.Clone(hello), nonce...)); err != nil {
				return
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	br := bufio.NewReader(rw)
	var nonce []byte
	for nonce == nil {
		if _, err := skipTo(br, greet); err != nil {
			close(stop)
			<-stopped
			return nil, fmt.Errorf("vmwire: waiting for the guest's greeting: %w", err)
		}
		n := make([]byte, nonceSize)
		if _, err := io.ReadFull(br, n); err != nil {
			close(stop)
			<-stopped
			return nil, fmt.Errorf("vmwire: reading the guest's greeting: %w", noEOF(err))
		}
		mu.Lock()
		if sent[string(n)] {
			nonce = n
		}
		mu.Unlock()
	}
	close(stop)
	<-stopped
	if _, err := rw.Write(append(slices.Clone(goMsg), nonce...)); err != nil {
		return nil, fmt.Errorf("vmwire: sending go: %w", err)
	}
	if _, err := skipTo(br, append(slices.Clone(ack), nonce...)); err != nil {
		return nil, fmt.Errorf("vmwire: waiting for the guest's ack: %w", err)
	}
	return br, nil
}

// Greet is the guest's side: it greets every hello it reads until a GO
// for one of them, which it acknowledges.
func Greet(rw io.ReadWriter) (*bufio.Reader, error) {
	br := bufio.NewReader(rw)
	greeted := map[string]bool{}
	for {
		which, err := skipTo(br, hello, goMsg)
		if err != nil {
			return nil, fmt.Errorf("vmwire: waiting for hello: %w", err)
		}
		nonce := make([]byte, nonceSize)
		if _, err := io.ReadFull(br, nonce); err != nil {
			return nil, fmt.Errorf("vmwire: reading the handshake: %w", noEOF(err))
		}
		if which == 0 {
			greeted[string(nonce)] = true
			if _, err := rw.Write(append(slices.Clone(greet), nonce...)); err != nil {
				return nil, fmt.Errorf("vmwire: sending the greeting: %w", err)
			}
			continue
		}
		if !greeted[string(nonce)] {
			continue // a GO of an earlier connection's
		}
		if _, err := rw.Write(append(slices.Clone(ack), nonce...)); err != nil {
			return nil, fmt.Errorf("vmwire: sending the ack: %w", err)
		}
		return br, nil
	}
}

// skipTo reads br until it has read one of markers, and not past it,
// and says which.
func skipTo(br *bufio.Reader, markers ...[]byte) (int, error) {
	longest := 0
	for _, m := range markers {
		longest = max(longest, len(m))
	}
	window := make([]byte, 0, longest)
	for skipped := 0; skipped < maxSkip; skipped++ {
		c, err := br.ReadByte()
		if err != nil {
			return 0, err
		}
		if len(window) == longest {
			copy(window, window[1:])
			window = window[:longest-1]
		}
		window = append(window, c)
		for i, m := range markers {
			if bytes.HasSuffix(window, m) {
				return i, nil
			}
		}
	}
	return 0, errors.New("too many bytes before it")
}

// Conn joins the reader a handshake returned with the writer side of the
// port, for the session that follows.
type Conn struct {
	io.Reader
	io.Writer
	io.Closer
}
