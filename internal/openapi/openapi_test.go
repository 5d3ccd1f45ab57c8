package openapi_test

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"go.yaml.in/yaml/v3"

	"github.com/tetherhq/tether/internal/openapi"
)

// swagger is a small Swagger 2.0 document of the kind swag makes.
const swagger = `{
  "swagger": "2.0",
  "info": {"title": "T", "version": "1.0", "contact": {}},
  "basePath": "/",
  "paths": {
    "/things/{id}": {
      "get": {
        "operationId": "getThing",
        "produces": ["application/octet-stream"],
        "parameters": [
          {"type": "string", "example": "t1", "name": "id", "in": "path", "required": true},
          {"type": "string", "enum": ["settled", "released"], "example": "settled", "name": "until", "in": "query"},
          {"type": "array", "items": {"type": "string"}, "collectionFormat": "multi", "example": "a=b", "name": "label", "in": "query"}
        ],
        "responses": {
          "200": {"description": "OK", "schema": {"type": "file"},
                  "headers": {"X-Request-ID": {"type": "string"}}},
          "404": {"description": "Not Found", "schema": {"$ref": "#/definitions/Problem"},
                  "headers": {"X-Request-ID": {"type": "string"}}}
        },
        "security": [{"BearerAuth": []}]
      },
      "put": {
        "operationId": "putThing",
        "consumes": ["application/octet-stream"],
        "produces": ["application/json", "text/event-stream"],
        "parameters": [
          {"type": "string", "name": "id", "in": "path", "required": true},
          {"name": "content", "in": "body", "required": true, "schema": {"type": "string"}}
        ],
        "responses": {
          "200": {"description": "OK", "schema": {"allOf": [{"$ref": "#/definitions/Thing"},
                  {"type": "object", "properties": {"capped": {"type": "boolean"}, "mood": {"type": "string", "enum": ["calm"]}}}]}},
          "401": {"description": "Unauthorized", "schema": {"$ref": "#/definitions/Problem"},
                  "headers": {"WWW-Authenticate": {"type": "string"}}},
          "429": {"description": "Too Many Requests", "schema": {"$ref": "#/definitions/Problem"},
                  "headers": {"Retry-After": {"type": "string"}}},
          "503": {"description": "Unavailable", "schema": {"$ref": "#/definitions/Problem"},
                  "headers": {"Retry-After": {"type": "string"}}}
        }
      }
    }
  },
  "definitions": {
    "Problem": {"type": "object", "required": ["code"], "properties": {
      "code": {"type": "string", "enum": ["NOT_FOUND"], "x-enum-varnames": ["ProblemCodeNotFound"]},
      "state": {"type": "string", "enum": ["ready", "failed"], "x-enum-varnames": ["StateReady", "StateFailed"], "x-enum-schema": "State"}
    }},
    "Thing": {"type": "object", "required": ["id", "owner", "params", "state"], "properties": {
      "id": {"type": "string"},
      "owner": {"type": "string", "x-nullable": true, "description": "the owner", "example": "me"},
      "params": {"type": "object"},
      "labels": {"type": "object", "additionalProperties": {"type": "string"}},
      "state": {"type": "string", "enum": ["ready", "failed"], "x-enum-varnames": ["StateReady", "StateFailed"], "x-enum-schema": "State", "description": "where it is"},
      "from": {"type": "string", "enum": ["ready", "failed"], "x-enum-varnames": ["StateReady", "StateFailed"], "x-enum-schema": "State", "x-nullable": true},
      "why": {"type": "string", "enum": ["asked"], "x-enum-varnames": ["WhyAsked"], "x-enum-schema": "Why", "x-nullable": true},
      "kind": {"type": "string", "enum": ["big_one", "SMALL", ""]},
      "tags": {"type": "array", "items": {"type": "string", "enum": ["sandbox.state_changed"]}},
      "how": {"type": "string", "enum": ["fast"], "x-enum-schema": "How"}
    }}
  },
  "securityDefinitions": {
    "BearerAuth": {"type": "apiKey", "name": "Authorization", "in": "header", "description": "a key"}
  }
}`

