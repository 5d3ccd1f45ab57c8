//go:build kubernetes

package kubernetes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/tetherhq/tether/provider"
	"github.com/tetherhq/tether/provider/outputcap"
)

// Defaults of an ExecRequest that sets none.
const (
	defaultExecTimeout = time.Minute
	defaultMaxOutput   = 1 << 20
)

// overrun is how long past an exec's timeout the provider waits for the
// pod's own timeout (execScript's) before it gives up on the stream and
// kills the command itself.
const overrun = 10 * time.Second

// running returns the pod of a sandbox that runs.
func (p *Provider) running(ctx context.Context, id string) (*corev1.Pod, error) {
	pod, err := p.client.CoreV1().Pods(p.cfg.Namespace).Get(ctx, PodName(id), metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && !p.ours(pod, id)) {
		return nil, provider.Errorf(provider.CodeProviderUnavailable, "sandbox %s has no pod any more; the janitor will mark it lost", id)
	}
	if err != nil {
		return nil, apiError("get pod", err)
	}
	if why := defunctReason(pod); why != "" {
		return nil, provider.Errorf(provider.CodeProviderUnavailable, "sandbox %s no longer runs (%s); the janitor will mark it lost", id, why)
	}
	return pod, nil
}

// baseEnv is the environment of every command the provider runs in a
// pod, before the sandbox's own (the pod's container env) and the
// request's: `env -i` clears whatever the image and the runtime set.
func (p *Provider) baseEnv() map[string]string {
	return map[string]string{
		"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME": p.cfg.WorkDir, "LANG": "C.UTF-8", "TERM": "dumb",
	}
}

// command is argv run in pod with an explicit environment: the base, the
// sandbox's, then extra's, and nothing else.
func (p *Provider) command(pod *corev1.Pod, extra map[string]string, argv ...string) []string {
	env := p.baseEnv()
	for _, c := range pod.Spec.Containers {
		if c.Name == containerName {
			for _, e := range c.Env {
				env[e.Name] = e.Value
			}
		}
	}
	for k, v := range extra {
		env[k] = v
	}
	out := make([]string, 0, 2+len(env)+len(argv))
	out = append(out, "env", "-i")
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out[2:])
	return append(out, argv...)
}

// stream runs argv in the pod's container through pods/exec: over a
// WebSocket, or SPDY where the API server (or a proxy) cannot upgrade to
// one. stdin may be nil. The error is what the stream reports: see
// exitStatus for the exit code in it.
func (p *Provider) stream(ctx context.Context, pod *corev1.Pod, argv []string, stdin io.Reader, stdout, stderr io.Writer) error {
	req := p.client.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: containerName, Command: argv, Stdin: stdin != nil, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(p.rest, "GET", req.URL().String())
	if err != nil {
		return fmt.Errorf("kubernetes: exec: %w", err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(p.rest, "POST", req.URL())
	if err != nil {
		return fmt.Errorf("kubernetes: exec: %w", err)
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return fmt.Errorf("kubernetes: exec: %w", err)
	}
	return ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Stderr: stderr})
}

// kwokExitStatus is the end of an exec error that carries an exit status
// only in its text.
var kwokExitStatus = regexp.MustCompile(`exit status ([0-9]{1,3})$`)

// exitStatus reads a finished exec's exit code from the stream's error:
// 0 for none; ok false if err is not an exit status (the exec failed).
//
// A kubelet reports a non-zero exit code as a status that client-go turns
// into exec.CodeExitError. kwok, which plays the nodes of the test
// cluster, runs the command itself and reports only the error's text,
// "... exit status 7": that text is read here, as a fallback, and nowhere
// else.
func exitStatus(err error) (code int, ok bool) {
	if err == nil {
		return 0, true
	}
	var ce utilexec.CodeExitError
	if errors.As(err, &ce) {
		return ce.Code, true
	}
	if m := kwokExitStatus.FindStringSubmatch(err.Error()); m != nil {
		if n, err := strconv.Atoi(m[1]); err == nil && n <= 255 {
			return n, true
		}
	}
	return 0, false
}

