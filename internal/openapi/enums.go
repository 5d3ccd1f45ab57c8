package openapi

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode"

	"github.com/getkin/kin-openapi/openapi3"
)

// nameEnums names the constants (x-enum-varnames) of every enum in the
// schema and the inline schemas in it that does not name them already: a
// value's name is the enum's place, prefix (a named enum's name, its
// schema's and field's, an operation's and parameter's), then the value
// ("SandboxReason" and "owner_released": SandboxReasonOwnerReleased). A
// generator then makes constants that cannot collide with its other
// identifiers (a bare "client" would be a Go constant Client, oapi-codegen's
// client type). Names the annotations give (x-enum-varnames tags) are kept,
// so that the constants they name stay as they are.
func nameEnums(prefix string, ref *openapi3.SchemaRef) {
	if ref == nil || ref.Ref != "" || ref.Value == nil {
		return
	}
	s := ref.Value
	if s.Extensions[extEnumVarNames] == nil && slices.ContainsFunc(s.Enum, isValue) {
		if s.Extensions == nil {
			s.Extensions = map[string]any{}
		}
		s.Extensions[extEnumVarNames] = enumNames(prefix, s.Enum)
	}
	for _, field := range slices.Sorted(maps.Keys(s.Properties)) {
		nameEnums(prefix+camel(field), s.Properties[field])
	}
	nameEnums(prefix, s.Items)
	nameEnums(prefix, s.AdditionalProperties.Schema)
	for _, refs := range []openapi3.SchemaRefs{s.AllOf, s.AnyOf, s.OneOf} {
		for _, r := range refs {
			nameEnums(prefix, r)
		}
	}
}

// enumNames names the values of an enum (null aside, which names nothing)
// after prefix.
func enumNames(prefix string, values []any) []any {
	var names []any
	for _, v := range values {
		if isValue(v) {
			names = append(names, prefix+cmp.Or(camel(fmt.Sprint(v)), "Empty"))
		}
	}
	return names
}

// camel makes a Go-style name part of a name or value: "owner_released" →
// "OwnerReleased", "sandbox.state_changed" → "SandboxStateChanged",
// "NOT_FOUND" → "NotFound", "getSandbox" → "GetSandbox". A word in
// capitals only is a constant's spelling, not an initialism, and is
// lowered but for its first letter; any other word keeps its case.
func camel(s string) string {
	var b strings.Builder
	for part := range strings.FieldsFuncSeq(s, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		rest := part[1:]
		if strings.ToUpper(part) == part {
			rest = strings.ToLower(rest)
		}
		b.WriteString(strings.ToUpper(part[:1]) + rest)
	}
	return b.String()
}

// isNull reports whether the schema lets null through: a nullable one with
// a type.
func isNull(ref *openapi3.SchemaRef) bool {
	return ref.Value != nil && ref.Value.Nullable && ref.Value.Type != nil && len(*ref.Value.Type) > 0
}

// isValue reports whether an enum's value v is one (null is not: it names
// nothing).
func isValue(v any) bool { return v != nil }

// checkEnumNames makes sure every enum names each of its values once, by a
// name no other value of it has, and that nullable stands beside a type or
// an anyOf that lets null through.
func checkEnumNames(doc *openapi3.T) error {
	var bad []string
	check := func(where string) func(*openapi3.Schema) {
		return func(s *openapi3.Schema) {
			if problem := enumNamesProblem(s); problem != "" {
				bad = append(bad, where+" ("+problem+")")
			}
			if s.Nullable && (s.Type == nil || len(*s.Type) == 0) && !slices.ContainsFunc(s.AnyOf, isNull) {
				bad = append(bad, where+" (nullable without a type)")
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(doc.Components.Schemas)) {
		walkSchema(doc.Components.Schemas[name], check("schema "+name))
	}
	for _, path := range doc.Paths.InMatchingOrder() {
		for method, op := range doc.Paths.Value(path).Operations() {
			where := method + " " + path
			for _, p := range op.Parameters {
				walkSchema(p.Value.Schema, check(where+" parameter "+p.Value.Name))
			}
			if rb := op.RequestBody; rb != nil && rb.Value != nil {
				for _, c := range rb.Value.Content {
					walkSchema(c.Schema, check(where+" request body"))
				}
			}
			for code, resp := range op.Responses.Map() {
				for _, c := range resp.Value.Content {
					walkSchema(c.Schema, check(where+" response "+code))
				}
			}
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return fmt.Errorf("enums whose values are not named each once, or nullable without a type: %s", strings.Join(bad, "; "))
	}
	return nil
}

// enumNamesProblem says what is wrong with the names of s's enum values;
// "" when nothing is.
func enumNamesProblem(s *openapi3.Schema) string {
	n := 0
	for _, v := range s.Enum {
		if isValue(v) {
			n++
		}
	}
	if n == 0 {
		return ""
	}
	names, ok := s.Extensions[extEnumVarNames].([]any)
	if !ok {
		return "no x-enum-varnames"
	}
	if len(names) != n {
		return fmt.Sprintf("%d x-enum-varnames for %d values", len(names), n)
	}
	seen := map[any]bool{}
	for _, name := range names {
		if seen[name] {
			return fmt.Sprintf("x-enum-varnames names %v twice", name)
		}
		seen[name] = true
	}
	return ""
}