func convert(t *testing.T, doc string) *openapi3.T {
	t.Helper()
	jsonDoc, yamlDoc, err := openapi.Convert([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	again, _, err := openapi.Convert([]byte(doc))
	if err != nil || !bytes.Equal(again, jsonDoc) {
		t.Fatalf("converting twice gave different documents (%v)", err)
	}
	var fromJSON, fromYAML any
	if err := json.Unmarshal(jsonDoc, &fromJSON); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(yamlDoc, &fromYAML); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(normalize(fromJSON), normalize(fromYAML)) {
		t.Fatalf("the YAML document is not the JSON one:\n%s", yamlDoc)
	}
	if !bytes.HasPrefix(jsonDoc, []byte("{\n  \"openapi\": \"3.0.3\",\n  \"info\"")) || !bytes.HasPrefix(yamlDoc, []byte("openapi: 3.0.3\ninfo:")) {
		t.Errorf("the documents do not start with openapi and info:\n%.80s\n%.80s", jsonDoc, yamlDoc)
	}
	out, err := openapi3.NewLoader().LoadFromData(jsonDoc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// normalize makes JSON and YAML numbers comparable.
func normalize(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = normalize(e)
		}
	case []any:
		for i, e := range v {
			v[i] = normalize(e)
		}
	case int:
		return float64(v)
	}
	return v
}

func TestConvertCompletesTheDocument(t *testing.T) {
	t.Parallel()
	doc := convert(t, swagger)

	if s := doc.Components.SecuritySchemes["BearerAuth"].Value; s.Type != "http" || s.Scheme != "bearer" || s.Name != "" || s.In != "" {
		t.Errorf("BearerAuth = %+v, want http bearer", s)
	}
	if doc.Info.Contact != nil {
		t.Errorf("the empty contact is still there: %+v", doc.Info.Contact)
	}

	get := doc.Paths.Value("/things/{id}").Get
	if c := get.Responses.Status(404).Value.Content; len(c) != 1 || c.Get(openapi.ProblemMediaType) == nil {
		t.Errorf("404 content = %v, want only %s", keys(c), openapi.ProblemMediaType)
	}
	if h := get.Responses.Status(404).Value.Headers["X-Request-ID"].Value; !h.Required {
		t.Error("X-Request-ID is not required")
	}
	if s := get.Responses.Status(200).Value.Content.Get("application/octet-stream").Schema.Value; s.Format != "binary" {
		t.Errorf("a file response is %v %s, want a binary string", s.Type, s.Format)
	}
	if p := get.Parameters.GetByInAndName("path", "id"); p.Example != "t1" {
		t.Errorf("id example = %v, want t1", p.Example)
	}
	if p := get.Parameters.GetByInAndName("query", "label"); !reflect.DeepEqual(p.Example, []any{"a=b"}) {
		t.Errorf("label example = %#v, want a list", p.Example)
	}
	until := get.Parameters.GetByInAndName("query", "until").Schema.Value
	if got := until.Extensions["x-enum-varnames"]; !reflect.DeepEqual(got, []any{"GetThingUntilSettled", "GetThingUntilReleased"}) {
		t.Errorf("until's x-enum-varnames = %v", got)
	}

	put := doc.Paths.Value("/things/{id}").Put
	if s := put.RequestBody.Value.Content.Get("application/octet-stream").Schema.Value; s.Format != "binary" {
		t.Errorf("a binary body is %v %q, want format binary", s.Type, s.Format)
	}
	if put.RequestBody.Value.Extensions["x-originalParamName"] != nil {
		t.Error("x-originalParamName is still there")
	}
	ok := put.Responses.Status(200).Value.Content
	if s := ok.Get("text/event-stream").Schema; s.Ref != "" || !s.Value.Type.Is("string") {
		t.Errorf("the event stream is %+v, want a string", s)
	}
	if parts := ok.Get("application/json").Schema.Value.AllOf; len(parts) != 2 || !slices.Equal(parts[1].Value.Required, []string{"capped", "mood"}) {
		t.Errorf("the composed response's own properties are not required: %+v", parts)
	}
	mood := ok.Get("application/json").Schema.Value.AllOf[1].Value.Properties["mood"].Value
	if got := mood.Extensions["x-enum-varnames"]; !reflect.DeepEqual(got, []any{"PutThing200MoodCalm"}) {
		t.Errorf("the composed response's mood's x-enum-varnames = %v", got)
	}
	for code, header := range map[int]string{401: "WWW-Authenticate", 429: "Retry-After"} {
		if h := put.Responses.Status(code).Value.Headers[header].Value; !h.Required {
			t.Errorf("%d %s is not required", code, header)
		}
	}
	if h := put.Responses.Status(503).Value.Headers["Retry-After"].Value; h.Required {
		t.Error("503 Retry-After is required; the server sends it only with UNAVAILABLE")
	}

	thing := doc.Components.Schemas["Thing"].Value
	if p := thing.Properties["owner"].Value; !p.Nullable || p.Extensions["x-nullable"] != nil {
		t.Errorf("owner = %+v, want nullable", p)
	}
	if ap := thing.Properties["params"].Value.AdditionalProperties; ap.Has == nil || !*ap.Has {
		t.Error("a free-form object is not open (additionalProperties true)")
	}
	if ap := thing.Properties["labels"].Value.AdditionalProperties; ap.Has != nil || ap.Schema == nil {
		t.Error("a map of strings changed")
	}
	state := doc.Components.Schemas["State"]
	if state == nil || !reflect.DeepEqual(state.Value.Enum, []any{"ready", "failed"}) || state.Value.Extensions["x-enum-schema"] != nil {
		t.Fatalf("the shared enum State = %+v", state)
	}
	for _, c := range []struct{ schema, field, description string }{
		{"Thing", "state", "where it is"},
		{"Problem", "state", ""},
	} {
		p := doc.Components.Schemas[c.schema].Value.Properties[c.field].Value
		if len(p.AllOf) != 1 || p.AllOf[0].Ref != "#/components/schemas/State" || !p.Type.Is("string") || p.Nullable ||
			p.Description != c.description || len(p.Enum) > 0 {
			t.Errorf("%s.%s = %+v, want a string, allOf State, its description", c.schema, c.field, p)
		}
	}
	// A nullable field is the named enum or null (anyOf: OpenAPI 3.0.3's
	// nullable does not reach into an allOf, and null among the enum's
	// values makes oapi-codegen a constant "<nil>"), typed as the named
	// enum and not as a string (openapi-typescript would make string |
	// State | null of that); the enum is kept even when only nullable fields use it, so that
	// a pruning generator keeps its type and constants.
	for _, c := range []struct{ field, enum string }{{"from", "State"}, {"why", "Why"}} {
		p := thing.Properties[c.field].Value
		if len(p.AllOf) != 0 || len(p.Enum) != 0 || !p.Nullable || p.Type != nil || p.Extensions["x-go-type"] != c.enum ||
			len(p.AnyOf) != 2 || p.AnyOf[0].Ref != "#/components/schemas/"+c.enum {
			t.Errorf("Thing.%s = %+v, want nullable, no type, anyOf %s or null, of Go type %s", c.field, p, c.enum, c.enum)
			continue
		}
		if null := p.AnyOf[1].Value; p.AnyOf[1].Ref != "" || !null.Nullable || !null.Type.Is("string") || !reflect.DeepEqual(null.Enum, []any{nil}) {
			t.Errorf("Thing.%s's second choice = %+v, want the nullable string enum [null]", c.field, null)
		}
	}
	// Enums the annotations do not name are named after where they are and
	// their values; names the annotations give are kept.
	for _, c := range []struct {
		where string
		s     *openapi3.Schema
		want  []any
	}{
		{"Thing.kind", thing.Properties["kind"].Value, []any{"ThingKindBigOne", "ThingKindSmall", "ThingKindEmpty"}},
		{"Thing.tags", thing.Properties["tags"].Value.Items.Value, []any{"ThingTagsSandboxStateChanged"}},
		{"How", doc.Components.Schemas["How"].Value, []any{"HowFast"}},
		{"State", state.Value, []any{"StateReady", "StateFailed"}},
		{"Problem.code", doc.Components.Schemas["Problem"].Value.Properties["code"].Value, []any{"ProblemCodeNotFound"}},
	} {
		if got := c.s.Extensions["x-enum-varnames"]; !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: x-enum-varnames = %v, want %v", c.where, got, c.want)
		}
	}
	if why := doc.Components.Schemas["Why"]; why == nil || !reflect.DeepEqual(why.Value.Enum, []any{"asked"}) || why.Value.Nullable {
		t.Errorf("the enum Why, which only a nullable field uses, is %+v, want kept, without null", why)
	}
}

func TestConvertRefuses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, from, to, want string }{
		{"no operationId", `"operationId": "getThing",`, ``, "operationId"},
		{"an enum with too few names", `"enum": ["asked"], "x-enum-varnames": ["WhyAsked"]`,
			`"enum": ["asked", "told"], "x-enum-varnames": ["WhyAsked"]`, "1 x-enum-varnames for 2 values"},
		{"an enum naming a value twice", `"enum": ["asked"], "x-enum-varnames": ["WhyAsked"]`,
			`"enum": ["asked", "told"], "x-enum-varnames": ["WhyAsked", "WhyAsked"]`, "twice"},
		{"values that make one name", `"enum": ["asked"], "x-enum-varnames": ["WhyAsked"]`, `"enum": ["a-b", "a_b"]`, "twice"},
		{"two enums under one name", `"enum": ["ready", "failed"], "x-enum-varnames": ["StateReady", "StateFailed"], "x-enum-schema": "State", "description"`,
			`"enum": ["ready"], "x-enum-varnames": ["StateReady"], "x-enum-schema": "State", "description"`, "differs"},
		{"no apiKey", `"type": "apiKey"`, `"type": "basic"`, "apiKey"},
	} {
		doc := strings.Replace(swagger, c.from, c.to, 1)
		if doc == swagger {
			t.Fatalf("%s: the test's replacement did not apply", c.name)
		}
		if _, _, err := openapi.Convert([]byte(doc)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one about %s", c.name, err, c.want)
		}
	}
}