// execScript runs exec's command: $1 is a token naming the run, $2 its
// timeout in seconds, $3 the working directory,
// $4 the command, run as `sh -c` would (no positional parameters).
//
// The pod enforces the timeout, since a stream that Tether cancels does
// not end the command on a kubelet: a watcher signals the script (USR1)
// when it passes, and the script then stops and kills the command and
// every process under it and exits 124. killScript sends the same signal,
// through the pid file /tmp/.tether-exec-<token>. Once the command ends,
// processes left holding the exec's output (background ones that did not
// redirect it) are killed: the exec could not end while they hold it.
// Only its own processes are touched: those under the command, and those
// whose stdout or stderr is this exec's own pipe or socket (the -ef test;
// an output that is a shared file, such as /dev/null when the exec has no
// stdout, is never matched: under kwok, where execs run on the host, that
// would kill every process of the host writing to /dev/null), never the
// script's own ancestors. The scan must not redirect the script's own
// stderr (no "done 2>/dev/null"): /proc/$$/fd/2 would then be /dev/null
// and match every process whose stderr is /dev/null, such as another
// exec's script in its own scan.
const execScript = `tok=$1 t=$2 wd=$3
shift 3
pidf=/tmp/.tether-exec-$tok
echo $$ >"$pidf" 2>/dev/null
if [ -n "$wd" ]; then cd -- "$wd" || { rm -f -- "$pidf"; exit 1; }; fi
tree() {
	pairs=$(for f in /proc/[0-9]*/stat; do read -r l <"$f" || continue; r=${l##*")"}; set -- $r; f=${f#/proc/}; echo "${f%/stat} $2"; done 2>/dev/null)
	found=" $1 " more=1
	while [ "$more" = 1 ]; do
		more=0
		while read -r a b; do
			case $found in *" $a "*) continue ;; esac
			case $found in *" $b "*) found="$found$a " more=1 ;; esac
		done <<EOF
$pairs
EOF
	done
	echo "${found# $1 }"
}
ppid() { read -r l <"/proc/$1/stat" && r=${l##*")"} && set -- $r && echo "$2"; }
own() { [ -p "/proc/$$/fd/$1" ] || [ -S "/proc/$$/fd/$1" ]; }
holders() {
	o1=0 o2=0
	own 1 && o1=1
	own 2 && o2=1
	[ $o1$o2 = 00 ] && return
	up=" $$ " a=$$
	while a=$(ppid "$a" 2>/dev/null) && [ -n "$a" ] && [ "$a" -gt 1 ]; do up="$up$a "; done
	for d in /proc/[0-9]*; do
		case $up in *" ${d#/proc/} "*) continue ;; esac
		if { [ $o1 = 1 ] && [ "$d/fd/1" -ef /proc/$$/fd/1 ]; } || { [ $o2 = 1 ] && [ "$d/fd/2" -ef /proc/$$/fd/2 ]; }; then
			kill -KILL "${d#/proc/}" 2>/dev/null
		fi
	done
}
to=0
trap 'to=1' USR1
(trap - USR1; eval 'set --;' "$1") </dev/null &
c=$!
(exec >/dev/null 2>&1 </dev/null; trap 'kill $s 2>/dev/null; exit 0' TERM; sleep "$t" & s=$!; wait $s && kill -USR1 $$) &
w=$!
while :; do
	wait "$c"; s=$?
	[ "$to" = 1 ] && break
	kill -0 "$c" 2>/dev/null || break
done
kill "$w" 2>/dev/null
if [ "$to" = 1 ]; then
	kill -STOP "$c" $(tree "$c") 2>/dev/null
	kill -KILL "$c" $(tree "$c") 2>/dev/null
	wait "$c" 2>/dev/null
	s=124
fi
holders
rm -f -- "$pidf"
exit "$s"`

// killScript makes the exec of token ($1) time out now (see execScript),
// and waits (up to 5s) until it has: until its script removed its pid
// file, having killed the command, or is gone (a zombie, its state "Z",
// counts as gone). Signalling alone would return while the script still
// scans /proc, the command still running.
const killScript = `f=/tmp/.tether-exec-$1
p=$(cat "$f" 2>/dev/null) && [ -n "$p" ] && kill -USR1 "$p" 2>/dev/null || exit 0
i=0
while [ -e "$f" ] && [ $i -lt 100 ]; do
	read -r l <"/proc/$p/stat" 2>/dev/null || break
	r=${l##*")"}
	set -- $r
	[ "$1" = Z ] && break
	sleep 0.05
	i=$((i+1))
done
exit 0`

// Exec implements provider.Execer.
func (p *Provider) Exec(ctx context.Context, sandboxID string, req provider.ExecRequest) (provider.ExecResult, error) {
	pod, err := p.running(ctx, sandboxID)
	if err != nil {
		return provider.ExecResult{}, err
	}
	return p.exec(ctx, pod, req)
}

