package egressproxy

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"
	"time"
)

// Policy gives the proxy a sandbox's rules. The proxy asks it for every
// new connection, DNS question and HTTP request it sees, so a change is in
// force from the next one: Lookup must answer from memory, at once.
type Policy interface {
	// Lookup returns the rules of the sandbox, and false when it has none
	// (every connection and name is then refused).
	Lookup(ctx context.Context, sandboxID string) (Rules, bool)
}

// Recorder receives a record of every connection and DNS question once it
// is decided and, for an allowed connection, once it ends. Record is
// called on the connection's goroutine: it must not block.
type Recorder interface {
	Record(ConnRecord)
}

// Protocols of a ConnRecord.
const (
	ProtoTLS  = "tls"  // TLS, named by its SNI
	ProtoHTTP = "http" // plain HTTP, named by its Host
	ProtoTCP  = "tcp"  // other TCP, known by its address
	ProtoDNS  = "dns"  // a question to the proxy's DNS
)

// ConnRecord is what the proxy records of one connection (or DNS
// question) of a sandbox's.
type ConnRecord struct {
	SandboxID string
	// Proto is ProtoTLS, ProtoHTTP, ProtoTCP or ProtoDNS.
	Proto string
	// Host is the name the sandbox asked for (SNI, Host, the DNS
	// question), if any; Addr the address and port it dialled.
	Host string
	Addr netip.AddrPort
	// Upstream is where the proxy connected; zero when it did not.
	Upstream netip.AddrPort
	// Allowed tells the verdict; Rule is the rule that allowed it, Reason
	// why it was refused, or why an allowed one ended early.
	Allowed bool
	Rule    string
	Reason  string
	// Credential is the header a credential added ("" for none); never
	// its value.
	Credential string
	// BytesOut went from the sandbox out, BytesIn came back to it.
	BytesOut, BytesIn int64
	// Start and End bound the connection (the same instant for a refusal
	// or a DNS answer).
	Start, End time.Time
}

// MemoryPolicy is a Policy held in memory, set per sandbox. It is what
// the local provider fills from a create's params for now; stored rules
// are to replace it.
type MemoryPolicy struct {
	mu    sync.RWMutex
	rules map[string]Rules
}

// Set replaces the sandbox's rules.
func (m *MemoryPolicy) Set(sandboxID string, r Rules) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rules == nil {
		m.rules = map[string]Rules{}
	}
	m.rules[sandboxID] = r
}

// Delete forgets the sandbox's rules.
func (m *MemoryPolicy) Delete(sandboxID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.rules, sandboxID)
}

// Lookup implements Policy.
func (m *MemoryPolicy) Lookup(_ context.Context, sandboxID string) (Rules, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	r, ok := m.rules[sandboxID]
	return r, ok
}

// LogRecorder records connections in a log: refusals at info, the rest at
// debug.
type LogRecorder struct{ Log *slog.Logger }

// Record implements Recorder.
func (l LogRecorder) Record(r ConnRecord) {
	level := slog.LevelDebug
	if !r.Allowed {
		level = slog.LevelInfo
	}
	l.Log.LogAttrs(context.Background(), level, "egress", slog.String("sandbox", r.SandboxID), slog.String("proto", r.Proto),
		slog.String("host", r.Host), slog.String("addr", r.Addr.String()), slog.Bool("allowed", r.Allowed),
		slog.String("rule", r.Rule), slog.String("reason", r.Reason), slog.String("credential", r.Credential),
		slog.Int64("bytes_out", r.BytesOut), slog.Int64("bytes_in", r.BytesIn), slog.Duration("took", r.End.Sub(r.Start)))
}
