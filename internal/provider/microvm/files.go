package microvm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/tetherhq/tether/internal/vmwire"
	"github.com/tetherhq/tether/provider"
)

// failure maps the agent's failure to the provider's error codes.
func (p *Provider) failure(id, op string, err error) error {
	var f *vmwire.Failure
	if !errors.As(err, &f) {
		return p.lostOr(id, fmt.Errorf("%s: %w", op, err))
	}
	code := map[string]provider.Code{
		vmwire.FailNotFound:    provider.CodeFileNotFound,
		vmwire.FailIsDirectory: provider.CodeIsDirectory,
		vmwire.FailNotDir:      provider.CodeInvalidPath,
		vmwire.FailTooLarge:    provider.CodePayloadTooLarge,
		vmwire.FailInvalidPath: provider.CodeInvalidPath,
		vmwire.FailBadRequest:  provider.CodeInvalidRequest,
		vmwire.FailRefused:     provider.CodePortUnreachable,
	}[f.Code]
	if code == "" {
		return fmt.Errorf("microvm: %s: %s", op, f.Message)
	}
	return provider.Errorf(code, "microvm: %s", f.Message)
}

// open starts an operation on a live sandbox; the stream's reads end
// with ctx.
func (p *Provider) open(ctx context.Context, id string, req vmwire.Request) (net.Conn, func(), error) {
	if _, err := p.live(id); err != nil {
		return nil, nil, err
	}
	st, err := p.agent(id).stream(ctx, req)
	if err != nil {
		return nil, nil, p.lostOr(id, err)
	}
	stop := context.AfterFunc(ctx, func() { _ = st.SetDeadline(time.Now()) })
	return st, func() { stop(); _ = st.Close() }, nil
}

// ReadFile implements provider.Files.
func (p *Provider) ReadFile(ctx context.Context, sandboxID, path string, w io.Writer, limit int64) error {
	return p.readData(ctx, sandboxID, vmwire.Request{Op: vmwire.OpReadFile, Path: path, Limit: limit}, w, limit)
}

// ReadArchive implements provider.Archives.
func (p *Provider) ReadArchive(ctx context.Context, sandboxID, path string, w io.Writer) error {
	return p.readData(ctx, sandboxID, vmwire.Request{Op: vmwire.OpReadTar, Path: path}, w, -1)
}

func (p *Provider) readData(ctx context.Context, id string, req vmwire.Request, w io.Writer, limit int64) error {
	st, done, err := p.open(ctx, id, req)
	if err != nil {
		return err
	}
	defer done()
	if err := vmwire.ReadJSON(st, vmwire.KindOK, nil); err != nil {
		return p.failure(id, req.Op+" "+req.Path, err)
	}
	var r io.Reader = &vmwire.DataReader{R: st}
	if limit >= 0 {
		r = io.LimitReader(r, limit+1)
	}
	n, err := io.Copy(w, r)
	if err != nil {
		return p.failure(id, req.Op+" "+req.Path, err)
	}
	if limit >= 0 && n > limit {
		return provider.Errorf(provider.CodePayloadTooLarge, "microvm: %s grew past %d bytes while it was read", req.Path, limit)
	}
	return nil
}

// WriteFile implements provider.Files.
func (p *Provider) WriteFile(ctx context.Context, sandboxID, path string, r io.Reader, limit int64) error {
	return p.writeData(ctx, sandboxID, vmwire.Request{Op: vmwire.OpWriteFile, Path: path, Limit: limit}, r, limit)
}

// WriteArchive implements provider.Archives.
func (p *Provider) WriteArchive(ctx context.Context, sandboxID, path string, r io.Reader, limit int64) error {
	return p.writeData(ctx, sandboxID, vmwire.Request{Op: vmwire.OpWriteTar, Path: path, Limit: limit}, r, limit)
}

// writeData sends r as data frames, at most limit+1 bytes (the agent
// refuses what is over), and reads the agent's answer, which may come
// early (a refusal) while the data is still being sent.
func (p *Provider) writeData(ctx context.Context, id string, req vmwire.Request, r io.Reader, limit int64) error {
	st, done, err := p.open(ctx, id, req)
	if err != nil {
		return err
	}
	defer done()
	answer := make(chan error, 1)
	go func() { answer <- vmwire.ReadJSON(st, vmwire.KindOK, nil) }()
	w := vmwire.NewWriter(st)
	sent := make(chan error, 1)
	go func() {
		_, err := io.Copy(vmwire.DataWriter{W: w}, io.LimitReader(r, limit+1))
		if err == nil {
			err = w.Frame(vmwire.KindEnd, nil)
		}
		sent <- err
	}()
	select {
	case err := <-answer:
		// The agent answered before the data was all sent: a refusal
		// (or, for an empty body, the end). Unblock the sender.
		_ = st.Close()
		<-sent //nolint:errcheck // the sender failed too, or finished
		if err != nil {
			return p.failure(id, req.Op+" "+req.Path, err)
		}
		return nil
	case err := <-sent:
		if err != nil {
			_ = st.Close()
			<-answer //nolint:errcheck // the send failed: its error says why
			var f *vmwire.Failure
			if errors.As(err, &f) {
				return p.failure(id, req.Op, err)
			}
			return fmt.Errorf("microvm: %s %s: reading the body: %w", req.Op, req.Path, err)
		}
	}
	if err := <-answer; err != nil {
		return p.failure(id, req.Op+" "+req.Path, err)
	}
	return nil
}