func (p *Provider) exec(ctx context.Context, pod *corev1.Pod, req provider.ExecRequest) (provider.ExecResult, error) {
	limit := outputLimit(req)
	var out []byte
	c := outputcap.New(limit, provider.Stderr, func(_ string, chunk []byte) error {
		out = append(out, chunk...)
		return nil
	})
	res, err := p.run(ctx, pod, req, c)
	if err != nil {
		return res, err
	}
	res.Output = string(out) // its bytes as they came: text or not
	return res, nil
}

// ExecStream implements provider.StreamExecer: stdout and stderr come as
// the exec's streams deliver them, through the output cap.
func (p *Provider) ExecStream(ctx context.Context, sandboxID string, req provider.ExecRequest, emit func(stream string, chunk []byte) error) (provider.ExecResult, error) {
	pod, err := p.running(ctx, sandboxID)
	if err != nil {
		return provider.ExecResult{}, err
	}
	return p.run(ctx, pod, req, outputcap.New(outputLimit(req), provider.Stderr, emit))
}

func outputLimit(req provider.ExecRequest) int {
	if req.MaxOutput <= 0 {
		return defaultMaxOutput
	}
	return req.MaxOutput
}

// run runs req in the pod under execScript, its output going through out.
// If ctx ends, out fails, or the pod's own timeout does not end the
// stream in time, the command is killed (killScript) and the stream
// abandoned.
func (p *Provider) run(ctx context.Context, pod *corev1.Pod, req provider.ExecRequest, out *outputcap.Cap) (provider.ExecResult, error) {
	var res provider.ExecResult
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = defaultExecTimeout
	}
	token := randomToken()
	sctx, cancel := context.WithTimeout(ctx, timeout+overrun)
	defer cancel()
	sink := &capSink{out: out, cancel: cancel}
	wd := req.WorkDir
	if wd == "" {
		wd = p.cfg.WorkDir // the container's too; said, for runtimes that start execs elsewhere
	}
	argv := p.command(pod, req.Env, "/bin/sh", "-c", execScript, "sh", token,
		strconv.FormatFloat(timeout.Seconds(), 'f', 3, 64), wd, req.Command)
	start := time.Now()
	err := p.stream(sctx, pod, argv, nil, sink.writer(provider.Stdout), sink.writer(provider.Stderr))
	elapsed := time.Since(start)
	code, exited := exitStatus(err)
	switch {
	case sink.failed() != nil:
		p.kill(ctx, pod, token)
		return res, fmt.Errorf("kubernetes: exec: passing output on: %w", sink.failed())
	case ctx.Err() != nil:
		p.kill(ctx, pod, token)
		return res, fmt.Errorf("kubernetes: exec: %w", ctx.Err())
	case sctx.Err() != nil:
		// The pod did not end it at its timeout: Tether does.
		p.kill(ctx, pod, token)
		res.TimedOut, res.ExitCode = true, 124
	case !exited:
		return res, provider.Errorf(provider.CodeProviderUnavailable, "exec in pod %s failed: %v", pod.Name, err)
	case code == 124 && elapsed >= timeout:
		// execScript's timeout (a command that exits 124 by itself does so
		// before its timeout).
		res.TimedOut, res.ExitCode = true, 124
	default:
		res.ExitCode = code
	}
	if res.Truncated, err = out.Finish(); err != nil {
		return res, fmt.Errorf("kubernetes: exec: passing output on: %w", err)
	}
	return res, nil
}

// kill makes the exec of token time out now, best effort, and returns
// once it has (killScript).
func (p *Provider) kill(ctx context.Context, pod *corev1.Pod, token string) {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = p.stream(kctx, pod, p.command(pod, nil, "/bin/sh", "-c", killScript, "sh", token), nil, io.Discard, io.Discard)
}

func randomToken() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// capSink feeds an exec's two streams, which client-go writes from
// goroutines of their own, into one output cap, one write at a time. Once
// the cap fails (a streaming client went away) it cancels the stream.
type capSink struct {
	mu     sync.Mutex
	out    *outputcap.Cap
	err    error
	cancel context.CancelFunc
}

func (s *capSink) writer(stream string) io.Writer {
	return writerFunc(func(b []byte) (int, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.err != nil {
			return 0, s.err
		}
		if err := s.out.Write(stream, b); err != nil {
			s.err = err
			s.cancel()
			return 0, err
		}
		return len(b), nil
	})
}

func (s *capSink) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
