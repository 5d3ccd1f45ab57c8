package http_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/routers"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/tetherhq/tether/docs"
)

// kin-openapi reads nullable loosely: a null passes any schema marked
// nullable, whatever its allOf or enum say. OpenAPI 3.0.3 reads it
// strictly (nullable widens only the type beside it; allOf parts and enums
// are checked on their own), and so do the validators users run (ajv,
// go-swagger). strictContract reads the contract that way: every schema of
// docs/openapi.json becomes JSON Schema, nullable becomes "null" added to
// its type, and a JSON Schema validator checks each response body too.

// strictDocURL is the document's name for the validator.
const strictDocURL = "tether:openapi.json"

type strictDoc struct {
	compiler *jsonschema.Compiler
	mu       sync.Mutex
	schemas  map[string]*jsonschema.Schema
}

var strictContract = sync.OnceValues(func() (*strictDoc, error) {
	return newStrictDoc(docs.OpenAPIJSON)
})

func newStrictDoc(doc []byte) (*strictDoc, error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return nil, fmt.Errorf("strict contract: %w", err)
	}
	strictNullable(v)
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft4) // OpenAPI 3.0's schema objects are draft 4's, less and more
	if err := c.AddResource(strictDocURL, v); err != nil {
		return nil, fmt.Errorf("strict contract: %w", err)
	}
	return &strictDoc{compiler: c, schemas: map[string]*jsonschema.Schema{}}, nil
}

// strictNullable rewrites every {type: T, nullable: true} into
// {type: [T, "null"]}, in place, the one change OpenAPI 3.0.3 defines.
func strictNullable(v any) {
	switch v := v.(type) {
	case map[string]any:
		if v["nullable"] == true {
			if t, ok := v["type"].(string); ok {
				v["type"] = []any{t, "null"}
			}
			delete(v, "nullable")
		}
		for _, e := range v {
			strictNullable(e)
		}
	case []any:
		for _, e := range v {
			strictNullable(e)
		}
	}
}

// schema compiles (once) the schema at the JSON pointer ptr.
func (d *strictDoc) schema(ptr string) (*jsonschema.Schema, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s, ok := d.schemas[ptr]; ok {
		return s, nil
	}
	s, err := d.compiler.Compile(strictDocURL + "#" + ptr)
	if err != nil {
		return nil, fmt.Errorf("strict contract: compile %s: %w", ptr, err)
	}
	d.schemas[ptr] = s
	return s, nil
}

// validate checks a JSON response body against the schema the operation
// declares for its status and media type (none declared: nothing to check;
// kin-openapi has already said whether the status is declared).
func (d *strictDoc) validate(route *routers.Route, status int, mediaType string, body []byte) error {
	if !strings.HasSuffix(mediaType, "json") || route.Operation == nil || route.Operation.Responses == nil {
		return nil
	}
	code := strconv.Itoa(status)
	if route.Operation.Responses.Value(code) == nil {
		code = "default"
	}
	ptr := "/paths/" + pointerEscape(route.Path) + "/" + strings.ToLower(route.Method) +
		"/responses/" + code + "/content/" + pointerEscape(mediaType) + "/schema"
	s, err := d.schema(ptr)
	if err != nil {
		return err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("body is not JSON: %w", err)
	}
	return s.Validate(v)
}

func pointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// checkStrict is checkContract's second reading of a response.
func checkStrict(t *testing.T, what string, route *routers.Route, r *response) {
	t.Helper()
	d, err := strictContract()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.validate(route, r.Status, mediaType(r), r.Body); err != nil {
		t.Errorf("%s (operation %s): the response breaks the contract read as OpenAPI 3.0.3 says: %v\n%s",
			what, route.Operation.OperationID, err, truncate(r.Body, 2000))
	}
}

// TestStrictReadingRefusesLooseNullables shows the strict reading can
// fail: a null beside an allOf reference to an enum without null, the
// spelling the contract once had, is refused, and the enum or null (anyOf)
// the contract now has is accepted, as are the published nullable enum
// fields' values and null, but no other value.
func TestStrictReadingRefusesLooseNullables(t *testing.T) {
	doc := map[string]any{
		"openapi": "3.0.3",
		"components": map[string]any{"schemas": map[string]any{
			"Reason": map[string]any{"type": "string", "enum": []any{"requested"}},
			"Loose": map[string]any{"type": "object", "properties": map[string]any{
				"reason": map[string]any{"type": "string", "nullable": true,
					"allOf": []any{map[string]any{"$ref": "#/components/schemas/Reason"}}},
			}},
			"Exact": map[string]any{"type": "object", "properties": map[string]any{
				"reason": map[string]any{"type": "string", "nullable": true, "anyOf": []any{
					map[string]any{"$ref": "#/components/schemas/Reason"},
					map[string]any{"type": "string", "nullable": true, "enum": []any{nil}},
				}},
			}},
		}},
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	d, err := newStrictDoc(raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		schema, body string
		ok           bool
	}{
		{"Loose", `{"reason": null}`, false},
		{"Loose", `{"reason": "requested"}`, true},
		{"Exact", `{"reason": null}`, true},
		{"Exact", `{"reason": "requested"}`, true},
		{"Exact", `{"reason": "other"}`, false},
	} {
		s, err := d.schema("/components/schemas/" + tc.schema)
		if err != nil {
			t.Fatal(err)
		}
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Validate(v); (err == nil) != tc.ok {
			t.Errorf("%s %s: valid = %v, want %v (%v)", tc.schema, tc.body, err == nil, tc.ok, err)
		}
	}
	published, err := strictContract()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		field, body string
		ok          bool
	}{
		{"Sandbox/properties/reason", `null`, true},
		{"Sandbox/properties/reason", `"owner_expired"`, true},
		{"Sandbox/properties/reason", `"ready"`, false},
		{"Event/properties/from", `null`, true},
		{"Event/properties/from", `"creating"`, true},
		{"Event/properties/from", `"lost"`, false},
	} {
		s, err := published.schema("/components/schemas/" + tc.field)
		if err != nil {
			t.Fatal(err)
		}
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Validate(v); (err == nil) != tc.ok {
			t.Errorf("%s %s: valid = %v, want %v (%v)", tc.field, tc.body, err == nil, tc.ok, err)
		}
	}
}
