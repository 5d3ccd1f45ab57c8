package tether_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/tetherhq/tether/clients/go/tether"
)

// TestEnumsAreTyped uses the enums of a sandbox the way Go users' code does:
// it builds only while the client has a type and constants for each, the
// nullable reason included (a pointer to the type, nil while live).
func TestEnumsAreTyped(t *testing.T) {
	t.Parallel()
	reason := tether.SandboxReasonOwnerExpired
	sb := tether.Sandbox{State: tether.SandboxStateTerminated, Reason: &reason}
	ev := tether.Event{To: tether.SandboxStateReady, From: ptr(tether.SandboxStateCreating)}
	switch *sb.Reason {
	case tether.SandboxReasonRequested, tether.SandboxReasonOwnerReleased, tether.SandboxReasonLost:
		t.Errorf("reason %q matched another constant", *sb.Reason)
	case tether.SandboxReasonOwnerExpired:
	default:
		t.Errorf("reason %q matched no constant", *sb.Reason)
	}
	if !sb.Reason.Valid() || tether.SandboxReason("nope").Valid() || !ev.From.Valid() {
		t.Error("Valid does not tell the enum's values from others")
	}
}

func ptr[T any](v T) *T { return &v }

// TestEveryEnumFieldIsTyped reads the document and the generated client
// side by side: every field of a component schema whose values are an
// enum (its own, or a named one it refers to, nullable or not) is a Go type
// of its own in the client, never a plain string, so that Go users get the
// constants.
func TestEveryEnumFieldIsTyped(t *testing.T) {
	t.Parallel()
	doc, err := openapi3.NewLoader().LoadFromFile("../../../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	structs := generatedStructs(t, "tether.gen.go")
	checked := 0
	for _, name := range slices.Sorted(maps.Keys(doc.Components.Schemas)) {
		s := doc.Components.Schemas[name].Value
		for _, field := range slices.Sorted(maps.Keys(s.Properties)) {
			if !isEnum(s.Properties[field]) {
				continue
			}
			checked++
			goType, ok := structs[name][field]
			if !ok {
				t.Errorf("%s.%s: the client's %s has no field with that JSON name", name, field, name)
				continue
			}
			if base := strings.TrimLeft(goType, "*[]"); base == "string" {
				t.Errorf("%s.%s is an enum, but a %s in the Go client", name, field, goType)
			}
		}
	}
	if checked < 10 {
		t.Errorf("checked %d enum fields; the document has more", checked)
	}
}

// isEnum reports whether a property's values are an enum: its own, its
// items', or a named enum's it refers to (allOf or anyOf).
func isEnum(ref *openapi3.SchemaRef) bool {
	s := ref.Value
	if s == nil {
		return false
	}
	if len(s.Enum) > 0 && slices.ContainsFunc(s.Enum, func(v any) bool { return v != nil }) {
		return true
	}
	if s.Items != nil && ref.Ref == "" && isEnum(s.Items) {
		return true
	}
	for _, part := range slices.Concat(s.AllOf, s.AnyOf, s.OneOf) {
		if part.Ref != "" && isEnum(part) {
			return true
		}
	}
	return false
}

// generatedStructs parses the generated client and returns, for each
// struct type, its fields' Go types by JSON name.
func generatedStructs(t *testing.T, file string) map[string]map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		spec, ok := n.(*ast.TypeSpec)
		if !ok {
			return true
		}
		st, ok := spec.Type.(*ast.StructType)
		if !ok {
			return true
		}
		fields := map[string]string{}
		for _, fl := range st.Fields.List {
			if fl.Tag == nil {
				continue
			}
			tag := reflect.StructTag(strings.Trim(fl.Tag.Value, "`"))
			jsonName, _, _ := strings.Cut(tag.Get("json"), ",")
			fields[jsonName] = types(fl.Type)
		}
		out[spec.Name.Name] = fields
		return false
	})
	return out
}

// types spells a field's type expression: *T, []T, T.
func types(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return "*" + types(e.X)
	case *ast.ArrayType:
		return "[]" + types(e.Elt)
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return types(e.X) + "." + e.Sel.Name
	}
	return "?"
}
