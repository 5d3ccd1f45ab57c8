package http_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/docs"
	"github.com/tetherhq/tether/internal/domain"
	tetherhttp "github.com/tetherhq/tether/internal/http"
	"github.com/tetherhq/tether/internal/http/controlplane"
	"github.com/tetherhq/tether/internal/http/dataplane"
	"github.com/tetherhq/tether/internal/http/events"
	"github.com/tetherhq/tether/internal/http/httpapi"
	"github.com/tetherhq/tether/internal/http/processes"
)

// The contract is the OpenAPI 3 document the server publishes
// (docs/openapi.json, embedded in the docs package and served at
// /openapi.json). Every request the tests send through bundle.do is checked
// against it by checkContract.

// contract loads the document once, for all tests.
var contract = sync.OnceValues(func() (*contractDoc, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(docs.OpenAPIJSON)
	if err != nil {
		return nil, fmt.Errorf("load docs/openapi.json: %w", err)
	}
	// Match paths wherever the test server listens.
	doc.Servers = nil
	router, err := legacy.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("route docs/openapi.json: %w", err)
	}
	return &contractDoc{doc: doc, router: router}, nil
})

type contractDoc struct {
	doc    *openapi3.T
	router routers.Router
}

func init() {
	// Bodies the validator has no decoder for: archives are bytes, an event
	// stream is text.
	openapi3filter.RegisterBodyDecoder("application/x-tar", openapi3filter.FileBodyDecoder)
	openapi3filter.RegisterBodyDecoder("text/event-stream", openapi3filter.FileBodyDecoder)
}

// contractOptions accept any credentials (authentication is the server's
// business, and 401s are checked like any response) and refuse undeclared
// statuses.
var contractOptions = &openapi3filter.Options{
	AuthenticationFunc:    func(context.Context, *openapi3filter.AuthenticationInput) error { return nil },
	IncludeResponseStatus: true,
}

// checkContract checks a request and its response against the contract:
//
//   - the response to a documented operation is one the operation declares:
//     its status, its required headers and its body, problems included;
//   - a request the contract calls invalid is refused (4xx), so that the
//     contract is never stricter than the server;
//   - the response to anything undocumented (an unknown route or method) that
//     is a problem is a valid Problem.
//
// The Swagger UI's own files are not part of the contract.
func checkContract(t *testing.T, req *http.Request, body []byte, r *response) {
	t.Helper()
	if strings.HasPrefix(req.URL.Path, "/swagger/") {
		return
	}
	if req.Method == http.MethodHead {
		return // no body to check (HEAD is only the port routes')
	}
	if proxiedPath.MatchString(req.URL.Path) && mediaType(r) != "application/problem+json" {
		return // a sandbox app's answer, which the contract leaves as it is
	}
	c, err := contract()
	if err != nil {
		t.Fatal(err)
	}
	what := req.Method + " " + req.URL.RequestURI()
	route, pathParams, err := c.router.FindRoute(req)
	if err != nil {
		if mediaType(r) != "application/problem+json" {
			if r.Status < 300 || r.Status >= 400 { // a redirect is gin's, not the API's
				t.Errorf("%s: not in the contract (%v), and the answer %d is no problem document", what, err, r.Status)
			}
			return
		}
		var v any
		if err := json.Unmarshal(r.Body, &v); err != nil {
			t.Errorf("%s: problem document is not JSON: %v", what, err)
			return
		}
		if err := c.doc.Components.Schemas["Problem"].Value.VisitJSON(v); err != nil {
			t.Errorf("%s: the problem document breaks the contract's Problem schema: %v\n%s", what, err, r.Body)
		}
		return
	}

	vreq := req.Clone(context.Background())
	vreq.Body = io.NopCloser(bytes.NewReader(body))
	in := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: pathParams, Route: route, Options: contractOptions}
	if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil && r.Status < 400 {
		t.Errorf("%s: the contract calls this request invalid, yet the server answered %d: %v", what, r.Status, err)
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 r.Status,
		Header:                 r.Header,
		Body:                   io.NopCloser(bytes.NewReader(r.Body)),
		Options:                contractOptions,
	}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		t.Errorf("%s (operation %s): the response breaks the contract: %v\nresponse: %d %s\n%s",
			what, route.Operation.OperationID, err, r.Status, r.Header.Get("Content-Type"), truncate(r.Body, 2000))
	}
	checkStrict(t, what, route, r)
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return append(b[:n:n], "..."...)
	}
	return b
}

