// Package openapi turns the Swagger 2.0 document that swag makes from the
// API's annotations (docs/swagger.json) into the OpenAPI 3.0 document Tether
// publishes (docs/openapi.json and docs/openapi.yaml), for client generators.
//
// swag stays the source of truth, but for what every operation of a group
// shares (a /v1 route's 401, 429, 500 and 503, Retry-After, X-Request-ID):
// the handlers' annotations name only their own responses, and AddCommon
// adds the shared ones from one table (commons) to swag's documents before
// they are converted (CompleteSwag; Generate does both, for `make docs`).
// kin-openapi's openapi2conv does the
// conversion, including x-nullable (from the extensions:"x-nullable" struct
// tags) to nullable; Convert then says what Swagger 2.0 cannot:
//
//   - the API key is an http bearer scheme, not an apiKey header;
//   - every response whose schema is Problem is application/problem+json
//     (only), whatever the operation produces on success;
//   - a free-form object (type object with neither properties nor
//     additionalProperties, such as CreateSandboxRequest.params) is declared
//     open: additionalProperties true;
//   - the extra properties of a composed response (swag's Sandbox{capped=bool},
//     an allOf) are required, as every property the server always sends is;
//   - a Server-Sent Events response is a string, and a binary request body
//     (files, archives) is a string of format binary;
//   - the response headers the server always sends (X-Request-ID, Location,
//     WWW-Authenticate, Retry-After with 429) are required;
//   - a parameter keeps its example (openapi2conv drops it);
//   - an enum that a field names becomes one named schema: a field tagged
//     extensions:"x-enum-schema=NAME" refers to components.schemas.NAME as
//     {type, allOf: [$ref]} (a $ref can have no siblings in OpenAPI 3.0),
//     so that a generator makes one type and one set of constants for it
//     however many fields (and composed responses) use it; a nullable such
//     field is {nullable, anyOf: [$ref, null]} with x-go-type NAME (see
//     enumField);
//   - nullable never stands without a type beside it (OpenAPI 3.0.3
//     ignores it there), but where an anyOf beside it lets null through;
//   - every enum names its constants (x-enum-varnames), so that a generated
//     constant cannot collide with another identifier (a bare "client" became
//     a Go constant Client, which clashed with oapi-codegen's Client type):
//     names the annotations give are kept, and the others are made of where
//     the enum is and the value (SandboxReasonOwnerReleased; see nameEnums).
//
// The output is deterministic: the same input gives the same bytes.
package openapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/getkin/kin-openapi/openapi2"
	"github.com/getkin/kin-openapi/openapi2conv"
	"github.com/getkin/kin-openapi/openapi3"
	"go.yaml.in/yaml/v3"
)

// Version is the OpenAPI version of the converted document.
const Version = "3.0.3"

// The extensions Convert reads.
const (
	extEnumVarNames = "x-enum-varnames"
	// extGoType names the Go type of a nullable field of a named enum
	// (anyOf the enum or null), whose constants are the named enum's.
	extGoType     = "x-go-type"
	extEnumSchema = "x-enum-schema"
)

// problemRef is the reference to the Problem schema.
const problemRef = "#/components/schemas/Problem"

// ProblemMediaType is the media type of every error response (RFC 9457).
const ProblemMediaType = "application/problem+json"

// headerRequired reports whether the server always sends the response
// header where the document declares it.
func headerRequired(name, status string) bool {
	switch name {
	case "X-Request-ID": // every response (withRequestID)
		return true
	case "Location": // every create (200, 201 and 202)
		return true
	case "WWW-Authenticate": // every 401 (withAuth)
		return true
	case "Retry-After": // every 429; a 503 only with UNAVAILABLE
		return status == "429"
	}
	return false
}

// Convert converts a Swagger 2.0 document to the published OpenAPI 3.0
// document, as indented JSON and as YAML.
func Convert(swagger []byte) (jsonDoc, yamlDoc []byte, err error) {
	doc, err := ConvertDoc(swagger)
	if err != nil {
		return nil, nil, err
	}
	if jsonDoc, err = marshalJSON(doc); err != nil {
		return nil, nil, err
	}
	if yamlDoc, err = jsonToYAML(jsonDoc); err != nil {
		return nil, nil, err
	}
	return jsonDoc, yamlDoc, nil
}

