package local

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tetherhq/tether/internal/sandbox"
)

// running returns the metadata of a sandbox whose init runs.
func (p *Provider) running(id string) (meta, error) {
	if p.problem != "" {
		return meta{}, sandbox.Errorf(sandbox.CodeProviderUnavailable, "the local provider is unavailable: %s", p.problem)
	}
	m, err := p.readMeta(id)
	if err != nil || !m.alive() {
		return meta{}, sandbox.Errorf(sandbox.CodeProviderUnavailable,
			"sandbox %s no longer runs on this host; the janitor will mark it lost", id)
	}
	return m, nil
}

// command returns a command that runs argv inside the sandbox: in its
// namespaces and root, with every capability dropped and no_new_privs, and
// only the sandbox's environment (plus extra).
func (p *Provider) command(m meta, extra map[string]string, argv ...string) *exec.Cmd {
	env := map[string]string{"PATH": defaultPath, "HOME": WorkDir, "TERM": "dumb", "LANG": "C.UTF-8"}
	for k, v := range m.Env {
		env[k] = v
	}
	for k, v := range extra {
		env[k] = v
	}
	// Into the sandbox's user namespace as its user: no capabilities there,
	// and none on the host.
	uid := strconv.Itoa(SandboxUID)
	args := []string{"--target", strconv.Itoa(m.InitPID), "--user", "--pid", "--mount", "--ipc", "--uts", "--net", "--root", "-w",
		"--setuid", uid, "--setgid", uid, "--", p.setpriv, "--no-new-privs", "--", "env", "-i"}
	for k, v := range env {
		args = append(args, k+"="+v)
	}
	//nolint:noctx // run kills the whole process group when its context ends; CommandContext would kill only nsenter
	cmd := exec.Command(p.nsenter, append(args, argv...)...)
	// nsenter's child is in the sandbox before it runs setpriv and env -i:
	// it must not carry Tether's environment in there.
	cmd.Env = sandboxEnv()
	// A process group of its own, so a timeout can kill the command and
	// everything it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// run starts cmd and waits for it, killing its process group when ctx ends.
// It reports whether ctx ended it.
func run(ctx context.Context, cmd *exec.Cmd) (killed bool, err error) {
	if err := cmd.Start(); err != nil {
		return false, err
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		return false, err
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		return true, <-waited
	}
}

// Exec implements sandbox.Execer.
func (p *Provider) Exec(ctx context.Context, sandboxID string, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	m, err := p.running(sandboxID)
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	return p.exec(ctx, m, req)
}

func (p *Provider) exec(ctx context.Context, m meta, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	var res sandbox.ExecResult
	// Output goes to a file, not a pipe: background processes the command
	// starts may keep it open, and must neither block the response nor die
	// of SIGPIPE when it is sent.
	out, err := os.CreateTemp(p.sandboxDir(m.SandboxID), "exec-*.out")
	if err != nil {
		return res, fmt.Errorf("local: exec: %w", err)
	}
	defer func() { _ = os.Remove(out.Name()) }()
	defer func() { _ = out.Close() }()

	script := req.Command
	argv := []string{"sh", "-c", script}
	if req.WorkDir != "" {
		argv = []string{"sh", "-c", `cd -- "$0" || exit 1; exec sh -c "$1"`, req.WorkDir, script}
	}
	cmd := p.command(m, req.Env, argv...)
	cmd.Stdin = nil
	cmd.Stdout, cmd.Stderr = out, out

	timeout := req.Timeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	killed, err := run(tctx, cmd)
	var exitErr *exec.ExitError
	switch {
	case killed && ctx.Err() != nil:
		return res, fmt.Errorf("local: exec: %w", ctx.Err())
	case killed:
		res.TimedOut, res.ExitCode = true, 124
	case errors.As(err, &exitErr):
		res.ExitCode = exitErr.ExitCode()
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.ExitCode = 128 + int(ws.Signal())
		}
	case err != nil:
		return res, fmt.Errorf("local: exec: %w", err)
	}

	limit := req.MaxOutput
	if limit <= 0 {
		limit = 1 << 20
	}
	buf := make([]byte, limit+1)
	n, err := out.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return res, fmt.Errorf("local: exec: reading output: %w", err)
	}
	if n > limit {
		n, res.Truncated = limit, true
	}
	res.Output = strings.ToValidUTF8(string(buf[:n]), "\uFFFD")
	return res, nil
}

// writableRoots are where a sandbox may write.
var writableRoots = []string{WorkDir, "/tmp"}

// checkPath validates a path inside the sandbox: absolute, clean, no NUL.
func checkPath(p string) (string, error) {
	if p == "" || !strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) {
		return "", sandbox.Errorf(sandbox.CodeInvalidPath, "path must be an absolute path inside the sandbox")
	}
	return path.Clean(p), nil
}

func writable(p string) bool {
	for _, root := range writableRoots {
		if strings.HasPrefix(p, root+"/") {
			return true
		}
	}
	return false
}

// limitedReader fails once more than limit bytes were read.
type limitedReader struct {
	r        io.Reader
	left     int64
	exceeded bool
}

var errTooLarge = errors.New("file exceeds the size limit")

func (l *limitedReader) Read(b []byte) (int, error) {
	if l.left < 0 {
		l.exceeded = true
		return 0, errTooLarge
	}
	if int64(len(b)) > l.left+1 {
		b = b[:l.left+1]
	}
	n, err := l.r.Read(b)
	l.left -= int64(n)
	if l.left < 0 {
		l.exceeded = true
		return n, errTooLarge
	}
	return n, err
}

