//go:build kubernetes

package kubernetes

// Files and archives, through pods/exec.
//
// Uploads are sent in chunks of known length, each to a command that
// reads exactly that many bytes (`head -c N`): it needs no end of its
// input, which some exec paths never deliver (kwok's), and Tether holds
// at most one chunk in memory. The chunks build a temporary file beside
// the target, which replaces the target only once all of it arrived
// within the limit, so a failed or refused upload leaves nothing behind.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/tetherhq/tether/provider"
	"github.com/tetherhq/tether/provider/shfiles"
)

// chunkSize is how much of an upload one exec carries.
const chunkSize = 4 << 20

// writableRoots are where uploads may go.
func (p *Provider) writableRoots() []string { return []string{p.cfg.WorkDir, "/tmp"} }

func (p *Provider) writable(clean string, orRoot bool) bool {
	for _, root := range p.writableRoots() {
		if strings.HasPrefix(clean, root+"/") || (orRoot && clean == root) {
			return true
		}
	}
	return false
}

// fileError turns a file script's exit code into the file error it means.
func fileError(code int, clean, stderr string) error {
	return shfiles.Error(code, clean, stderr, "")
}

// script runs a file script in the pod: stdin (nil: none), stdout to w.
// It returns the script's exit code, what it wrote to stderr (its first
// 4 KiB), and an error only if it could not run.
func (p *Provider) script(ctx context.Context, pod *corev1.Pod, stdin io.Reader, w io.Writer, script string, args ...string) (int, string, error) {
	stderr := &boundedBuffer{max: 4096}
	argv := p.command(pod, nil, append([]string{"/bin/sh", "-c", script, "sh"}, args...)...)
	err := p.stream(ctx, pod, argv, stdin, w, stderr)
	if ctx.Err() != nil {
		return 0, stderr.String(), fmt.Errorf("kubernetes: %w", ctx.Err())
	}
	code, ok := exitStatus(err)
	if !ok {
		return 0, stderr.String(), provider.Errorf(provider.CodeProviderUnavailable, "exec in pod %s failed: %v", pod.Name, err)
	}
	return code, stderr.String(), nil
}

