package provider

import (
	"context"
	"time"
)

// Processes is the optional capability of running processes in the
// background of a sandbox: started at once and answering with their pid,
// listed, attached to (their output from now, or from the start of what
// is kept of it) by several callers at once, written to, signalled. A
// process belongs to the sandbox, not to the call that started it nor to
// the Tether process: it runs on when the caller goes away or Tether
// restarts (a second provider value over the same state finds it), and
// ends with the sandbox.
//
// A provider keeps a bounded window of each process's output (the local
// provider: the last MiB) and a bounded number of processes per sandbox,
// running ones and those that ended recently (kept a while, 60 s in the
// local provider, so that a late attach still learns how one ended);
// what fell out of the window is counted, never silently lost.
//
// Every method returns, like the other optional capabilities, an *Error
// with CodeProviderUnavailable for a sandbox the provider does not hold or
// that no longer runs; a selector that names no process it keeps,
// CodeProcessNotFound.
type Processes interface {
	// StartProcess starts spec in the sandbox and returns as soon as the
	// process runs, with its pid. A spec the provider cannot start (no
	// argv, a command or working directory that does not exist, a PTY from
	// a provider without the PTY capability: CodeNotSupported) is
	// CodeInvalidRequest; a sandbox that already runs as many processes
	// as the provider keeps, or is at its own process limit, is
	// CodeQuotaExceeded.
	StartProcess(ctx context.Context, sandboxID string, spec ProcessSpec) (ProcessInfo, error)
	// ListProcesses returns the processes the provider keeps for the
	// sandbox, running and recently ended, each with the spec it was
	// started with, oldest first.
	ListProcesses(ctx context.Context, sandboxID string) ([]ProcessInfo, error)
	// AttachProcess passes the selected process's events to emit, never
	// concurrently and never after it returns: a start event first (its
	// pid), then its output from where from says (a dropped event where
	// output fell out of the window before it could be passed on, which
	// says how much), then an end event once it ended. It returns nil
	// after the end event, ctx's error once ctx ends, emit's error if emit
	// fails, and CodeProviderUnavailable if the sandbox ends meanwhile
	// (its processes with it; no end event then). A process that ended
	// but is still kept is answered at once: start, what from asks for,
	// end. Several attaches to one process may run at once, each getting
	// every event; an attach neither holds up the process (its output is
	// kept in the window while the caller is slow) nor ends it.
	AttachProcess(ctx context.Context, sandboxID string, sel ProcessSelector, from AttachFrom, emit func(ProcessEvent) error) error
	// WriteStdin writes data to the process's stdin (ProcessSpec.Stdin),
	// or to its terminal (ProcessSpec.PTY) as if typed. A process without
	// stdin, or whose stdin was closed, is CodeInvalidRequest; one that
	// has ended, CodeProcessNotFound.
	WriteStdin(ctx context.Context, sandboxID string, sel ProcessSelector, data []byte) error
	// CloseStdin closes the process's stdin: it reads end of file. Closing
	// it again is success. A process without stdin, or with a terminal
	// (which ends input with ^D, "\x04", written to it), is
	// CodeInvalidRequest; one that has ended, CodeProcessNotFound.
	CloseStdin(ctx context.Context, sandboxID string, sel ProcessSelector) error
	// SignalProcess sends signal (a Linux signal number, 1 to 64) to the
	// process and the processes of its process group. A signal out of
	// that range is CodeInvalidRequest; a process that has ended,
	// CodeProcessNotFound.
	SignalProcess(ctx context.Context, sandboxID string, sel ProcessSelector, signal int) error
}

// The service's settings a provider with processes reads (declared in its
// Registration's Uses): how many processes a sandbox keeps at once, and
// how many bytes of each one's latest output. Empty (a test's settings):
// the provider's own defaults.
const (
	SettingProcessMax    = "PROCESS_MAX_PER_SANDBOX"
	SettingProcessOutput = "PROCESS_OUTPUT_BYTES"
)

// PTY is the optional capability of giving a process a pseudo-terminal
// (ProcessSpec.PTY): its stdin, stdout and stderr are the terminal, its
// output comes as PTYOutput events, WriteStdin types into it, and its
// size can change. A provider with it also has Processes.
type PTY interface {
	// ResizePTY sets the terminal's size (the process gets SIGWINCH), which
	// ListProcesses reports from then on. A process without a terminal, or
	// a size with a zero or over 65535 dimension, is CodeInvalidRequest;
	// one that has ended, CodeProcessNotFound.
	ResizePTY(ctx context.Context, sandboxID string, sel ProcessSelector, size PTYSize) error
}

// ProcessSelector names one process of a sandbox: by PID when it is
// not zero, else by Tag (the most recently started process with that
// tag, a running one before one that ended).
type ProcessSelector struct {
	PID int
	Tag string
}