// Exit codes of the file scripts, each a kind of file error.
const (
	exitNotFound     = 3
	exitIsDirectory  = 4
	exitDenied       = 5
	exitInvalidPath  = 6
	exitWriteFailed  = 7
	fileScriptPrefix = `set -u; p=$1; `
)

// fileError turns a file script's exit code into the file error it means.
func fileError(code int, clean, stderr string) error {
	switch code {
	case exitNotFound:
		return sandbox.Errorf(sandbox.CodeFileNotFound, "no file at %s in the sandbox", clean)
	case exitIsDirectory:
		return sandbox.Errorf(sandbox.CodeIsDirectory, "%s is a directory", clean)
	case exitDenied:
		return sandbox.Errorf(sandbox.CodePermissionDenied, "the sandbox user may not access %s", clean)
	case exitInvalidPath:
		return sandbox.Errorf(sandbox.CodeInvalidPath, "%s is not a regular file, or a folder on its way is not a folder", clean)
	}
	return sandbox.Errorf(sandbox.CodeInvalidRequest, "cannot access %s: %s", clean, shellError(stderr))
}

// stageScript makes the file's folder and writes stdin to a temporary file
// beside it, checking first what the path holds.
const stageScript = fileScriptPrefix + `tmp=$2; d=$(dirname -- "$p")
[ -d "$p" ] && exit 4
if [ ! -d "$d" ]; then
	err=$(mkdir -p -- "$d" 2>&1) || case $err in
		*"ermission denied"*) exit 5 ;;
		*) exit 6 ;;
	esac
fi
[ -w "$d" ] || exit 5
[ ! -e "$p" ] || [ -f "$p" ] || exit 6
[ ! -e "$p" ] || [ -w "$p" ] || exit 5
cat > "$tmp" || { rm -f -- "$tmp"; exit 7; }`

// WriteFile implements sandbox.Files. The write happens inside the sandbox,
// as the sandbox's own processes would make it, so its read-only mounts and
// symlinks mean what they mean there. The body goes to a temporary file
// beside the target, which replaces the target only once the whole body
// arrived within the limit: a failed or rejected upload leaves the old file
// as it was and no partial one.
func (p *Provider) WriteFile(ctx context.Context, sandboxID, filePath string, r io.Reader, limit int64) error {
	clean, err := checkPath(filePath)
	if err != nil {
		return err
	}
	if !writable(clean) {
		return sandbox.Errorf(sandbox.CodeInvalidPath, "path %s is outside the sandbox's writable areas (%s)", clean, strings.Join(writableRoots, ", "))
	}
	m, err := p.running(sandboxID)
	if err != nil {
		return err
	}
	tmp := path.Join(path.Dir(clean), ".tether-upload-"+randomSuffix()+"-"+path.Base(clean))
	body := &limitedReader{r: r, left: limit}
	var stderr bytes.Buffer
	cmd := p.command(m, nil, "sh", "-c", stageScript, "sh", clean, tmp)
	cmd.Stdin, cmd.Stderr = body, &stderr
	_, err = run(ctx, cmd)
	discard := func() {
		rm := p.command(m, nil, "rm", "-f", "--", tmp)
		_, _ = run(context.WithoutCancel(ctx), rm)
	}
	var exitErr *exec.ExitError
	switch {
	case body.exceeded:
		discard()
		return sandbox.Errorf(sandbox.CodePayloadTooLarge, "file exceeds the %d-byte limit", limit)
	case ctx.Err() != nil:
		discard()
		return fmt.Errorf("local: write file: %w", ctx.Err())
	case errors.As(err, &exitErr):
		discard()
		return fileError(exitErr.ExitCode(), clean, stderr.String())
	case err != nil:
		discard()
		return fmt.Errorf("local: write file: %w", err)
	}
	stderr.Reset()
	mv := p.command(m, nil, "mv", "-f", "--", tmp, clean)
	mv.Stderr = &stderr
	if _, err := run(context.WithoutCancel(ctx), mv); err != nil {
		discard()
		if errors.As(err, &exitErr) {
			return fileError(exitWriteFailed, clean, stderr.String())
		}
		return fmt.Errorf("local: write file: %w", err)
	}
	return nil
}

// readScript checks what the path holds, then streams it.
const readScript = fileScriptPrefix + `[ -e "$p" ] || exit 3
[ -d "$p" ] && exit 4
[ -f "$p" ] || exit 6
[ -r "$p" ] || exit 5
exec cat -- "$p"`

// ReadFile implements sandbox.Files.
func (p *Provider) ReadFile(ctx context.Context, sandboxID, filePath string, w io.Writer) error {
	clean, err := checkPath(filePath)
	if err != nil {
		return err
	}
	m, err := p.running(sandboxID)
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	cmd := p.command(m, nil, "sh", "-c", readScript, "sh", clean)
	cmd.Stdout, cmd.Stderr = w, &stderr
	_, err = run(ctx, cmd)
	if ctx.Err() != nil {
		return fmt.Errorf("local: read file: %w", ctx.Err())
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		return fileError(exitErr.ExitCode(), clean, stderr.String())
	}
	if err != nil {
		return fmt.Errorf("local: read file: %w", err)
	}
	return nil
}

// randomSuffix returns a short random hex string.
func randomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// shellError extracts the reason from a shell error line such as
// "sh: 1: cannot create /x: Read-only file system".
func shellError(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndex(s, ": "); i >= 0 {
		return s[i+2:]
	}
	if s == "" {
		return "failed"
	}
	return s
}
