package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/tetherhq/tether/internal/domain"
)

// DefaultTimeout is a create's timeout when it names none: E2B's 300 s.
const DefaultTimeout = 300 * time.Second

// The keys of Tether's own that this face reads.
const (
	// OwnerHeader names the owner whose lease a create binds the sandbox
	// to, like /v1's owner; OwnerMetadata is the same as a metadata key
	// (the header wins). Neither is kept as a label.
	OwnerHeader   = "Tether-Owner"
	OwnerMetadata = "tether.owner"
	// TemplateLabel is the label that keeps a sandbox's E2B template.
	TemplateLabel = "e2b.template"
	// BaseTemplate is the template every install has: the default
	// provider's default root.
	BaseTemplate = "base"
)

// maxBody bounds a control-plane request's body.
const maxBody = 1 << 20

// createWait bounds one wait of a create for its sandbox to be ready; a
// create waits as long as its caller does, one such wait after another.
const createWait = 30 * time.Second

// handler is a control-plane handler: an error is answered in E2B's shape.
type handler func(w http.ResponseWriter, r *http.Request, key string) error

// controlRoutes is the control plane's route table, under Prefix.
func controlRoutes(cp control) http.Handler {
	m := http.NewServeMux()
	route := func(pattern string, h handler) { m.Handle(pattern, authed(h)) }
	route("POST /sandboxes", cp.create)
	route("POST /v2/sandboxes", cp.create)
	route("GET /sandboxes", cp.list)
	route("GET /v2/sandboxes", cp.list)
	route("GET /sandboxes/{id}", cp.get)
	route("DELETE /sandboxes/{id}", cp.kill)
	route("POST /sandboxes/{id}/timeout", cp.setTimeout)
	route("POST /sandboxes/{id}/refreshes", cp.refresh)
	route("POST /sandboxes/{id}/pause", cp.pause)
	route("POST /sandboxes/{id}/resume", cp.connect)
	route("POST /sandboxes/{id}/connect", cp.connect)
	route("POST /v2/sandboxes/{id}/connect", cp.connect)
	route("PUT /sandboxes/{id}/network", cp.updateNetwork)
	for _, p := range []string{
		"GET /sandboxes/{id}/metrics", "GET /sandboxes/metrics", "GET /sandboxes/{id}/logs", "GET /v2/sandboxes/{id}/logs",
		"POST /sandboxes/{id}/fork", "POST /sandboxes/{id}/snapshots", "GET /snapshots",
	} {
		route(p, notServed)
	}
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errorf(http.StatusNotFound, "no route %s %s", r.Method, r.URL.Path))
	})
	return m
}

// notServed answers a call of E2B's API that this face does not serve yet.
func notServed(_ http.ResponseWriter, r *http.Request, _ string) error {
	return errorf(http.StatusNotImplemented, "%s %s is not served by Tether's E2B API (see docs/e2b.md)", r.Method, r.Pattern)
}

// authed runs h with the caller's API key: X-API-Key, as the SDK sends
// it, or Authorization: Bearer.
func authed(h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimSpace(r.Header.Get("X-API-Key"))
		if key == "" {
			if a, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
				key = strings.TrimSpace(a)
			}
		}
		if key == "" {
			writeError(w, errorf(http.StatusUnauthorized, "send a Tether API key as X-API-Key (E2B_API_KEY)"))
			return
		}
		if err := h(w, r, key); err != nil {
			if r.Context().Err() != nil {
				// The caller went away: logged as nginx's 499, as /v1
				// does; an answer would reach nobody.
				w.WriteHeader(statusClientClosedRequest)
				return
			}
			writeError(w, err)
		}
	})
}

// control is the control plane's handlers.
type control struct {
	core core
	// domain is the sandbox hosts' domain, answered to the SDK; hosts
	// records the sandboxes made here (nil: none). See hosts.go.
	domain string
	hosts  HostStore
}