// ProcessSpec is a process to start.
//
// The process runs Argv directly (no shell; Argv[0] is looked up in the
// PATH of its environment when it has no slash) with an explicit
// environment: the provider's base (PATH, HOME, LANG and TERM in the local
// provider), the sandbox's own (CreateSpec.Env), then Env, and never
// anything of the Tether process's.
type ProcessSpec struct {
	Argv []string
	Env  map[string]string
	// Cwd is where it starts, an absolute path; empty: the sandbox's
	// working directory.
	Cwd string
	// Tag is a name of the caller's choice to select it by; several
	// processes may share one.
	Tag string
	// PTY, when set, gives the process a terminal of that size (providers
	// with the PTY capability only; TERM defaults to xterm-256color).
	PTY *PTYSize
	// Stdin, when set, gives the process a stdin to write to
	// (WriteStdin, CloseStdin); otherwise it reads /dev/null. A process
	// with a PTY reads the terminal whatever Stdin says.
	Stdin bool
	// Timeout, when not zero, bounds the process's life: at its end the
	// process and its process group are killed (SIGKILL).
	Timeout time.Duration
}

// PTYSize is a terminal's size in characters.
type PTYSize struct {
	Rows, Cols int
}

// ProcessInfo is a process the provider keeps, as it was started and as
// it is now.
type ProcessInfo struct {
	// PID is the process's id inside the sandbox.
	PID  int
	Tag  string
	Argv []string
	Env  map[string]string
	Cwd  string
	// PTY is its terminal's size now (the last ResizePTY's, else the
	// start's); nil without a terminal.
	PTY   *PTYSize
	Stdin bool
	// StartedAt is when it started.
	StartedAt time.Time
	// Running is true until it ends; Exit then says how.
	Running bool
	Exit    *ProcessExit
	// Kept is how many bytes of its output the window holds, Dropped how
	// many fell out of it from the start: Dropped plus Kept bytes were
	// written in all.
	Kept, Dropped int64
}

// ProcessExit is how a process ended.
type ProcessExit struct {
	// Code is its exit status, or -1 when a signal ended it.
	Code int
	// Signal is the signal that ended it, if one did.
	Signal int
	// Exited is true when it exited (rather than a signal ending it).
	Exited bool
	// Status says it in words: "exit status 3", "signal: killed".
	Status string
}

// AttachFrom is where an attach starts passing a process's output on.
type AttachFrom int

const (
	// AttachNow passes on only the output that comes after the attach.
	AttachNow AttachFrom = iota
	// AttachStart passes on all the output the window still keeps first:
	// from the process's start if nothing fell out of it yet.
	AttachStart
)

// ProcessEventKind is what a ProcessEvent says.
type ProcessEventKind string

// The kinds of process events.
const (
	// ProcessStart comes first on every attach, with the process's PID.
	ProcessStart ProcessEventKind = "start"
	// ProcessStdout, ProcessStderr and ProcessPTYOutput carry output, in
	// Data, from Offset on.
	ProcessStdout    ProcessEventKind = "stdout"
	ProcessStderr    ProcessEventKind = "stderr"
	ProcessPTYOutput ProcessEventKind = "pty"
	// ProcessDropped says that Dropped bytes of output, up to Offset, fell
	// out of the window before they could be passed on.
	ProcessDropped ProcessEventKind = "dropped"
	// ProcessEnd comes last, with Exit.
	ProcessEnd ProcessEventKind = "end"
)

// ProcessEvent is one event of an attach.
type ProcessEvent struct {
	Kind ProcessEventKind
	// PID is the process's, on a start event.
	PID int
	// Data is a chunk of output; Offset is where it starts in all the
	// process's output (stdout and stderr, or the terminal's, counted
	// together from 0).
	Data   []byte
	Offset int64
	// Dropped is, on a dropped event, how many bytes were lost just
	// before Offset.
	Dropped int64
	// Exit is how the process ended, on an end event.
	Exit *ProcessExit
}

// FileWatcher is the optional capability of watching a folder in a
// sandbox for changes (provider.Watcher is the resource watch).
type FileWatcher interface {
	// WatchFiles watches the folder at path (an absolute path in the
	// sandbox) and passes what changes in it to emit, never concurrently
	// and never after it returns: a start event first, once the watch is
	// armed (a change made after emit returned from it is seen), then one
	// event per change, its Path relative to the folder. With recursive,
	// folders below it are watched too, those made later included. It
	// returns ctx's error once ctx ends, emit's error if emit fails, and
	// CodeProviderUnavailable if the sandbox ends. A missing folder is
	// CodeFileNotFound; a path that is not a folder, CodeInvalidPath.
	WatchFiles(ctx context.Context, sandboxID, path string, recursive bool, emit func(FileEvent) error) error
}

// FileEventKind is what a FileEvent says.
type FileEventKind string

// The kinds of file events.
const (
	// FileWatchStart comes first: the watch is armed.
	FileWatchStart FileEventKind = "start"
	// FileCreate: a file or folder was made, or moved in (under its new
	// name).
	FileCreate FileEventKind = "create"
	// FileWrite: a file was written to.
	FileWrite FileEventKind = "write"
	// FileRemove: a file or folder was removed.
	FileRemove FileEventKind = "remove"
	// FileRename: a file or folder was moved away from this name (its new
	// name, if in the watched folder, comes as a create).
	FileRename FileEventKind = "rename"
	// FileChmod: its mode, owner or times changed.
	FileChmod FileEventKind = "chmod"
)

// FileEvent is one change in a watched folder.
type FileEvent struct {
	Kind FileEventKind
	// Path is relative to the watched folder ("a.txt", "sub/b.txt");
	// empty on the start event.
	Path  string
	IsDir bool
	At    time.Time
}
