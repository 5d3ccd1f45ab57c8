package provider

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"time"
)

// Provider creates and destroys the resources behind sandboxes. Tether calls
// a provider only from the executor, the janitor and the data-plane
// endpoints, always with a context that carries cancellation and a deadline.
//
// Every resource a provider holds for Tether is named or labelled with the
// sandbox id, so that List can find resources whose creation Tether no
// longer remembers (a crash between the provider call and the commit).
type Provider interface {
	// Name is the provider's name as clients select it ("sim", "local").
	Name() string

	// Info describes the provider for GET /v1/providers.
	Info(ctx context.Context) Info

	// ValidateParams checks the provider-specific params of a create request
	// before anything is written. It returns an *Error with
	// CodeInvalidRequest for params the provider does not accept, and
	// CodeForbidden for params the operator has not allowed. Null or empty
	// params are the provider's defaults.
	ValidateParams(params json.RawMessage) error

	// Create makes the resource for spec.SandboxID. It is idempotent on the
	// sandbox id: calling it again for a sandbox that already has a resource
	// returns that resource and creates nothing. Errors marked with Retryable
	// are worth another attempt; any other error fails the sandbox.
	Create(ctx context.Context, spec CreateSpec) (Resource, error)

	// Destroy removes every resource held for the sandbox. It is idempotent:
	// a sandbox with nothing left, or one the provider never made, is
	// success.
	Destroy(ctx context.Context, sandboxID string) error

	// List returns every resource the provider holds for Tether (this
	// installation: another Tether's resources, or another state of the
	// same provider, are not listed), found from the provider's own state,
	// not from what this process remembers.
	List(ctx context.Context) ([]Resource, error)
}

// HostBound is implemented by providers whose resources live on the host
// Tether runs on (local): their sandboxes belong to the node that created
// them, and only that node creates, releases, reconciles and reaches them.
// A provider that does not implement it (sim, remote providers) is reached
// the same way from every node.
type HostBound interface {
	HostBound() bool
}

// IsHostBound reports whether p is a host-bound provider.
func IsHostBound(p Provider) bool {
	hb, ok := p.(HostBound)
	return ok && hb.HostBound()
}

// CreateSpec is what a provider needs to create a sandbox.
type CreateSpec struct {
	SandboxID string
	Tenant    string
	Labels    map[string]string
	Env       map[string]string
	// Setup is a shell script run inside the sandbox before it counts as
	// ready; a failure fails the sandbox.
	Setup  string
	Params json.RawMessage
	// EndBy is the latest the sandbox may live: its creation plus the
	// server's MAX_LIFETIME, which no renewal extends. A provider that can
	// make its resource end on its own (a pod's activeDeadlineSeconds)
	// sets that backstop from it, so that the resource ends even if Tether
	// does not. Zero: no cap is known.
	EndBy time.Time
	// FromSnapshot, when set, names a snapshot this provider took
	// (Snapshotter.Snapshot) that the sandbox starts from: its /workspace
	// holds the snapshot's files instead of starting empty. Tether sets it
	// only for a provider with the Snapshotter capability and a snapshot
	// it recorded ready. A snapshot the provider no longer has is an
	// error that is not Retryable.
	FromSnapshot string
	// Epoch is the fencing token of the claim this call runs under: it
	// grows with every claim of the sandbox, so two calls for one sandbox
	// with the same Epoch come from one claim, and a call with a lower
	// one from a claim since superseded. Tether guarantees at most one
	// resource per sandbox without the provider's help; a provider may log
	// Epoch, or use it to refuse a stale call. Zero outside Tether's
	// executor (tests, tools).
	Epoch int64
}

// Resource is what a provider holds for one sandbox.
type Resource struct {
	SandboxID string
	// ProviderID is the provider's own name for the resource.
	ProviderID string
	// WorkDir is the working directory inside the sandbox, if it has one.
	WorkDir   string
	CreatedAt time.Time
	// Defunct is set when the provider still holds remains of the sandbox
	// but it no longer runs: a ready sandbox in that state is lost.
	Defunct bool
	// Reason says, in the provider's words, why a defunct resource no
	// longer runs (a pod's status reason and message); it goes into the
	// history of a sandbox that ends lost.
	Reason string
}

// Watcher is the optional capability of noticing at once that a
// sandbox's resource stopped running or vanished (a pod deleted behind
// Tether's back), rather than at the janitor's next listing.
type Watcher interface {
	// Watch sends, until ctx ends, the resources that became defunct,
	// Defunct set and Reason saying why (a vanished one too), then closes
	// the channel. It may drop events when the channel is full: the
	// janitor's listing still finds those.
	Watch(ctx context.Context) <-chan Resource
	// Lookup returns the sandbox's resource as it is now (found false if
	// there is none), so that a watched event can be checked before it
	// ends the sandbox.
	Lookup(ctx context.Context, sandboxID string) (res Resource, found bool, err error)
}