// proxiedPath matches the paths whose answers are a sandbox app's.
var proxiedPath = regexp.MustCompile(`^/v1/sandboxes/[^/]+/ports/[^/]+/|^/p/[^/]+/`)

// undocumentedRoutes are the routes the contract leaves out on purpose.
var undocumentedRoutes = []string{
	"GET /swagger/{any}", // Swagger UI's files
	"GET /ui/{filepath}", // the web console's static files (internal/http/console)
}

// undocumented reports whether a served route is outside the contract: the
// routes above, and E2B's protocol under /e2b, which is E2B's contract, not
// Tether's (docs/e2b.md; internal/e2b tests it with E2B's own SDK).
func undocumented(key string) bool {
	_, path, _ := strings.Cut(key, " ")
	return slices.Contains(undocumentedRoutes, key) || strings.HasPrefix(path, "/e2b/")
}

// TestEveryRouteIsInTheContract checks that every route the server serves is
// an operation of the contract, with an operationId, and that every
// operation of the contract is served.
func TestEveryRouteIsInTheContract(t *testing.T) {
	t.Parallel()
	c, err := contract()
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t)
	engine, ok := b.Handler.(*gin.Engine)
	if !ok {
		t.Fatalf("NewServer returned %T, want *gin.Engine", b.Handler)
	}
	served := map[string]bool{}
	for _, rt := range engine.Routes() {
		segs := strings.Split(rt.Path, "/")
		for i, seg := range segs {
			if len(seg) > 1 && (seg[0] == ':' || seg[0] == '*') {
				segs[i] = "{" + seg[1:] + "}"
			}
		}
		served[rt.Method+" "+strings.Join(segs, "/")] = true
	}
	documented := map[string]bool{}
	ids := map[string]string{}
	for path, item := range c.doc.Paths.Map() {
		for method, op := range item.Operations() {
			key := method + " " + path
			documented[key] = true
			if op.OperationID == "" {
				t.Errorf("%s has no operationId", key)
			}
			if prev, dup := ids[op.OperationID]; dup {
				t.Errorf("%s and %s share the operationId %s", prev, key, op.OperationID)
			}
			ids[op.OperationID] = key
		}
	}
	for _, key := range slices.Sorted(maps.Keys(served)) {
		if !documented[key] && !undocumented(key) {
			t.Errorf("route %s is served but not in docs/openapi.json: annotate its handler (with @ID) and run `make docs`", key)
		}
	}
	for _, key := range slices.Sorted(maps.Keys(documented)) {
		if !served[key] {
			t.Errorf("docs/openapi.json documents %s, which the server does not serve", key)
		}
	}
	if len(documented) < 20 {
		t.Errorf("the contract has only %d operations", len(documented))
	}
}

// TestContractIsServed checks /openapi.json, /openapi.yaml and that Swagger
// UI shows the OpenAPI 3 document.
func TestContractIsServed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.do(t, http.MethodGet, "/openapi.json", nil, noAuth())
	wantStatus(t, r, http.StatusOK)
	if !bytes.Equal(r.Body, docs.OpenAPIJSON) {
		t.Error("/openapi.json is not docs/openapi.json")
	}
	y := b.do(t, http.MethodGet, "/openapi.yaml", nil, noAuth())
	if y.Status != http.StatusOK || mediaType(y) != "application/yaml" || !bytes.Equal(y.Body, docs.OpenAPIYAML) {
		t.Errorf("/openapi.yaml = %d %s, want docs/openapi.yaml as application/yaml", y.Status, y.Header.Get("Content-Type"))
	}
	globalsMu.RLock() // see globalsMu
	ui := b.do(t, http.MethodGet, "/swagger/swagger-initializer.js", nil, noAuth())
	globalsMu.RUnlock()
	if ui.Status != http.StatusOK || !strings.Contains(string(ui.Body), `url: "/openapi.json"`) {
		t.Errorf("/swagger/swagger-initializer.js = %d, want Swagger UI on /openapi.json:\n%s", ui.Status, truncate(ui.Body, 2000))
	}
	var doc struct {
		OpenAPI    string `json:"openapi"`
		Components struct {
			SecuritySchemes map[string]struct {
				Type   string `json:"type"`
				Scheme string `json:"scheme"`
			} `json:"securitySchemes"`
		} `json:"components"`
	}
	r.decode(t, &doc)
	if doc.OpenAPI != "3.0.3" {
		t.Errorf("openapi = %q, want 3.0.3", doc.OpenAPI)
	}
	if s := doc.Components.SecuritySchemes["BearerAuth"]; s.Type != "http" || s.Scheme != "bearer" {
		t.Errorf("BearerAuth = %+v, want http bearer", s)
	}
}

