package e2b

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tetherhq/tether/internal/domain"
)

// newSandbox is E2B's NewSandbox, the fields this face reads.
type newSandbox struct {
	TemplateID          *string           `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	AutoPause           *bool             `json:"autoPause"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	Network             map[string]any    `json:"network"`
	VolumeMounts        []any             `json:"volumeMounts"`
	Mcp                 map[string]any    `json:"mcp"`
}

// publicTraffic is the create's network.allowPublicTraffic: whether its
// sandbox's hosts let any request through, or only one with its traffic
// access token. E2B's default, and the SDK's when network names none, is
// true (e2b-dev/infra spec/openapi.yml, SandboxNetworkConfig).
func (n newSandbox) publicTraffic() bool {
	v, ok := n.Network["allowPublicTraffic"].(bool)
	return !ok || v
}

// allTraffic is E2B's "all traffic" entry of allowOut and denyOut.
const allTraffic = "0.0.0.0/0"

// egress is the way out a create asks for, as Tether gives it: none (E2B's
// allowInternetAccess false, or denyOut of all traffic without allowOut),
// an allow list (allowOut with all other traffic denied), or open (what
// E2B gives by default: Tether's sandbox then has the default provider's
// network, which is none, as docs/e2b.md says). An allow list is the
// provider's params.network "allowlist", through Tether's egress proxy.
type egress struct {
	// denied tells that all traffic not allowed is denied (none, or an
	// allow list); allow is the allow list, nil for none.
	denied bool
	allow  []string
}

// checkNetwork reads a create's network settings: allowPublicTraffic (a
// boolean), and allowOut and denyOut where Tether can honour them exactly
// (see egress); anything else (an egress proxy, transform rules, a masked
// Host, a partial denyOut) is refused.
func (n newSandbox) checkNetwork() (egress, error) {
	var (
		out            egress
		allowOut, deny []string
		haveAllow      bool
	)
	for k, v := range n.Network {
		switch k {
		case "allowPublicTraffic":
			if _, ok := v.(bool); !ok {
				return out, errorf(http.StatusBadRequest, "network.allowPublicTraffic must be true or false")
			}
		case "allowOut", "denyOut":
			list, ok := stringList(v)
			if !ok {
				return out, errorf(http.StatusBadRequest, "network.%s must be a list of CIDR blocks, IP addresses or host names", k)
			}
			if k == "allowOut" {
				allowOut, haveAllow = list, true
			} else {
				deny = list
			}
		default:
			return out, errorf(http.StatusBadRequest, "network.%s is not supported by Tether's E2B API yet (allowPublicTraffic, allowOut and denyOut are)", k)
		}
	}
	denyAll := n.AllowInternetAccess != nil && !*n.AllowInternetAccess
	for _, d := range deny {
		if d != allTraffic {
			return out, errorf(http.StatusBadRequest, "network.denyOut may only deny all traffic (%q) here: Tether's sandboxes reach only what an allow list names", allTraffic)
		}
		denyAll = true
	}
	switch {
	case haveAllow && !denyAll:
		return out, errorf(http.StatusBadRequest,
			"network.allowOut without denyOut [%q] would let all traffic out on E2B; Tether's sandboxes reach only what an allow list names: deny all traffic and allow what the sandbox needs", allTraffic)
	case haveAllow && len(allowOut) > 0:
		if slices.Contains(allowOut, allTraffic) {
			return out, errorf(http.StatusBadRequest, "network.allowOut may not allow all traffic (%q) here", allTraffic)
		}
		return egress{denied: true, allow: allowOut}, nil
	}
	return egress{denied: denyAll}, nil // none (all denied: the default network), or open
}