// Info is a provider's self-description.
type Info struct {
	Name string
	// Available is false when the provider cannot create sandboxes on this
	// host; Reason then says why.
	Available bool
	Reason    string
	// Exec and Files report the optional data-plane capabilities.
	Exec  bool
	Files bool
	// Processes, PTY and Watch report the capabilities Processes, PTY
	// and FileWatcher: what this provider, as configured, offers (a
	// provider may implement an interface and still report false, its
	// host or settings not allowing it).
	Processes bool
	PTY       bool
	Watch     bool
	WorkDir   string
	// Images are the root file systems a create may ask for by name (the
	// local provider's params.image); none for most providers.
	Images []Image
	// Notes describe host-specific limits (cgroups, network) in prose.
	Notes []string
}

// Image is a root file system the operator registered with a
// provider.
type Image struct {
	// Name is what a create asks for.
	Name string
	// Source is "folder" or "tarball": what the operator registered.
	Source string
}

// ExecRequest is a shell command to run inside a ready sandbox.
//
// The command runs as sh -c Command with an explicit environment: the
// sandbox's own (CreateSpec.Env) plus Env, and never anything of the Tether
// process's. It runs in WorkDir, or the sandbox's working directory when
// WorkDir is empty.
type ExecRequest struct {
	Command string
	// Timeout bounds the command: at its end the command and what it
	// started are killed, and the call returns with TimedOut set and
	// ExitCode 124.
	Timeout time.Duration
	Env     map[string]string
	WorkDir string
	// MaxOutput caps the combined output kept, in bytes. Longer output is
	// cut and Truncated set: a provider keeps its head and its tail, with a
	// marker between them that says how many bytes were left out (the
	// local provider's is "\n[tether: N bytes of output omitted]\n"), all
	// within MaxOutput.
	MaxOutput int
}

// ExecResult is the outcome of an ExecRequest.
type ExecResult struct {
	// Output is the command's combined output, its bytes exactly as the
	// command wrote them: not necessarily UTF-8 (a binary stream), which
	// Tether encodes for its clients as they ask.
	Output    string
	ExitCode  int
	Truncated bool
	TimedOut  bool
	// OOMKilled is set when the sandbox's memory limit killed a process
	// while the command ran.
	OOMKilled bool
}

// Execer is the optional capability of running commands in a sandbox.
//
// Exec, like every optional capability, returns an *Error with
// CodeProviderUnavailable for a sandbox the provider does not hold or that
// no longer runs: Tether calls it only for sandboxes it counts as ready, so
// such a sandbox was lost, and the janitor will say so.
type Execer interface {
	Exec(ctx context.Context, sandboxID string, req ExecRequest) (ExecResult, error)
}

// Pauser is the optional capability of pausing a ready sandbox (its
// processes stop running, keeping their memory and files) and resuming a
// paused one. Tether calls it, under a lease, for a sandbox that is
// pausing or resuming. Both are idempotent: pausing a paused sandbox, or
// resuming a running one, is success. An error means the sandbox is as it
// was before the call (a failed Pause leaves it running, a failed Resume
// leaves it paused); errors marked Retryable are worth another attempt.
// Destroy must work on a paused sandbox.
type Pauser interface {
	Pause(ctx context.Context, sandboxID string) error
	Resume(ctx context.Context, sandboxID string) error
}

// Snapshotter is the optional capability of keeping a copy of a
// sandbox's workspace (its /workspace, or the provider's equivalent) that
// outlives the sandbox, and of starting new sandboxes from it
// (CreateSpec.FromSnapshot). Tether calls Snapshot under a lease on the
// sandbox, for a ready or paused sandbox, or for an ended one before its
// release destroys it (an exit snapshot).
type Snapshotter interface {
	// Snapshot copies the sandbox's workspace into the snapshot
	// snapshotID, consistently (as of one moment, even while processes
	// write), and returns its size in bytes as stored. It is idempotent
	// on snapshotID: calling it again replaces what an interrupted call
	// left. Nothing of a failed call may be listed as a complete snapshot.
	Snapshot(ctx context.Context, sandboxID, snapshotID string) (size int64, err error)
	// DeleteSnapshot removes the snapshot. It is idempotent: a snapshot
	// that is gone, or was never made, is success.
	DeleteSnapshot(ctx context.Context, snapshotID string) error
	// ListSnapshots returns every snapshot the provider holds for this
	// installation, complete or not, from the provider's own state.
	ListSnapshots(ctx context.Context) ([]SnapshotInfo, error)
}