// apiTypes maps each schema of the contract to the Go type the server
// encodes it from (nil for schemas that are only enums).
var apiTypes = map[string]any{
	"APIKey":                  controlplane.APIKey{},
	"APIKeyList":              controlplane.APIKeyList{},
	"Activity":                dataplane.Activity{},
	"ActivityList":            dataplane.ActivityList{},
	"CreateAPIKeyRequest":     controlplane.CreateAPIKeyRequest{},
	"CreatedAPIKey":           controlplane.CreatedAPIKey{},
	"Capabilities":            controlplane.Capabilities{},
	"CreateSandboxRequest":    controlplane.CreateSandboxRequest{},
	"Event":                   events.Event{},
	"EventList":               events.EventList{},
	"ExecRequest":             dataplane.ExecRequest{},
	"ExecResult":              dataplane.ExecResult{},
	"FileChange":              processes.FileChange{},
	"Process":                 processes.Process{},
	"ProcessDropped":          processes.ProcessDropped{},
	"ProcessExit":             processes.ProcessExit{},
	"ProcessList":             processes.ProcessList{},
	"ProcessOutput":           processes.ProcessOutput{},
	"SignalRequest":           processes.SignalRequest{},
	"StartProcessRequest":     processes.StartProcessRequest{},
	"TerminalControl":         processes.TerminalControl{},
	"TerminalSize":            processes.TerminalSize{},
	"Node":                    controlplane.Node{},
	"NodeList":                controlplane.NodeList{},
	"Health":                  tetherhttp.Health{},
	"OwnerLease":              controlplane.OwnerLease{},
	"OwnerRelease":            controlplane.OwnerRelease{},
	"OwnerRequest":            controlplane.OwnerRequest{},
	"Owner":                   controlplane.Owner{},
	"OwnerList":               controlplane.OwnerList{},
	"Problem":                 httpapi.Problem{},
	"ReconcileEvent":          events.ReconcileEvent{},
	"ReconcileEventList":      events.ReconcileEventList{},
	"Provider":                controlplane.Provider{},
	"ProviderImage":           controlplane.ProviderImage{},
	"ProviderList":            controlplane.ProviderList{},
	"Sandbox":                 controlplane.Sandbox{},
	"SandboxList":             controlplane.SandboxList{},
	"TTLRequest":              controlplane.TTLRequest{},
	"Pool":                    controlplane.Pool{},
	"PoolList":                controlplane.PoolList{},
	"PoolDeleted":             controlplane.PoolDeleted{},
	"PoolRefill":              controlplane.PoolRefill{},
	"CreatePoolRequest":       controlplane.CreatePoolRequest{},
	"UpdatePoolRequest":       controlplane.UpdatePoolRequest{},
	"Snapshot":                controlplane.Snapshot{},
	"SnapshotRequest":         controlplane.SnapshotRequest{},
	"SnapshotList":            controlplane.SnapshotList{},
	"SandboxState":            nil,
	"SandboxReason":           nil,
	"CreateWebhookRequest":    controlplane.CreateWebhookRequest{},
	"CreatedWebhook":          controlplane.CreatedWebhook{},
	"ReplayWebhookRequest":    controlplane.ReplayWebhookRequest{},
	"Preview":                 dataplane.Preview{},
	"NetworkCredential":       controlplane.NetworkCredential{},
	"NetworkPolicy":           controlplane.NetworkPolicy{},
	"NetworkPolicyList":       controlplane.NetworkPolicyList{},
	"PutNetworkPolicyRequest": controlplane.PutNetworkPolicyRequest{},
	"PutSecretRequest":        controlplane.PutSecretRequest{},
	"SandboxNetwork":          controlplane.SandboxNetwork{},
	"Secret":                  controlplane.Secret{},
	"SecretList":              controlplane.SecretList{},
	"UpdateNetworkRequest":    controlplane.UpdateNetworkRequest{},
	"PreviewList":             dataplane.PreviewList{},
	"PreviewRequest":          dataplane.PreviewRequest{},
	"Webhook":                 controlplane.Webhook{},
	"WebhookDelivery":         controlplane.WebhookDelivery{},
	"WebhookDeliveryList":     controlplane.WebhookDeliveryList{},
	"WebhookFilter":           controlplane.WebhookFilter{},
	"WebhookFilterRequest":    controlplane.WebhookFilterRequest{},
	"WebhookList":             controlplane.WebhookList{},
}