// boundedBuffer keeps the first max bytes written to it.
type boundedBuffer struct {
	bytes.Buffer
	max int
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// appendScript appends exactly $2 bytes of stdin to the file $1.
const appendScript = `head -c "$2" >> "$1" || exit 7`

// commitScript checks that the file $1 holds $3 bytes and moves it to $2,
// never into a folder (shfiles.CommitFile).
const commitScript = `n=$(wc -c < "$1") || exit 7; [ "$n" -eq "$3" ] || { echo "short upload: $n of $3 bytes arrived" >&2; exit 7; }
` + shfiles.CommitFile

// WriteFile implements provider.Files.
func (p *Provider) WriteFile(ctx context.Context, sandboxID, filePath string, r io.Reader, limit int64) error {
	clean, err := shfiles.CheckPath(filePath)
	if err != nil {
		return err
	}
	if !p.writable(clean, false) {
		return provider.Errorf(provider.CodeInvalidPath, "path %s is outside the sandbox's writable areas (%s)", clean, strings.Join(p.writableRoots(), ", "))
	}
	pod, err := p.running(ctx, sandboxID)
	if err != nil {
		return err
	}
	tmp := path.Join(path.Dir(clean), ".tether-upload-"+randomToken()+"-"+path.Base(clean))
	discard := func() { _, _, _ = p.script(context.WithoutCancel(ctx), pod, nil, io.Discard, `rm -f -- "$1"`, tmp) }
	code, stderr, err := p.script(ctx, pod, nil, io.Discard, shfiles.StageFileEmpty, clean, tmp)
	if err != nil || code != 0 {
		discard()
		return firstErr(err, fileError(code, clean, stderr))
	}
	total, err := p.upload(ctx, pod, r, limit, tmp, "file", clean)
	if err != nil {
		discard()
		return err
	}
	code, stderr, err = p.script(ctx, pod, nil, io.Discard, commitScript, tmp, clean, strconv.FormatInt(total, 10))
	if err != nil || code != 0 {
		discard()
		return firstErr(err, fileError(code, clean, stderr))
	}
	return nil
}

func firstErr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

// upload appends what r holds to the file tmp in the pod, chunk by chunk,
// refusing more than limit bytes; it returns how many it sent.
func (p *Provider) upload(ctx context.Context, pod *corev1.Pod, r io.Reader, limit int64, tmp, what, clean string) (int64, error) {
	buf := make([]byte, min(int64(chunkSize), limit+1))
	var total int64
	for {
		n, rerr := io.ReadFull(r, buf)
		if total+int64(n) > limit {
			return total, provider.Errorf(provider.CodePayloadTooLarge, "%s exceeds the %d-byte limit", what, limit)
		}
		if n > 0 {
			code, stderr, err := p.script(ctx, pod, bytes.NewReader(buf[:n]), io.Discard, appendScript, tmp, strconv.Itoa(n))
			if err != nil {
				return total, err
			}
			if code != 0 {
				return total, fileError(shfiles.ExitWriteFailed, clean, stderr)
			}
			total += int64(n)
		}
		switch {
		case errors.Is(rerr, io.EOF), errors.Is(rerr, io.ErrUnexpectedEOF):
			return total, nil
		case rerr != nil:
			return total, fmt.Errorf("kubernetes: reading the upload: %w", rerr)
		}
	}
}

// ReadFile implements provider.Files.
func (p *Provider) ReadFile(ctx context.Context, sandboxID, filePath string, w io.Writer, limit int64) error {
	clean, err := shfiles.CheckPath(filePath)
	if err != nil {
		return err
	}
	pod, err := p.running(ctx, sandboxID)
	if err != nil {
		return err
	}
	lw := &limitedWriter{w: w, left: limit}
	code, stderr, err := p.script(ctx, pod, nil, lw, shfiles.ReadFilePortable, clean, strconv.FormatInt(limit, 10))
	switch {
	case err != nil:
		return err
	case code == shfiles.ExitTooLarge:
		return provider.Errorf(provider.CodePayloadTooLarge, "%s is larger than the %d-byte file limit", clean, limit)
	case code != 0:
		return fileError(code, clean, stderr)
	case lw.err != nil:
		return fmt.Errorf("kubernetes: read file: %w", lw.err)
	}
	return nil
}

// limitedWriter passes on at most left bytes, and remembers w's failure.
type limitedWriter struct {
	w    io.Writer
	left int64
	err  error
}

func (l *limitedWriter) Write(b []byte) (int, error) {
	if l.err != nil {
		return 0, l.err
	}
	n := len(b)
	if int64(len(b)) > l.left {
		b = b[:l.left]
	}
	if len(b) > 0 {
		if _, err := l.w.Write(b); err != nil {
			l.err = err
			return 0, err
		}
		l.left -= int64(len(b))
	}
	return n, nil
}

// ReadArchive implements provider.Archives.
func (p *Provider) ReadArchive(ctx context.Context, sandboxID, dir string, w io.Writer) error {
	clean, err := shfiles.CheckPath(dir)
	if err != nil {
		return err
	}
	pod, err := p.running(ctx, sandboxID)
	if err != nil {
		return err
	}
	code, stderr, err := p.script(ctx, pod, nil, w, shfiles.ReadArchive, clean)
	if err != nil {
		return err
	}
	if code != 0 {
		return fileError(code, clean, stderr)
	}
	return nil
}

// extractScript extracts the uploaded archive into the staging folder and
// copies that over the folder.
const extractScript = `p=$1 stage=$2
n=$(wc -c < "$stage.tar") || exit 7; [ "$n" -eq "$3" ] || { echo "short upload: $n of $3 bytes arrived" >&2; exit 7; }
tar -C "$stage" -xf "$stage.tar" || exit 9
cp -a -- "$stage"/. "$p"/ || exit 7`

// exitBadArchive is extractScript's exit code for an archive tar refuses.
const exitBadArchive = 9

// WriteArchive implements provider.Archives.
func (p *Provider) WriteArchive(ctx context.Context, sandboxID, dir string, r io.Reader, limit int64) error {
	clean, err := shfiles.CheckPath(dir)
	if err != nil {
		return err
	}
	if !p.writable(clean, true) {
		return provider.Errorf(provider.CodeInvalidPath, "path %s is outside the sandbox's writable areas (%s)", clean, strings.Join(p.writableRoots(), ", "))
	}
	pod, err := p.running(ctx, sandboxID)
	if err != nil {
		return err
	}
	stage := path.Join(clean, ".tether-archive-"+randomToken())
	defer func() {
		_, _, _ = p.script(context.WithoutCancel(ctx), pod, nil, io.Discard, `rm -rf -- "$1" "$1.tar"`, stage)
	}()
	code, stderr, err := p.script(ctx, pod, nil, io.Discard, shfiles.StageArchiveEmpty, clean, stage)
	if err != nil || code != 0 {
		return firstErr(err, fileError(code, clean, stderr))
	}
	total, err := p.upload(ctx, pod, r, limit, stage+".tar", "archive", clean)
	if err != nil {
		return err
	}
	code, stderr, err = p.script(ctx, pod, nil, io.Discard, extractScript, clean, stage, strconv.FormatInt(total, 10))
	switch {
	case err != nil:
		return err
	case code == exitBadArchive:
		return provider.Errorf(provider.CodeInvalidRequest, "the body is not a tar archive that extracts here: %s", shfiles.ShellError(stderr))
	case code != 0:
		return fileError(shfiles.ExitWriteFailed, clean, stderr)
	}
	return nil
}