// stringList is v as a list of strings, if it is one.
func stringList(v any) ([]string, bool) {
	items, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(items))
	for _, it := range items {
		s, ok := it.(string)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

// v1Create is /v1's create request, the fields this face sets.
type v1Create struct {
	Labels     map[string]string `json:"labels,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	TTLSeconds int64             `json:"ttl_seconds"`
	Owner      string            `json:"owner,omitempty"`
	Pool       string            `json:"pool,omitempty"`
	Params     map[string]any    `json:"params,omitempty"`
}

// toV1 checks an E2B create and makes it /v1's; owner is the
// Tether-Owner header's.
func (n newSandbox) toV1(owner string) (v1Create, error) {
	if n.TemplateID == nil || strings.TrimSpace(*n.TemplateID) == "" {
		return v1Create{}, errorf(http.StatusBadRequest, "templateID is required")
	}
	ttl := int64(DefaultTimeout / time.Second)
	if n.Timeout != nil {
		if *n.Timeout < 1 {
			return v1Create{}, errorf(http.StatusBadRequest, "timeout must be at least 1 second, not %d", *n.Timeout)
		}
		ttl = *n.Timeout
	}
	switch {
	case n.AutoPause != nil && *n.AutoPause:
		return v1Create{}, errorf(http.StatusBadRequest, "autoPause (onTimeout: 'pause') is not supported by Tether's E2B API yet")
	case len(n.VolumeMounts) > 0:
		return v1Create{}, errorf(http.StatusBadRequest, "volume mounts are not supported by Tether")
	case len(n.Mcp) > 0:
		return v1Create{}, errorf(http.StatusBadRequest, "the MCP gateway is not supported by Tether")
	}
	out, err := n.checkNetwork()
	if err != nil {
		return v1Create{}, err
	}
	labels := maps.Clone(n.Metadata)
	if labels == nil {
		labels = map[string]string{}
	}
	if owner == "" {
		owner = labels[OwnerMetadata]
	}
	delete(labels, OwnerMetadata)
	if _, ok := labels[TemplateLabel]; ok {
		return v1Create{}, errorf(http.StatusBadRequest, "metadata key %q is Tether's own", TemplateLabel)
	}
	t := strings.TrimSpace(*n.TemplateID)
	labels[TemplateLabel] = t
	c := v1Create{Labels: labels, Env: n.EnvVars, TTLSeconds: ttl, Owner: owner}
	if t != BaseTemplate {
		c.Pool = t // a warm pool of that name
	}
	if out.denied && c.Pool != "" {
		// A pool's sandboxes were made with its own network, which may
		// have a way out: the caller asked for none beyond its list.
		return v1Create{}, errorf(http.StatusBadRequest,
			"allowInternetAccess, network.allowOut and network.denyOut apply to the template %q only: a warm pool's sandboxes are made with its own network", BaseTemplate)
	}
	if len(out.allow) > 0 {
		c.Params = map[string]any{"network": domain.NetworkAllowlist, "allow": out.allow}
	}
	return c, nil
}

// create makes a sandbox and answers once it is ready, 201 with E2B's
// Sandbox. A caller that goes away before then gets nothing left behind:
// the sandbox is deleted. The sandbox is recorded as made here (with its
// network.allowPublicTraffic) before it can be ready, so that its hosts
// serve it from its first moment (hosts.go).
func (cp control) create(w http.ResponseWriter, r *http.Request, key string) error {
	var n newSandbox
	if err := decodeBody(r, &n, false); err != nil {
		return err
	}
	req, err := n.toV1(strings.TrimSpace(r.Header.Get(OwnerHeader)))
	if err != nil {
		return err
	}
	rep, err := cp.core.call(r.Context(), r, key, http.MethodPost, "/v1/sandboxes", req)
	if err != nil {
		return err
	}
	if !rep.ok() {
		if req.Pool != "" && rep.status == http.StatusNotFound {
			return errorf(http.StatusNotFound, "template %q not found: Tether serves %q and the warm pools of the tenant", *n.TemplateID, BaseTemplate)
		}
		return fromV1(rep)
	}
	var made v1Sandbox
	if err := rep.decode(&made); err != nil {
		return err
	}
	var rec *domain.E2BSandbox
	if cp.hosts != nil {
		e, err := cp.hosts.RecordE2BSandbox(r.Context(), made.ID, n.publicTraffic())
		if err != nil {
			cp.abandon(r, key, made.ID)
			return fmt.Errorf("e2b: record sandbox %s: %w", made.ID, err)
		}
		rec = &e
	}
	s := made
	if s.State != "ready" { // a claim from a warm pool is ready at once
		s, err = cp.awaitSettled(r.Context(), r, key, made.ID)
	}
	if err != nil {
		if r.Context().Err() != nil {
			// The sandbox made, not the answer of the wait the caller cut.
			cp.abandon(r, key, made.ID)
		}
		return err
	}
	switch s.State {
	case "ready":
	case "failed": // the provider's failure: a new create may succeed
		return errorf(http.StatusServiceUnavailable, "sandbox %s could not start: %s", s.ID, s.Error)
	default: // ended or paused by another call meanwhile
		return errorf(http.StatusConflict, "sandbox %s was %s before it was ready", s.ID, s.State)
	}
	a, err := cp.answerOf(r.Context(), s, key, rec)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, a)
	return nil
}

// abandon ends the sandbox id of a create whose caller went away.
func (cp control) abandon(r *http.Request, key, id string) {
	if id == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 10*time.Second)
	defer cancel()
	_, _ = cp.core.call(ctx, r, key, http.MethodDelete, sandboxPath(id, "", nil), nil) // the janitor ends it at its TTL otherwise
}

// detail is E2B's SandboxDetail and ListedSandbox. Tether does not size
// sandboxes in E2B's terms: cpuCount, memoryMB and diskSizeMB are 0.
type detail struct {
	TemplateID      string            `json:"templateID"`
	SandboxID       string            `json:"sandboxID"`
	ClientID        string            `json:"clientID"`
	StartedAt       time.Time         `json:"startedAt"`
	EndAt           *time.Time        `json:"endAt,omitempty"`
	EnvdVersion     string            `json:"envdVersion"`
	EnvdAccessToken string            `json:"envdAccessToken,omitempty"`
	CPUCount        int               `json:"cpuCount"`
	MemoryMB        int               `json:"memoryMB"`
	DiskSizeMB      int               `json:"diskSizeMB"`
	Metadata        map[string]string `json:"metadata"`
	State           string            `json:"state"`
	// Domain and Network are a single sandbox's (GET), absent from lists:
	// its hosts' domain, and, for one made here, whether they let public
	// traffic through.
	Domain  *string        `json:"domain,omitempty"`
	Network *detailNetwork `json:"network,omitempty"`
}

// detailNetwork is the part of E2B's SandboxNetworkConfig Tether keeps.
type detailNetwork struct {
	AllowPublicTraffic bool `json:"allowPublicTraffic"`
}

// detailOf is E2B's view of s: paused when Tether's is, running else.
func detailOf(s v1Sandbox, key string) detail {
	md := maps.Clone(s.Labels)
	if md == nil {
		md = map[string]string{}
	}
	delete(md, TemplateLabel)
	if s.Owner != "" {
		md[OwnerMetadata] = s.Owner
	}
	state := "running"
	if s.State == "paused" || s.State == "pausing" {
		state = "paused"
	}
	return detail{
		TemplateID: templateOf(s), SandboxID: s.ID, ClientID: "tether",
		StartedAt: s.CreatedAt, EndAt: s.ExpiresAt, EnvdVersion: EnvdVersion, EnvdAccessToken: key,
		Metadata: md, State: state,
	}
}

// get answers E2B's SandboxDetail.
func (cp control) get(w http.ResponseWriter, r *http.Request, key string) error {
	s, err := cp.lookup(r, key, r.PathValue("id"))
	if err != nil {
		return err
	}
	d := detailOf(s, key)
	d.Domain = cp.domainOf()
	rec, err := cp.hostRecord(r.Context(), s.ID)
	if err != nil {
		return err
	}
	if rec != nil {
		d.Network = &detailNetwork{AllowPublicTraffic: rec.PublicTraffic}
	}
	writeJSON(w, http.StatusOK, d)
	return nil
}

// kill ends the sandbox: 204, or 404 for one unknown or already ended.
func (cp control) kill(w http.ResponseWriter, r *http.Request, key string) error {
	id := r.PathValue("id")
	if _, err := cp.lookup(r, key, id); err != nil {
		return err
	}
	rep, err := cp.core.call(r.Context(), r, key, http.MethodDelete, sandboxPath(id, "", nil), nil)
	if err != nil {
		return err
	}
	if !rep.ok() {
		return fromV1(rep)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// renew sets the sandbox's deadline to now+seconds.
func (cp control) renew(r *http.Request, key, id string, seconds int64) error {
	rep, err := cp.core.call(r.Context(), r, key, http.MethodPost, sandboxPath(id, "/renew", nil), map[string]int64{"ttl_seconds": seconds})
	if err != nil {
		return err
	}
	if !rep.ok() {
		return fromV1(rep)
	}
	return nil
}

// setTimeout sets the sandbox's timeout from now, longer or shorter.
func (cp control) setTimeout(w http.ResponseWriter, r *http.Request, key string) error {
	var body struct {
		Timeout *int64 `json:"timeout"`
	}
	if err := decodeBody(r, &body, false); err != nil {
		return err
	}
	if body.Timeout == nil || *body.Timeout < 1 {
		return errorf(http.StatusBadRequest, "timeout is required, at least 1 second")
	}
	id := r.PathValue("id")
	if _, err := cp.lookup(r, key, id); err != nil {
		return err
	}
	if err := cp.renew(r, key, id, *body.Timeout); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// lengthen renews the sandbox s to now+seconds unless it already lasts
// longer: a refresh and a connect never shorten a timeout.
func (cp control) lengthen(r *http.Request, key string, s v1Sandbox, seconds int64) error {
	want := time.Now().Add(time.Duration(seconds) * time.Second)
	if s.ExpiresAt == nil || !s.ExpiresAt.Before(want) {
		return nil
	}
	return cp.renew(r, key, s.ID, seconds)
}

// refresh lengthens the sandbox's timeout to duration seconds from now
// (E2B's default, 15 s, without a body), never shortening it.
func (cp control) refresh(w http.ResponseWriter, r *http.Request, key string) error {
	var body struct {
		Duration *int64 `json:"duration"`
	}
	if err := decodeBody(r, &body, true); err != nil {
		return err
	}
	seconds := int64(15)
	if body.Duration != nil {
		if *body.Duration < 0 || *body.Duration > 3600 {
			return errorf(http.StatusBadRequest, "duration must be 0 to 3600 seconds, not %d", *body.Duration)
		}
		seconds = *body.Duration
	}
	s, err := cp.lookup(r, key, r.PathValue("id"))
	if err != nil {
		return err
	}
	if seconds > 0 {
		if err := cp.lengthen(r, key, s, seconds); err != nil {
			return err
		}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// pause pauses a running sandbox and answers once it is paused: 204, or
// 409 for one already paused.
func (cp control) pause(w http.ResponseWriter, r *http.Request, key string) error {
	var body struct {
		Memory *bool `json:"memory"`
	}
	if err := decodeBody(r, &body, true); err != nil {
		return err
	}
	if body.Memory != nil && !*body.Memory {
		return errorf(http.StatusBadRequest, "a pause without memory (memory: false) is not supported by Tether")
	}
	id := r.PathValue("id")
	s, err := cp.lookup(r, key, id)
	if err != nil {
		return err
	}
	if s.State == "paused" || s.State == "pausing" {
		return errorf(http.StatusConflict, "sandbox %s is already paused", id)
	}
	rep, err := cp.core.call(r.Context(), r, key, http.MethodPost, sandboxPath(id, "/pause", nil), nil)
	if err != nil {
		return err
	}
	if !rep.ok() {
		return fromV1(rep)
	}
	s, err = cp.awaitSettled(r.Context(), r, key, id)
	if err != nil {
		return err
	}
	if s.State != "paused" {
		return errorf(http.StatusConflict, "sandbox %s did not pause: %s %s", id, s.State, s.Error)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// connect answers E2B's Sandbox for a live sandbox, resuming a paused one
// (201) and lengthening, never shortening, its timeout to the one asked
// for; 200 for one that was running.
func (cp control) connect(w http.ResponseWriter, r *http.Request, key string) error {
	var body struct {
		Timeout *int64 `json:"timeout"`
	}
	if err := decodeBody(r, &body, true); err != nil {
		return err
	}
	if body.Timeout != nil && *body.Timeout < 0 {
		return errorf(http.StatusBadRequest, "timeout must not be negative")
	}
	id := r.PathValue("id")
	s, err := cp.lookup(r, key, id)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if s.State == "paused" || s.State == "pausing" || s.State == "resuming" {
		if s, err = cp.resume(r, key, id); err != nil {
			return err
		}
		status = http.StatusCreated
	} else if s, err = cp.awaitSettled(r.Context(), r, key, id); err != nil {
		return err
	}
	if s.State != "ready" {
		return errorf(http.StatusNotFound, "sandbox %s is %s", id, s.State)
	}
	if body.Timeout != nil && *body.Timeout > 0 {
		if err := cp.lengthen(r, key, s, *body.Timeout); err != nil {
			return err
		}
	}
	rec, err := cp.hostRecord(r.Context(), id)
	if err != nil {
		return err
	}
	a, err := cp.answerOf(r.Context(), s, key, rec)
	if err != nil {
		return err
	}
	writeJSON(w, status, a)
	return nil
}

// resume resumes the paused sandbox id and waits until it is ready.
func (cp control) resume(r *http.Request, key, id string) (v1Sandbox, error) {
	if s, err := cp.awaitSettled(r.Context(), r, key, id); err != nil || s.State != "paused" {
		return s, err
	}
	rep, err := cp.core.call(r.Context(), r, key, http.MethodPost, sandboxPath(id, "/resume", nil), nil)
	if err != nil {
		return v1Sandbox{}, err
	}
	if !rep.ok() {
		return v1Sandbox{}, fromV1(rep)
	}
	return cp.awaitSettled(r.Context(), r, key, id)
}

// listQuery is /v1's list query for E2B's: states, metadata (labels),
// the template (a label, but base also means none), startedAfter, the
// page size and token.
func listQuery(q url.Values) (url.Values, string, error) {
	v := url.Values{}
	states := map[string][]string{"running": {"requested", "creating", "ready", "resuming"}, "paused": {"pausing", "paused"}}
	want := []string{}
	for _, s := range q["state"] {
		for _, one := range strings.Split(s, ",") {
			st, ok := states[strings.TrimSpace(one)]
			if !ok {
				return nil, "", errorf(http.StatusBadRequest, "state %q is not running or paused", one)
			}
			want = append(want, st...)
		}
	}
	if len(want) == 0 {
		want = append(append(want, states["running"]...), states["paused"]...)
	}
	v.Set("state", strings.Join(want, ","))
	if md := q.Get("metadata"); md != "" {
		pairs, err := url.ParseQuery(md)
		if err != nil {
			return nil, "", errorf(http.StatusBadRequest, "metadata %q is not a query such as user=abc&app=prod", md)
		}
		for k, vs := range pairs {
			for _, val := range vs {
				v.Add("label", k+"="+val)
			}
		}
	}
	template := q.Get("template")
	if template != "" && template != BaseTemplate {
		v.Add("label", TemplateLabel+"="+template)
	}
	if order := q.Get("order"); order != "" && order != "desc" {
		return nil, "", errorf(http.StatusBadRequest, "order %q is not supported: Tether lists newest first (desc)", order)
	}
	if after := q.Get("startedAfter"); after != "" {
		if _, err := time.Parse(time.RFC3339Nano, after); err != nil {
			return nil, "", errorf(http.StatusBadRequest, "startedAfter %q is not an RFC 3339 time", after)
		}
		v.Set("created_after", after)
	}
	limit := 100
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 100 {
			return nil, "", errorf(http.StatusBadRequest, "limit must be 1 to 100, not %q", l)
		}
		limit = n
	}
	v.Set("limit", strconv.Itoa(limit))
	if t := q.Get("nextToken"); t != "" {
		v.Set("cursor", t)
	}
	return v, template, nil
}

// list answers E2B's ListedSandbox array, a page of it, the next page's
// token in X-Next-Token.
func (cp control) list(w http.ResponseWriter, r *http.Request, key string) error {
	q, template, err := listQuery(r.URL.Query())
	if err != nil {
		return err
	}
	rep, err := cp.core.call(r.Context(), r, key, http.MethodGet, "/v1/sandboxes?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	if rep.status == http.StatusBadRequest && q.Has("cursor") {
		return errorf(http.StatusBadRequest, "nextToken is not valid")
	}
	if !rep.ok() {
		return fromV1(rep)
	}
	var page struct {
		Items      []v1Sandbox `json:"items"`
		NextCursor *string     `json:"next_cursor"`
	}
	if err := rep.decode(&page); err != nil {
		return err
	}
	out := make([]detail, 0, len(page.Items))
	for _, s := range page.Items {
		if template == BaseTemplate && templateOf(s) != BaseTemplate {
			continue
		}
		d := detailOf(s, "")
		out = append(out, d)
	}
	if page.NextCursor != nil && *page.NextCursor != "" {
		w.Header().Set("X-Next-Token", *page.NextCursor)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// updateNetwork replaces a sandbox's egress rules (E2B's SandboxNetwork-
// UpdateConfig, sandbox.updateNetwork) through /v1's PATCH of its
// network: allowOut with all other traffic denied is its allow list,
// all traffic denied an empty one; its named policies are detached (the
// update is the whole configuration), its credentials kept. Only a sandbox created with an allow
// list (network.allowOut) has one to change; the rest is refused as at
// create.
func (cp control) updateNetwork(w http.ResponseWriter, r *http.Request, key string) error {
	var n newSandbox
	if err := decodeBody(r, &n.Network, false); err != nil {
		return err
	}
	if v, ok := n.Network["allow_internet_access"]; ok {
		b, isBool := v.(bool)
		if !isBool {
			return errorf(http.StatusBadRequest, "allow_internet_access must be true or false")
		}
		n.AllowInternetAccess = &b
		delete(n.Network, "allow_internet_access")
	}
	delete(n.Network, "allowPublicTraffic") // not an egress rule; fixed at create
	out, err := n.checkNetwork()
	if err != nil {
		return err
	}
	if !out.denied {
		return errorf(http.StatusBadRequest, "an update that lets all traffic out is not supported: Tether's sandboxes reach only what an allow list names (deny %q and allow what the sandbox needs)", allTraffic)
	}
	id := r.PathValue("id")
	if _, err := cp.lookup(r, key, id); err != nil {
		return err
	}
	allow := out.allow
	if allow == nil {
		allow = []string{}
	}
	// E2B's update replaces the whole configuration ("omitting a field
	// clears it"): the sandbox's named policies, Tether's own, go too.
	rep, err := cp.core.call(r.Context(), r, key, http.MethodPatch, sandboxPath(id, "/network", nil),
		map[string]any{"allow": allow, "policies": []string{}})
	if err != nil {
		return err
	}
	if !rep.ok() {
		return fromV1(rep)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