// ConvertDoc converts and completes the document, and validates the result.
func ConvertDoc(swagger []byte) (*openapi3.T, error) {
	swagger, err := keepParameterExamples(swagger)
	if err != nil {
		return nil, fmt.Errorf("read the Swagger 2.0 document: %w", err)
	}
	var doc2 openapi2.T
	if err := json.Unmarshal(swagger, &doc2); err != nil {
		return nil, fmt.Errorf("read the Swagger 2.0 document: %w", err)
	}
	doc, err := openapi2conv.ToV3(&doc2)
	if err != nil {
		return nil, fmt.Errorf("convert to OpenAPI 3: %w", err)
	}
	doc.OpenAPI = Version
	if err := complete(doc); err != nil {
		return nil, err
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("the converted document is not valid OpenAPI 3: %w", err)
	}
	return doc, nil
}

// complete adds what Swagger 2.0 cannot say; see the package comment.
func complete(doc *openapi3.T) error {
	if doc.Info == nil || doc.Components == nil || doc.Paths == nil {
		return fmt.Errorf("the document has no info, components or paths")
	}
	if c := doc.Info.Contact; c != nil && c.Name == "" && c.URL == "" && c.Email == "" && len(c.Extensions) == 0 {
		doc.Info.Contact = nil // swag's empty contact
	}
	for name, scheme := range doc.Components.SecuritySchemes {
		v := scheme.Value
		if v == nil || v.Type != "apiKey" || !strings.EqualFold(v.Name, "Authorization") {
			return fmt.Errorf("security scheme %s: want the apiKey Authorization header that stands for bearer", name)
		}
		scheme.Value = &openapi3.SecurityScheme{Type: "http", Scheme: "bearer", Description: v.Description}
	}
	if err := hoistEnums(doc.Components.Schemas); err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(doc.Components.Schemas)) {
		walkSchema(doc.Components.Schemas[name], completeSchema)
		nameEnums(name, doc.Components.Schemas[name])
	}
	for _, path := range doc.Paths.InMatchingOrder() {
		for method, op := range doc.Paths.Value(path).Operations() {
			if op.OperationID == "" {
				return fmt.Errorf("%s %s has no operationId (swag's @ID)", method, path)
			}
			if err := completeOperation(op); err != nil {
				return fmt.Errorf("%s %s: %w", method, path, err)
			}
		}
	}
	return checkEnumNames(doc)
}

// keepParameterExamples renames the example of every parameter to
// x-example, which openapi2conv keeps (as an extension); completeOperation
// makes it the OpenAPI 3 parameter's example again.
func keepParameterExamples(swagger []byte) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(swagger, &doc); err != nil {
		return nil, err
	}
	paths, _ := doc["paths"].(map[string]any)
	for _, item := range paths {
		ops, _ := item.(map[string]any)
		for _, op := range ops {
			o, _ := op.(map[string]any)
			params, _ := o["parameters"].([]any)
			for _, p := range params {
				param, _ := p.(map[string]any)
				if ex, ok := param["example"]; ok && param["in"] != "body" {
					param["x-example"] = ex
					delete(param, "example")
				}
			}
		}
	}
	return json.Marshal(doc)
}

// hoistEnums moves the enums of fields tagged x-enum-schema=NAME into the
// named component schema NAME; fields that share a NAME must agree on it.
func hoistEnums(schemas openapi3.Schemas) error {
	for _, owner := range slices.Sorted(maps.Keys(schemas)) {
		s := schemas[owner].Value
		if s == nil {
			continue
		}
		for _, field := range slices.Sorted(maps.Keys(s.Properties)) {
			prop := s.Properties[field]
			p := prop.Value
			if prop.Ref != "" || p == nil {
				continue
			}
			name, ok := p.Extensions[extEnumSchema].(string)
			if !ok {
				continue
			}
			enum, err := namedEnum(schemas, name, p)
			if err != nil {
				return fmt.Errorf("%s.%s: %w", owner, field, err)
			}
			s.Properties[field] = enumField(name, enum, p)
		}
	}
	return nil
}

// namedEnum returns the component schema NAME for the enum of field p,
// making it if no field has yet.
func namedEnum(schemas openapi3.Schemas, name string, p *openapi3.Schema) (*openapi3.Schema, error) {
	if len(p.Enum) == 0 {
		return nil, fmt.Errorf("x-enum-schema needs enums")
	}
	enum := &openapi3.Schema{Type: p.Type, Enum: p.Enum}
	if names := p.Extensions[extEnumVarNames]; names != nil {
		enum.Extensions = map[string]any{extEnumVarNames: names}
	}
	nameEnums(name, openapi3.NewSchemaRef("", enum))
	prev, ok := schemas[name]
	if !ok {
		schemas[name] = openapi3.NewSchemaRef("", enum)
		return enum, nil
	}
	if !reflect.DeepEqual(prev.Value.Type, enum.Type) || !reflect.DeepEqual(prev.Value.Enum, enum.Enum) ||
		!reflect.DeepEqual(prev.Value.Extensions, enum.Extensions) {
		return nil, fmt.Errorf("enum %s differs from another field's", name)
	}
	return prev.Value, nil
}