// TestContractSchemasMatchTheGoTypes keeps the schemas honest about what
// encoding/json does with the Go types: a field without omitempty is always
// sent, so it is required; a pointer, map or slice field without omitempty
// can be sent as null unless the code never leaves it nil, and the contract
// says nullable exactly for the pointers (the API fills its maps and slices);
// a time is a date-time, an int64 an int64.
func TestContractSchemasMatchTheGoTypes(t *testing.T) {
	t.Parallel()
	c, err := contract()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range slices.Sorted(maps.Keys(c.doc.Components.Schemas)) {
		if _, ok := apiTypes[name]; !ok {
			t.Errorf("schema %s has no Go type in apiTypes", name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(apiTypes)) {
		ref, ok := c.doc.Components.Schemas[name]
		if !ok {
			t.Errorf("schema %s is not in the contract (did swag skip it? run `make docs` without -q)", name)
			continue
		}
		if apiTypes[name] != nil {
			checkSchema(t, name, ref.Value, reflect.TypeOf(apiTypes[name]))
		}
	}
	// RenewedSandbox is the 200 of renewSandbox: Sandbox plus capped.
	op := c.doc.Paths.Value("/v1/sandboxes/{id}/renew").Post
	schema := op.Responses.Status(http.StatusOK).Value.Content.Get("application/json").Schema.Value
	merged := &openapi3.Schema{Type: &openapi3.Types{openapi3.TypeObject}, Properties: openapi3.Schemas{}}
	for _, part := range schema.AllOf {
		maps.Copy(merged.Properties, part.Value.Properties)
		merged.Required = append(merged.Required, part.Value.Required...)
	}
	checkSchema(t, "renewSandbox 200", merged, reflect.TypeFor[controlplane.RenewedSandbox]())
}

func checkSchema(t *testing.T, name string, s *openapi3.Schema, typ reflect.Type) {
	t.Helper()
	seen := map[string]bool{}
	for f := range jsonFields(typ) {
		tag := f.Tag.Get("json")
		field, opts, _ := strings.Cut(tag, ",")
		omitempty := strings.Contains(opts, "omitempty")
		seen[field] = true
		where := name + "." + field
		prop, ok := s.Properties[field]
		if !ok {
			t.Errorf("%s: not in the contract", where)
			continue
		}
		p := prop.Value
		if got := slices.Contains(s.Required, field); got != !omitempty {
			t.Errorf("%s: required = %v, want %v (omitempty: %v)", where, got, !omitempty, omitempty)
		}
		nullable := f.Type.Kind() == reflect.Pointer && !omitempty && !strings.HasSuffix(name, "Request")
		if p.Nullable != nullable {
			t.Errorf(`%s: nullable = %v, want %v: a pointer field without omitempty is null when unset (tag it extensions:"x-nullable")`, where, p.Nullable, nullable)
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft == reflect.TypeFor[time.Time]():
			if p.Format != "date-time" {
				t.Errorf(`%s: format = %q, want date-time (tag it format:"date-time")`, where, p.Format)
			}
		case ft.Kind() == reflect.Int64:
			if p.Format != "int64" {
				t.Errorf(`%s: format = %q, want int64 (tag it format:"int64")`, where, p.Format)
			}
		}
		if slices.ContainsFunc(p.Enum, func(v any) bool { return v != nil }) && p.Extensions["x-enum-varnames"] == nil {
			t.Errorf("%s: an enum without x-enum-varnames", where)
		}
		if p.Extensions["x-go-type"] != nil {
			checkNullableEnum(t, where, p)
		}
	}
	for field := range s.Properties {
		if !seen[field] {
			t.Errorf("%s.%s: in the contract but not in the Go type", name, field)
		}
	}
}

// jsonFields yields the fields encoding/json encodes, embedded structs
// flattened.
func jsonFields(typ reflect.Type) func(func(reflect.StructField) bool) {
	return func(yield func(reflect.StructField) bool) {
		for f := range typ.Fields() {
			if f.Anonymous && f.Type.Kind() == reflect.Struct {
				for g := range jsonFields(f.Type) {
					if !yield(g) {
						return
					}
				}
				continue
			}
			if !f.IsExported() || f.Tag.Get("json") == "-" {
				continue
			}
			if !yield(f) {
				return
			}
		}
	}
}

// checkNullableEnum checks a nullable field of a named enum: the enum or
// null (anyOf), typed (x-go-type) as that enum, which the document has.
func checkNullableEnum(t *testing.T, where string, p *openapi3.Schema) {
	t.Helper()
	name, _ := p.Extensions["x-go-type"].(string)
	if !p.Nullable || len(p.AnyOf) != 2 || p.AnyOf[0].Ref != "#/components/schemas/"+name ||
		!reflect.DeepEqual(p.AnyOf[1].Value.Enum, []any{nil}) || !p.AnyOf[1].Value.Nullable {
		t.Errorf("%s: x-go-type %q on what is not a nullable field of anyOf that enum or null", where, name)
		return
	}
	c, err := contract()
	if err != nil {
		t.Fatal(err)
	}
	if named := c.doc.Components.Schemas[name]; named == nil || named.Value == nil || len(named.Value.Enum) == 0 {
		t.Errorf("%s: x-go-type %q names no enum schema", where, name)
	}
}

// TestContractEnumsMatchTheDomain checks the contract's enums against the
// domain's constants, so that a new state or error code cannot be missing.
func TestContractEnumsMatchTheDomain(t *testing.T) {
	t.Parallel()
	c, err := contract()
	if err != nil {
		t.Fatal(err)
	}
	enum := func(s *openapi3.Schema) []string {
		var out []string
		for _, v := range s.Enum {
			out = append(out, fmt.Sprint(v))
		}
		slices.Sort(out)
		return out
	}
	var states []string
	for _, s := range domain.States {
		states = append(states, string(s))
	}
	slices.Sort(states)
	if got := enum(c.doc.Components.Schemas["SandboxState"].Value); !slices.Equal(got, states) {
		t.Errorf("SandboxState = %v, want %v", got, states)
	}
	var reasons []string
	for _, r := range domain.Reasons {
		reasons = append(reasons, string(r))
	}
	slices.Sort(reasons)
	if got := enum(c.doc.Components.Schemas["SandboxReason"].Value); !slices.Equal(got, reasons) {
		t.Errorf("SandboxReason = %v, want %v", got, reasons)
	}
	if got := c.doc.Components.Schemas["Sandbox"].Value.Properties["reason"].Value.Extensions["x-go-type"]; got != "SandboxReason" {
		t.Errorf("Sandbox.reason is of Go type %v, want SandboxReason", got)
	}
	problem := c.doc.Components.Schemas["Problem"].Value
	codes := enum(problem.Properties["code"].Value)
	for code := range tetherhttp.StatusOfCode {
		if !slices.Contains(codes, string(code)) {
			t.Errorf("Problem.code lacks %s", code)
		}
	}
	if len(codes) != len(tetherhttp.StatusOfCode) {
		t.Errorf("Problem.code has %d codes, the server %d", len(codes), len(tetherhttp.StatusOfCode))
	}
}