func keys(c openapi3.Content) []string {
	var out []string
	for k := range c {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestPublishedDocument checks docs/openapi.json for what client generators
// need of it.
func TestPublishedDocument(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../docs/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(t.Context()); err != nil {
		t.Fatal(err)
	}
	schemas := doc.Components.Schemas

	// Nullable where the server sends null, and required throughout.
	for schema, fields := range map[string][]string{
		"Sandbox":     {"owner", "reason", "error", "provider_id", "work_dir", "ready_at", "ended_at", "released_at"},
		"Event":       {"from", "reason"},
		"SandboxList": {"next_cursor"},
		"EventList":   {"next_cursor"},
		"Provider":    {"reason", "work_dir"},
	} {
		s := schemas[schema].Value
		for _, f := range fields {
			if !s.Properties[f].Value.Nullable {
				t.Errorf("%s.%s is not nullable", schema, f)
			}
			if !slices.Contains(s.Required, f) {
				t.Errorf("%s.%s is not required", schema, f)
			}
		}
	}
	for _, f := range []string{"created_at", "updated_at", "ready_at", "ended_at", "released_at", "expires_at", "create_deadline"} {
		if got := schemas["Sandbox"].Value.Properties[f].Value.Format; got != "date-time" {
			t.Errorf("Sandbox.%s format = %q", f, got)
		}
	}
	if got := schemas["Event"].Value.Properties["id"].Value.Format; got != "int64" {
		t.Errorf("Event.id format = %q", got)
	}
	if _, dup := schemas["RenewedSandbox"]; dup {
		t.Error("RenewedSandbox duplicates Sandbox")
	}
	if ap := schemas["CreateSandboxRequest"].Value.Properties["params"].Value.AdditionalProperties; ap.Has == nil || !*ap.Has {
		t.Error("CreateSandboxRequest.params is not an open object")
	}

	tags := map[string]bool{}
	for _, tag := range doc.Tags {
		if tag.Description == "" {
			t.Errorf("tag %s has no description", tag.Name)
		}
		tags[tag.Name] = true
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			where := method + " " + path
			if op.OperationID == "" {
				t.Errorf("%s has no operationId", where)
			}
			for _, tag := range op.Tags {
				if !tags[tag] {
					t.Errorf("%s: tag %s is not declared", where, tag)
				}
			}
			for _, p := range op.Parameters {
				if p.Value.Example == nil {
					t.Errorf("%s: parameter %s has no example", where, p.Value.Name)
				}
			}
			if strings.HasPrefix(path, "/v1/") {
				if op.Security == nil || len(*op.Security) == 0 {
					t.Errorf("%s: no security", where)
				}
				for _, code := range []int{401, 429, 500, 503} {
					if op.Responses.Status(code) == nil {
						t.Errorf("%s: no %d response", where, code)
					}
				}
			} else if op.Responses.Status(500) == nil {
				t.Errorf("%s: no 500 response", where)
			}
			for code, resp := range op.Responses.Map() {
				r := resp.Value
				if h := r.Headers["X-Request-ID"]; h == nil || !h.Value.Required {
					t.Errorf("%s %s: X-Request-ID is not declared required", where, code)
				}
				if code >= "400" && (path != "/readyz" || code != "503") {
					if len(r.Content) != 1 || r.Content.Get(openapi.ProblemMediaType) == nil ||
						r.Content.Get(openapi.ProblemMediaType).Schema.Ref != "#/components/schemas/Problem" {
						t.Errorf("%s %s: content %v, want only %s with Problem", where, code, keys(r.Content), openapi.ProblemMediaType)
					}
				}
			}
		}
	}
	create := doc.Paths.Value("/v1/sandboxes").Post
	for _, code := range []int{200, 202} {
		if h := create.Responses.Status(code).Value.Headers["Location"]; h == nil || !h.Value.Required {
			t.Errorf("createSandbox %d: no required Location", code)
		}
	}
	// A preview's Location names what GET answers.
	if h := doc.Paths.Value("/v1/sandboxes/{id}/previews").Post.Responses.Status(201).Value.Headers["Location"]; h == nil || !h.Value.Required {
		t.Error("createPreview 201: no required Location")
	}
	if item := doc.Paths.Value("/v1/sandboxes/{id}/previews/{preview_id}"); item == nil || item.Get == nil || item.Get.OperationID != "getPreview" {
		t.Error("no getPreview at /v1/sandboxes/{id}/previews/{preview_id}")
	}
	// The two event feeds page alike: cursor is next_cursor, after an event id.
	for _, path := range []string{"/v1/events", "/v1/sandboxes/{id}/events"} {
		op := doc.Paths.Value(path).Get
		if p := op.Parameters.GetByInAndName("query", "cursor"); p == nil || !p.Schema.Value.Type.Is("string") {
			t.Errorf("%s: no string cursor", path)
		}
		if p := op.Parameters.GetByInAndName("query", "after"); p == nil || p.Schema.Value.Format != "int64" {
			t.Errorf("%s: no int64 after", path)
		}
	}
}