// enumField is a field's schema for the named enum: a reference to it
// (in an allOf, beside the field's description), or, for a nullable field,
// that reference or null (anyOf).
//
// A nullable field cannot be {nullable, allOf: [$ref]}: OpenAPI 3.0.3 makes
// nullable widen only the schema it stands in, so the referenced enum
// would still refuse null to strict validators (ajv, go-swagger). Nor can
// it list null among the enum's values inline: oapi-codegen (v2.8.2) makes
// a constant "<nil>" of it, and without a reference a pruning generator
// drops the named enum, so that Go users lose its type and constants.
// anyOf [$ref, {nullable, enum: [null]}] is what the server sends under
// either reading, keeps the named enum referenced, and x-go-type makes
// oapi-codegen type the field *NAME (it makes a plain *string of an anyOf).
// The field has no type of its own: openapi-typescript would make
// string | NAME | null of a type string beside the anyOf; its nullable
// is for the generators that read nullable loosely (a pointer in Go).
func enumField(name string, enum *openapi3.Schema, p *openapi3.Schema) *openapi3.SchemaRef {
	ref := openapi3.NewSchemaRef("#/components/schemas/"+name, enum)
	if !p.Nullable {
		return openapi3.NewSchemaRef("", &openapi3.Schema{
			Type:        p.Type,
			AllOf:       openapi3.SchemaRefs{ref},
			Description: p.Description,
			Example:     p.Example,
		})
	}
	null := &openapi3.Schema{Type: p.Type, Nullable: true, Enum: []any{nil}}
	return openapi3.NewSchemaRef("", &openapi3.Schema{
		Nullable:    true,
		AnyOf:       openapi3.SchemaRefs{ref, openapi3.NewSchemaRef("", null)},
		Description: p.Description,
		Example:     p.Example,
		Extensions:  map[string]any{extGoType: name},
	})
}

// completeOperation applies the rules to an operation's parameters, its
// request body and its responses.
func completeOperation(op *openapi3.Operation) error {
	for _, ref := range op.Parameters {
		if err := completeParameter(op.OperationID, ref.Value); err != nil {
			return err
		}
	}
	if rb := op.RequestBody; rb != nil && rb.Value != nil {
		completeRequestBody(rb.Value)
		for _, c := range rb.Value.Content {
			nameEnums(camel(op.OperationID)+"Request", c.Schema)
		}
	}
	for code, resp := range op.Responses.Map() {
		if resp.Value == nil {
			return fmt.Errorf("response %s is not resolved", code)
		}
		completeResponse(code, resp.Value)
		for _, c := range resp.Value.Content {
			nameEnums(camel(op.OperationID)+code, c.Schema)
		}
	}
	return nil
}

// completeParameter completes a parameter of operation opID: its schema,
// its example back from x-example (a list for an array), and names for
// the values of an inline enum (opID, the parameter's name, the value).
func completeParameter(opID string, p *openapi3.Parameter) error {
	if p == nil || p.Schema == nil || p.Schema.Value == nil {
		return fmt.Errorf("a parameter has no schema")
	}
	walkSchema(p.Schema, completeSchema)
	if ex, ok := p.Extensions["x-example"]; ok {
		delete(p.Extensions, "x-example")
		if _, isList := ex.([]any); p.Schema.Value.Type.Is(openapi3.TypeArray) && !isList {
			ex = []any{ex}
		}
		p.Example = ex
	}
	if len(p.Extensions) == 0 {
		p.Extensions = nil
	}
	nameEnums(camel(opID)+camel(p.Name), p.Schema)
	return nil
}

// completeRequestBody drops openapi2conv's x-originalParamName, completes
// the body's schemas and marks a string body that is not JSON as binary.
func completeRequestBody(rb *openapi3.RequestBody) {
	delete(rb.Extensions, "x-originalParamName")
	if len(rb.Extensions) == 0 {
		rb.Extensions = nil
	}
	for mt, c := range rb.Content {
		walkSchema(c.Schema, completeSchema)
		if !isJSON(mt) && c.Schema != nil && c.Schema.Ref == "" && c.Schema.Value.Type.Is(openapi3.TypeString) {
			c.Schema.Value.Format = "binary"
		}
	}
}

