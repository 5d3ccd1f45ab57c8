package local

// The wire of the exec server's process supervisor (supervisor.go): the
// requests Tether sends it and the frames it answers with, both sides'.
// A request is a serverRequest whose Op names the operation (an exec's
// has none, and comes with its descriptors; these come with none); the
// answers are frames (writeFrame) of procReply, one for most operations,
// a stream for list, attach and watch.

import (
	"time"
)

// The supervisor's operations.
const (
	opStart      = "proc_start"
	opList       = "proc_list"
	opAttach     = "proc_attach"
	opInput      = "proc_input"
	opCloseStdin = "proc_close_stdin"
	opSignal     = "proc_signal"
	opResize     = "proc_resize"
	opWatch      = "watch"
)

// supervisorVersion is the version of the supervisor the exec server of
// a sandbox made now has (meta.Supervisor); 0, none: the sandbox was made
// by a Tether whose server had none.
const supervisorVersion = 1

// The defaults of the processes capability, per sandbox. They become the
// server's settings PROCESS_MAX_PER_SANDBOX and PROCESS_OUTPUT_BYTES when
// the processes API lands; until then WithProcessLimits sets them.
const (
	// DefaultProcessMax is how many processes a sandbox's supervisor
	// keeps at once, running ones and those that ended within
	// processKeep.
	DefaultProcessMax = 64
	// DefaultProcessOutput is how many bytes of a process's latest
	// output its supervisor keeps.
	DefaultProcessOutput = 1 << 20
	// processKeep is how long an ended process is kept, so that a late
	// attach learns how it ended.
	processKeep = 60 * time.Second
)

// Bounds of the supervisor's wire, which Tether holds the server to.
const (
	// maxProcFrame is the most a frame of the supervisor may hold: a
	// process's spec, JSON-escaped, or a chunk of output in base64.
	maxProcFrame = 1 << 20
	// maxSpecBytes bounds a process's argv, environment, working folder
	// and tag together, as given.
	maxSpecBytes = 128 << 10
	// maxListed bounds how many processes a list may hold, and
	// maxListBytes how many bytes all its frames.
	maxListed    = 4096
	maxListBytes = 32 << 20
	// maxChunk is the most output one event carries.
	maxChunk = 32 << 10
	// maxInput is the most stdin one request carries.
	maxInput = 1 << 20
	// supervisorWait bounds a unary call's wait for the server's answer.
	supervisorWait = 30 * time.Second
)

// procRequest is what an operation of the supervisor needs (serverRequest
// carries it).
type procRequest struct {
	// Spec and Limits: opStart.
	Spec   *procSpec  `json:"spec,omitempty"`
	Limits procLimits `json:"limits"`
	// PID or Tag select a process (every op but start, list and watch).
	PID int    `json:"pid,omitempty"`
	Tag string `json:"tag,omitempty"`
	// FromStart: opAttach from the start of the kept window.
	FromStart bool `json:"from_start,omitempty"`
	// Data: opInput.
	Data []byte `json:"data,omitempty"`
	// Signal: opSignal.
	Signal int `json:"signal,omitempty"`
	// Rows, Cols: opResize.
	Rows int `json:"rows,omitempty"`
	Cols int `json:"cols,omitempty"`
	// Path, Recursive: opWatch.
	Path      string `json:"path,omitempty"`
	Recursive bool   `json:"recursive,omitempty"`
}

// procLimits are the supervisor's limits, which every start sends (they
// are Tether's settings, not the server's).
type procLimits struct {
	Max    int   `json:"max"`
	Output int64 `json:"output"`
	// KeepMS is how long an ended process is kept, in milliseconds.
	KeepMS int64 `json:"keep_ms"`
}

// procSpec is a process to start: Path and the whole of Env are what it
// runs with; Argv, SpecEnv, Cwd and Tag as the caller gave them.
type procSpec struct {
	Argv    []string          `json:"argv"`
	Env     []string          `json:"env"`
	SpecEnv map[string]string `json:"spec_env,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	// Dir is where it starts: Cwd, or the sandbox's working folder.
	Dir       string `json:"dir"`
	Tag       string `json:"tag,omitempty"`
	Rows      int    `json:"rows,omitempty"`
	Cols      int    `json:"cols,omitempty"`
	Stdin     bool   `json:"stdin,omitempty"`
	TimeoutMS int64  `json:"timeout_ms,omitempty"`
}

// pty reports whether the spec asks for a terminal.
func (s *procSpec) pty() bool { return s.Rows > 0 && s.Cols > 0 }

// procInfo is a process as the supervisor keeps it.
type procInfo struct {
	PID       int       `json:"pid"`
	Spec      procSpec  `json:"spec"`
	StartedAt time.Time `json:"started_at"`
	Exit      *procExit `json:"exit,omitempty"`
	Kept      int64     `json:"kept"`
	Dropped   int64     `json:"dropped"`
}

// procExit is how a process ended.
type procExit struct {
	Code   int    `json:"code"`
	Signal int    `json:"signal,omitempty"`
	Exited bool   `json:"exited"`
	Status string `json:"status"`
}

// procEvent is an event of an attach.
type procEvent struct {
	Kind    string    `json:"kind"`
	PID     int       `json:"pid,omitempty"`
	Data    []byte    `json:"data,omitempty"`
	Offset  int64     `json:"offset,omitempty"`
	Dropped int64     `json:"dropped,omitempty"`
	Exit    *procExit `json:"exit,omitempty"`
}

// fileEvent is an event of a watch.
type fileEvent struct {
	Kind  string    `json:"kind"`
	Path  string    `json:"path,omitempty"`
	IsDir bool      `json:"is_dir,omitempty"`
	At    time.Time `json:"at"`
}

// procReply is a frame of the supervisor's answer: an error (Code, one of
// the errXxx codes, and Error, what went wrong), or what the operation
// returns; Done ends a list.
type procReply struct {
	Error string     `json:"error,omitempty"`
	Code  string     `json:"code,omitempty"`
	Info  *procInfo  `json:"info,omitempty"`
	Event *procEvent `json:"event,omitempty"`
	File  *fileEvent `json:"file,omitempty"`
	Done  bool       `json:"done,omitempty"`
}

// The supervisor's error codes, which Tether turns into the provider's.
const (
	errNotFound     = "not_found"
	errEnded        = "ended"
	errInvalid      = "invalid"
	errQuota        = "quota"
	errNoFile       = "file_not_found"
	errNotDir       = "not_dir"
	errInternalProc = "internal"
)

// supervisorError is an error the supervisor answers with.
type supervisorError struct {
	code, msg string
}

func (e *supervisorError) Error() string { return e.msg }

func supErr(code, msg string) error { return &supervisorError{code: code, msg: msg} }