// decodeBody reads r's JSON body into v; an empty body is allowed when
// optional. Unknown fields are ignored: the SDK sends fields this face
// does not read, and says nothing of their absence.
func decodeBody(r *http.Request, v any, optional bool) error {
	b, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxBody))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return errorf(http.StatusRequestEntityTooLarge, "the body is over %d bytes", maxBody)
		}
		return errorf(http.StatusBadRequest, "reading the body: %v", err)
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		if optional {
			return nil
		}
		return errorf(http.StatusBadRequest, "the body must be a JSON object")
	}
	if err := json.Unmarshal(b, v); err != nil {
		return errorf(http.StatusBadRequest, "the body is not valid: %v", err)
	}
	return nil
}

// sandboxAnswer is E2B's Sandbox: a create's and a connect's answer.
type sandboxAnswer struct {
	TemplateID      string `json:"templateID"`
	SandboxID       string `json:"sandboxID"`
	ClientID        string `json:"clientID"`
	EnvdVersion     string `json:"envdVersion"`
	EnvdAccessToken string `json:"envdAccessToken"`
	// TrafficAccessToken is the token a request of the sandbox's hosts
	// needs when its create did not allow public traffic; null else.
	TrafficAccessToken *string `json:"trafficAccessToken"`
	// Domain is the sandbox hosts' domain (E2B_DOMAIN): the SDK's getHost
	// builds {port}-{sandboxID}.{domain} of it. Null when there is none.
	Domain *string `json:"domain"`
}

// answerOf is the Sandbox answer of s, for the caller with key: the key
// is the daemon's access token too (the SDK sends it as X-Access-Token).
// rec is what is recorded of s for its hosts (nil: nothing, a /v1
// sandbox), which says whether it has a traffic access token.
func (cp control) answerOf(ctx context.Context, s v1Sandbox, key string, rec *domain.E2BSandbox) (sandboxAnswer, error) {
	a := sandboxAnswer{
		TemplateID: templateOf(s), SandboxID: s.ID, ClientID: "tether",
		EnvdVersion: EnvdVersion, EnvdAccessToken: key, Domain: cp.domainOf(),
	}
	if rec != nil && !rec.PublicTraffic {
		t, err := cp.hosts.Credentials(ctx)
		if err != nil {
			return a, fmt.Errorf("e2b: traffic access token of %s: %w", s.ID, err)
		}
		token := TrafficToken(t, s.ID)
		a.TrafficAccessToken = &token
	}
	return a, nil
}

// domainOf is the sandbox hosts' domain as answered: null when unset.
func (cp control) domainOf() *string {
	if cp.domain == "" {
		return nil
	}
	d := cp.domain
	return &d
}

// hostRecord is what is recorded of the sandbox id for its hosts: nil for
// one not made here (a /v1 sandbox), or when nothing is recorded at all.
func (cp control) hostRecord(ctx context.Context, id string) (*domain.E2BSandbox, error) {
	if cp.hosts == nil {
		return nil, nil
	}
	rec, err := cp.hosts.E2BSandbox(ctx, id)
	if errors.Is(err, domain.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("e2b: the host record of %s: %w", id, err)
	}
	return &rec, nil
}

// templateOf is the sandbox's E2B template: its label, else base.
func templateOf(s v1Sandbox) string {
	if t := s.Labels[TemplateLabel]; t != "" {
		return t
	}
	return BaseTemplate
}

// awaitSettled waits, as long as ctx lets it, until the sandbox id is no
// longer in a passing state, and returns it.
func (cp control) awaitSettled(ctx context.Context, r *http.Request, key, id string) (v1Sandbox, error) {
	for {
		s, err := cp.core.get(ctx, r, key, id, createWait)
		if err != nil {
			return s, err
		}
		switch s.State {
		case "requested", "creating", "pausing", "resuming":
		default:
			return s, nil
		}
		if err := ctx.Err(); err != nil {
			return s, fmt.Errorf("e2b: wait for %s: %w", id, err)
		}
	}
}

// lookup reads the live sandbox id: an ended or unknown one is 404.
func (cp control) lookup(r *http.Request, key, id string) (v1Sandbox, error) {
	s, err := cp.core.get(r.Context(), r, key, id, 0)
	if err != nil {
		return s, err
	}
	if !s.live() {
		return s, errorf(http.StatusNotFound, "sandbox %q not found", id)
	}
	return s, nil
}