// completeResponse completes the response with status code: its required
// headers, a problem as the only content of an error, and a string schema
// for an event stream.
func completeResponse(code string, r *openapi3.Response) {
	for name, h := range r.Headers {
		if h.Value != nil && headerRequired(name, code) {
			h.Value.Required = true
		}
	}
	var problem *openapi3.SchemaRef
	for _, c := range r.Content {
		if c.Schema != nil && c.Schema.Ref == problemRef {
			problem = c.Schema
		}
	}
	if problem != nil {
		r.Content = openapi3.Content{ProblemMediaType: &openapi3.MediaType{Schema: problem}}
		return
	}
	for mt, c := range r.Content {
		walkSchema(c.Schema, completeSchema)
		if mt == "text/event-stream" {
			c.Schema = openapi3.NewSchemaRef("", &openapi3.Schema{
				Type:        &openapi3.Types{openapi3.TypeString},
				Description: "Server-Sent Events (text/event-stream), as the operation's description says",
			})
		}
	}
}

func isJSON(mediaType string) bool {
	return mediaType == "application/json" || strings.HasSuffix(mediaType, "+json")
}

// completeSchema applies the schema rules to one (inline) schema.
func completeSchema(s *openapi3.Schema) {
	ap := s.AdditionalProperties
	if s.Type.Is(openapi3.TypeObject) && len(s.Properties) == 0 && ap.Has == nil && ap.Schema == nil {
		open := true
		s.AdditionalProperties.Has = &open
	}
	for _, part := range s.AllOf {
		if part.Ref == "" && part.Value != nil && len(part.Value.Properties) > 0 && len(part.Value.Required) == 0 {
			part.Value.Required = slices.Sorted(maps.Keys(part.Value.Properties))
		}
	}
}

// walkSchema calls visit on the schema and on every inline schema in it;
// references are not followed (their targets are visited as components).
func walkSchema(ref *openapi3.SchemaRef, visit func(*openapi3.Schema)) {
	if ref == nil || ref.Ref != "" || ref.Value == nil {
		return
	}
	s := ref.Value
	visit(s)
	for _, name := range slices.Sorted(maps.Keys(s.Properties)) {
		walkSchema(s.Properties[name], visit)
	}
	walkSchema(s.Items, visit)
	walkSchema(s.AdditionalProperties.Schema, visit)
	walkSchema(s.Not, visit)
	for _, refs := range []openapi3.SchemaRefs{s.AllOf, s.AnyOf, s.OneOf} {
		for _, r := range refs {
			walkSchema(r, visit)
		}
	}
}

// topLevelOrder is the order of the document's top-level fields, as people
// read them; everything below is in key order.
var topLevelOrder = []string{"openapi", "info", "servers", "security", "tags", "externalDocs", "paths", "components"}

// marshalJSON writes the document as indented JSON, its top-level fields in
// topLevelOrder and everything below in key order.
func marshalJSON(doc *openapi3.T) ([]byte, error) {
	raw, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	buf.WriteString("{")
	keys := slices.Sorted(maps.Keys(fields))
	slices.SortStableFunc(keys, func(a, b string) int { return rank(a) - rank(b) })
	for i, k := range keys {
		if i > 0 {
			buf.WriteString(",")
		}
		name, _ := json.Marshal(k)
		buf.Write(name)
		buf.WriteString(":")
		buf.Write(fields[k])
	}
	buf.WriteString("}")
	var out bytes.Buffer
	if err := json.Indent(&out, buf.Bytes(), "", "  "); err != nil {
		return nil, err
	}
	out.WriteString("\n")
	return out.Bytes(), nil
}

func rank(key string) int {
	if i := slices.Index(topLevelOrder, key); i >= 0 {
		return i
	}
	return len(topLevelOrder) // extensions and anything new, after the rest
}

// jsonToYAML rewrites a JSON document as block-style YAML with the same key
// order.
func jsonToYAML(jsonDoc []byte) ([]byte, error) {
	var node yaml.Node
	if err := yaml.Unmarshal(jsonDoc, &node); err != nil {
		return nil, err
	}
	plain(&node)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&node); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// plain drops the JSON (flow, quoted) styles, so that the encoder chooses
// block style and quotes only what needs quoting.
func plain(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		plain(c)
	}
}