// MemorySnapshotter is the optional capability of snapshotting a whole
// running machine: its memory and device state with its disks, as of one
// moment. A create from such a snapshot (CreateSpec.FromSnapshot) resumes
// the captured processes where they were, each copy with an identity of
// its own (host name, machine id, a reseeded random generator, the
// current time). The sandbox is stopped only while the state is saved,
// then runs on (a paused one stays paused). Its snapshots are listed,
// deleted and retained like a Snapshotter's, which a MemorySnapshotter
// also is.
type MemorySnapshotter interface {
	Snapshotter
	SnapshotMemory(ctx context.Context, sandboxID, snapshotID string) (size int64, err error)
}

// SnapshotInfo is one snapshot a provider holds.
type SnapshotInfo struct {
	ID        string
	SandboxID string
	Size      int64
	CreatedAt time.Time
	// Partial is set for the remains of a Snapshot call that did not
	// finish: never a usable snapshot.
	Partial bool
}

// Archives is the optional capability of moving whole folders in and out
// of a sandbox as tar archives, with the same path rules and errors as
// Files.
type Archives interface {
	// ReadArchive streams the folder at path as a tar archive into w,
	// members named relative to the folder. A missing folder is
	// CodeFileNotFound; a path that is not a folder, CodeInvalidPath.
	// Tether bounds what it passes on itself.
	ReadArchive(ctx context.Context, sandboxID, path string, w io.Writer) error
	// WriteArchive extracts the tar archive read from r into the folder at
	// path (made if missing), refusing more than limit bytes of archive.
	// Nothing of a refused or broken archive is left in the folder; what
	// was there already stays unless the archive replaces it. A body that
	// is not a tar archive is CodeInvalidRequest; one over limit bytes,
	// CodePayloadTooLarge.
	WriteArchive(ctx context.Context, sandboxID, path string, r io.Reader, limit int64) error
}

// Output streams of a command.
const (
	Stdout = "stdout"
	Stderr = "stderr"
)

// StreamExecer is the optional capability of running a command while its
// output is passed on as it is produced.
type StreamExecer interface {
	// ExecStream runs the command like Exec, calling emit with each chunk
	// of output (stream is Stdout or Stderr), never concurrently and never
	// after it returns. Chunks are passed on as they appear, up to a part
	// of req.MaxOutput (the local provider: half); the rest may be held
	// and passed on when the command ends, cut like Exec's output (head,
	// marker, tail, at most req.MaxOutput bytes in all; Truncated is then
	// set). The result's Output is empty. If emit fails, or ctx ends, the
	// command is killed.
	ExecStream(ctx context.Context, sandboxID string, req ExecRequest, emit func(stream string, chunk []byte) error) (ExecResult, error)
}

// Files is the optional capability of reading and writing files in a
// sandbox. Paths are absolute paths inside the sandbox.
type Files interface {
	// WriteFile streams r into path, refusing more than limit bytes
	// (CodePayloadTooLarge). Missing parent folders are made. The file is
	// replaced only once the whole of r arrived: a failed or refused write
	// leaves the previous file as it was. A directory at path is
	// CodeIsDirectory; a path the provider does not let clients write is
	// CodeInvalidPath.
	WriteFile(ctx context.Context, sandboxID, path string, r io.Reader, limit int64) error
	// ReadFile streams the file at path into w. A missing file is
	// CodeFileNotFound.
	// A file over limit bytes is CodePayloadTooLarge, and no more than limit
	// bytes are ever sent.
	ReadFile(ctx context.Context, sandboxID, path string, w io.Writer, limit int64) error
}

// PortDialer is the optional capability of connecting to a TCP port
// inside a sandbox, where a process the sandbox runs listens on its own
// loopback (python3 -m http.server 8000). Tether proxies HTTP and
// WebSocket traffic over the connections it makes
// (/v1/sandboxes/{id}/ports/{port}/..., preview URLs).
type PortDialer interface {
	// DialPort connects to 127.0.0.1:port as the sandbox sees it: in the
	// sandbox's own network, never the host's and never another
	// sandbox's, whatever the sandbox's network mode. The connection is
	// the caller's to close; ctx bounds the dial only. Nothing listening
	// there (refused, or no answer before ctx ends) is an *Error with
	// CodePortUnreachable; a sandbox the provider does not hold, or that
	// no longer runs, CodeProviderUnavailable. port is 1-65535.
	DialPort(ctx context.Context, sandboxID string, port int) (net.Conn, error)
}
