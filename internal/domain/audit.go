package domain

import "time"

// Caller is the API key a client request was made with, recorded with what
// the request did (events, activity). The zero Caller is no key: the
// executor's and the janitor's work, or a write made outside a request.
type Caller struct {
	KeyID   string
	KeyName string
}

// KeyPrefix starts every API key Tether makes, so that leaked ones are
// easy to recognise in logs and scanners.
const KeyPrefix = "tk_"

// APIKey is an API key as Tether records it; the key itself is never kept,
// only its hash.
type APIKey struct {
	ID     string
	Tenant string
	Name   string

	CreatedAt  time.Time
	LastUsedAt *time.Time
	RevokedAt  *time.Time
	// ManageKeys is the key's scope to create keys and revoke others.
	ManageKeys bool
	// CreatedBy is the id of the key that made this one over the API;
	// empty for an operator's key (command line, BOOTSTRAP_API_KEY).
	CreatedBy string
}

// NewAPIKey is what a key asks for when it makes another over the API.
type NewAPIKey struct {
	Tenant string
	Name   string
	// By is the id of the key that asks; it must not be revoked and must
	// have ManageKeys.
	By string
	// ManageKeys gives the new key the scope too.
	ManageKeys bool
	// MaxKeys caps the tenant's keys that are not revoked; 0 is no cap.
	MaxKeys int
}

// Caller is the key as the Caller of the requests made with it.
func (k APIKey) Caller() Caller { return Caller{KeyID: k.ID, KeyName: k.Name} }

// ActivityKind is what an activity record did inside a sandbox.
type ActivityKind string

// The kinds of activity.
const (
	ActivityExec         ActivityKind = "exec"
	ActivityFileRead     ActivityKind = "file_read"
	ActivityFileWrite    ActivityKind = "file_write"
	ActivityArchiveRead  ActivityKind = "archive_read"
	ActivityArchiveWrite ActivityKind = "archive_write"
	// ActivityPort is an HTTP request or WebSocket connection the API
	// proxied to a port in the sandbox; ActivityPreview, one that came
	// through a preview URL; ActivityE2BHost, one that came through an
	// E2B sandbox host ({port}-{sandbox id}.E2B_DOMAIN), without a key.
	ActivityPort    ActivityKind = "port"
	ActivityPreview ActivityKind = "preview"
	ActivityE2BHost ActivityKind = "e2b_host"
	// ActivityProcessStart is a background process started (its command
	// in Target, its pid in PID); ActivityProcessInput, input written to a
	// process's stdin or terminal (the input in Target, as text);
	// ActivityProcessSignal, a signal sent to one (its name in Target);
	// ActivityTerminal, a terminal session over a WebSocket, recorded when
	// it ends (what was typed in Target, the bytes both ways in Bytes).
	ActivityProcessStart  ActivityKind = "process_start"
	ActivityProcessInput  ActivityKind = "process_input"
	ActivityProcessSignal ActivityKind = "process_signal"
	ActivityTerminal      ActivityKind = "terminal"
	// ActivityNetworkUpdate is an edit of an allow-list sandbox's network
	// rules (the new allow list in Target); ActivityEgress, a connection
	// (or DNS question) the egress proxy decided: the name asked for or
	// the address dialled in Target, its Port, Allowed and the Rule that
	// allowed it or the Error that refused it, Bytes out and BytesIn.
	ActivityNetworkUpdate ActivityKind = "network_update"
	ActivityEgress        ActivityKind = "egress"
)

// MaxActivityTarget bounds the command or path an activity record keeps,
// in bytes; longer ones are truncated.
const MaxActivityTarget = 4096

// Activity is one exec or file transfer a client made in a sandbox.
type Activity struct {
	ID        int64
	SandboxID string
	Tenant    string
	At        time.Time
	Caller    Caller
	Kind      ActivityKind
	// Target is the command of an exec (truncated to MaxActivityTarget),
	// the path of a file or archive transfer, or the method and path of a
	// port's request ("GET /index.html", no query).
	Target string
	// ExitCode is the exec's exit code; nil for transfers and for an exec
	// that did not finish.
	ExitCode *int
	// Bytes is how many bytes the transfer moved (for an exec, its output);
	// nil when unknown.
	Bytes    *int64
	Duration time.Duration
	TimedOut bool
	// OOMKilled is set when the sandbox's memory limit killed a process
	// while the exec ran.
	OOMKilled bool
	// Error is why the operation failed, empty when it succeeded.
	Error string
	// Port, Status and PreviewID are a port's traffic's (ActivityPort,
	// ActivityPreview, ActivityE2BHost): the port, the HTTP status answered (101 for a
	// WebSocket) and the preview it came through; zero for the others.
	Port      int
	Status    int
	PreviewID string
	// PID is the process's id inside the sandbox, for the process kinds;
	// zero for the others (and for a start that failed).
	PID int
	// Allowed, Rule and BytesIn are an egress record's: the verdict, the
	// rule that allowed it, and the bytes that came back; nil and empty
	// for the others.
	Allowed *bool
	Rule    string
	BytesIn *int64
}
