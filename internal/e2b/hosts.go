package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/tetherhq/tether/internal/credential"
	"github.com/tetherhq/tether/internal/domain"
)

// E2B's per-sandbox hosts, {port}-{sandbox id}.{domain}: the SDK's
// getHost(port) builds them from a create's (or connect's) domain, and
// its users reach a port of the sandbox there with no key
// (e2b-dev/E2B packages/js-sdk/src/connectionConfig.ts, getHost).
// Tether serves them under E2B_DOMAIN, through its port proxy (package
// dataplane), for the sandboxes made through this face: this file holds
// E2B's rules, as e2b-dev/infra's proxies apply them (the host's form,
// the traffic access token, the answers of a request that does not reach
// the sandbox), and the store this face records its sandboxes in.

// TrafficTokenHeader is the header a request of a sandbox whose create
// did not allow public traffic carries its traffic access token in
// (e2b-dev/infra packages/orchestrator/pkg/proxy/proxy.go,
// trafficAccessTokenHeader; the code-interpreter SDK sends it).
const TrafficTokenHeader = "E2b-Traffic-Access-Token"

// trafficTokenPrefix starts every traffic access token, so that leaked
// ones are easy to recognise.
const trafficTokenPrefix = "tta_"

// HostCredentialHeaders are the headers of E2B's SDKs that carry Tether's
// credentials, which a request of a sandbox host never passes on to the
// app: the daemon's access token (the caller's API key; the
// code-interpreter SDK sends it to every port) and the traffic access
// token.
var HostCredentialHeaders = []string{AccessTokenHeader, TrafficTokenHeader}

// HostStore keeps what this face knows of the sandboxes it made, for
// their hosts (the store's e2b_sandboxes), and the installation's
// credentials, from which traffic access tokens are derived.
type HostStore interface {
	// RecordE2BSandbox records that the sandbox id, just made, was made
	// here, and whether it allows public traffic.
	RecordE2BSandbox(ctx context.Context, id string, publicTraffic bool) (domain.E2BSandbox, error)
	// E2BSandbox is what is recorded of the sandbox id; domain.ErrNotFound
	// for a sandbox not made here.
	E2BSandbox(ctx context.Context, id string) (domain.E2BSandbox, error)
	// Credentials is the installation's Tagger.
	Credentials(ctx context.Context) (*credential.Tagger, error)
}

// TrafficToken is the traffic access token of the sandbox id: derived
// from the installation's secret and the id (as E2B derives it, an HMAC
// of the id: e2b-dev/infra packages/api/internal/sandbox/
// sandbox_envd_secret.go), so that any replica answers and checks it
// without keeping it, for as long as the sandbox lasts.
func TrafficToken(t *credential.Tagger, id string) string {
	return t.Derive(trafficTokenPrefix, id)
}

// HostAccess decides whether a request with header h may reach the ports
// of the sandbox rec on its hosts: any request when its create allowed
// public traffic, else one that carries its traffic access token, checked
// in constant time. A refusal is E2B's 403 (HostError).
func HostAccess(t *credential.Tagger, rec domain.E2BSandbox, h http.Header) error {
	if rec.PublicTraffic {
		return nil
	}
	token := h.Get(TrafficTokenHeader)
	switch {
	case token == "":
		return &HostError{Status: http.StatusForbidden, SandboxID: rec.SandboxID,
			Message: "Sandbox is secured with traffic access token. Token header '" + strings.ToLower(TrafficTokenHeader) + "' is missing"}
	case !t.Derived(trafficTokenPrefix, rec.SandboxID, token):
		return &HostError{Status: http.StatusForbidden, SandboxID: rec.SandboxID, Message: invalidTokenMessage}
	}
	return nil
}

// invalidTokenMessage is E2B's message for a wrong traffic access token.
var invalidTokenMessage = "Sandbox is secured with traffic access token. Provided token in header '" +
	strings.ToLower(TrafficTokenHeader) + "' is invalid"

// InvalidToken reports whether err is HostAccess's refusal of a token
// that was sent and is not the sandbox's: a guess, which the caller counts
// against the client's address.
func InvalidToken(err error) bool {
	var he *HostError
	return errors.As(err, &he) && he.Message == invalidTokenMessage
}

// ParseHostLabel reads the first label of a sandbox host, "{port}-{sandbox
// id}", as E2B's proxy does (e2b-dev/infra packages/shared/pkg/proxy/
// host.go, parseHost): the port, then the sandbox's id, spelt as Tether's
// ids are ("sbx_...", the SDK's) or with "-" for the "_" ("sbx-...", a
// DNS-safe label, as preview hosts spell it). A label that is not of that
// form is E2B's 400 "Invalid host"; a port that is not 1-65535 in its one
// spelling, "Invalid sandbox port"; an id that is not one, "Invalid
// sandbox ID".
func ParseHostLabel(label string) (id string, port int, err error) {
	portStr, rest, ok := strings.Cut(label, "-")
	if !ok || portStr == "" || rest == "" || strings.Contains(label, ".") {
		return "", 0, &HostError{Status: http.StatusBadRequest, Message: "Invalid host"}
	}
	port, perr := strconv.Atoi(portStr)
	if perr != nil || port < 1 || port > 65535 || strconv.Itoa(port) != portStr {
		return "", 0, &HostError{Status: http.StatusBadRequest, Message: "Invalid sandbox port"}
	}
	id = strings.Replace(rest, "-", "_", 1)
	if !domain.ValidID(id) {
		return "", 0, &HostError{Status: http.StatusBadRequest, Message: "Invalid sandbox ID"}
	}
	return id, port, nil
}

// HostError is an answer of E2B's proxy to a request of a sandbox host
// that does not reach the app (e2b-dev/infra packages/shared/pkg/proxy/
// handler.go and template/): a 400 for a host it cannot read, as plain
// text; otherwise JSON, {"sandboxId", "message", "code"} (and "port" for
// a closed port). Tether answers every client JSON, browsers too (E2B
// shows them an HTML page).
type HostError struct {
	Status    int
	SandboxID string
	Message   string
	// Port is the port of a closed-port answer; 0 for the others.
	Port int
}

func (e *HostError) Error() string { return strconv.Itoa(e.Status) + ": " + e.Message }

// HostNotFound is E2B's answer for a sandbox that is not running: unknown,
// ended, paused (E2B resumes only sandboxes made with auto-resume, which
// Tether does not serve), or not made through E2B's API.
func HostNotFound(id string) *HostError {
	return &HostError{Status: http.StatusBadGateway, SandboxID: id, Message: "The sandbox was not found"}
}

// PortClosed is E2B's answer when nothing answers on the port in the
// running sandbox.
func PortClosed(id string, port int) *HostError {
	return &HostError{Status: http.StatusBadGateway, SandboxID: id, Port: port, Message: "The sandbox is running but port is not open"}
}

// Write answers the request with e.
func (e *HostError) Write(w http.ResponseWriter) {
	if e.Status == http.StatusBadRequest && e.SandboxID == "" {
		http.Error(w, e.Message, e.Status) // E2B's plain-text 400s
		return
	}
	body := struct {
		SandboxID string `json:"sandboxId"`
		Message   string `json:"message"`
		Port      int    `json:"port,omitempty"`
		Code      int    `json:"code"`
	}{e.SandboxID, e.Message, e.Port, e.Status}
	b, err := json.Marshal(body)
	if err != nil {
		b = []byte(`{"message":"internal error","code":500}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(e.Status)
	_, _ = w.Write(b) // the client may be gone; nothing to do about it
}
