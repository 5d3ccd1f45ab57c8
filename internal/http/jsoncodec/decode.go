package jsoncodec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/tetherhq/tether/internal/domain"
)

// Decode decodes exactly one JSON object from body into v, refusing
// unknown fields and keys an object names twice, and translates failures
// into INVALID_REQUEST messages a client can act on.
func Decode(body []byte, v any) error {
	if trimmed := bytes.TrimSpace(body); len(trimmed) == 0 || trimmed[0] != '{' {
		return domain.Errorf(domain.CodeInvalidRequest, "request body must be a JSON object")
	}
	if err := noDuplicateKeys(body); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return domain.Errorf(domain.CodeInvalidRequest, "request body: %s", describeJSONError(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return domain.Errorf(domain.CodeInvalidRequest, "request body must hold a single JSON object and nothing after it")
	}
	return nil
}

// noDuplicateKeys refuses a JSON document in which an object names a key
// twice (after unescaping: "a" and "\u0061" are the same key):
// encoding/json would silently take the last, so that what a proxy, a log
// or an audit tool reads of a request could differ from what Tether acts
// on. It only scans; malformed JSON is left to the decoder to describe.
func noDuplicateKeys(body []byte) error {
	var stack []jsonFrame
	for i := 0; i < len(body); i++ {
		switch body[i] {
		case '{':
			stack = append(stack, jsonFrame{object: true, expectKey: true})
		case '[':
			stack = append(stack, jsonFrame{})
		case '}', ']':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		case ',':
			if n := len(stack); n > 0 && stack[n-1].object {
				stack[n-1].expectKey = true
			}
		case '"':
			end, escaped := stringEnd(body, i)
			if end >= len(body) {
				return nil // unterminated: the decoder says so
			}
			if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].expectKey {
				if stop, err := stack[n-1].addKey(body[i:end+1], escaped); stop || err != nil {
					return err
				}
			}
			i = end
		}
	}
	return nil
}

// jsonFrame is an object or an array that noDuplicateKeys is inside of.
type jsonFrame struct {
	object    bool
	expectKey bool
	keys      []string            // while few
	set       map[string]struct{} // past 16 keys, so that many keys stay linear
}

// addKey records the next key of an object, quoted as in the document
// (escaped: with escapes in it). It returns the problem for a key the
// object has already, and stop for a bad escape, which the decoder
// describes.
func (f *jsonFrame) addKey(quoted []byte, escaped bool) (stop bool, err error) {
	key := string(quoted[1 : len(quoted)-1])
	if escaped {
		var ok bool
		if key, ok = unescapeKey(quoted); !ok {
			return true, nil
		}
	}
	_, seen := f.set[key]
	if seen || slices.Contains(f.keys, key) {
		return true, domain.Errorf(domain.CodeInvalidRequest, "request body: key %q appears twice in one object", key)
	}
	switch {
	case f.set != nil:
		f.set[key] = struct{}{}
	case len(f.keys) < 16:
		f.keys = append(f.keys, key)
	default:
		f.set = make(map[string]struct{}, 64)
		for _, k := range f.keys {
			f.set[k] = struct{}{}
		}
		f.set[key], f.keys = struct{}{}, nil
	}
	f.expectKey = false
	return false, nil
}

// stringEnd returns the index of the quote that ends the JSON string that
// starts at body[i] (len(body) if none does), and whether the string has
// escapes.
func stringEnd(body []byte, i int) (end int, escaped bool) {
	for end = i + 1; end < len(body) && body[end] != '"'; end++ {
		if body[end] == '\\' {
			escaped = true
			end++
		}
	}
	return end, escaped
}

// unescapeKey is the value of a quoted JSON string with escapes, and
// whether it is one.
func unescapeKey(quoted []byte) (string, bool) {
	var s string
	err := json.Unmarshal(quoted, &s)
	return s, err == nil
}

func describeJSONError(err error) string {
	var (
		syntaxErr *json.SyntaxError
		typeErr   *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &syntaxErr):
		return fmt.Sprintf("malformed JSON at byte %d", syntaxErr.Offset)
	case errors.As(err, &typeErr):
		if typeErr.Field == "" {
			return "must be a JSON object"
		}
		return fmt.Sprintf("field %q must be of JSON type %s", typeErr.Field, jsonTypeName(typeErr.Type.Kind().String()))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "malformed JSON: unexpected end"
	}
	msg := err.Error()
	if len(msg) > 20 && msg[:20] == "json: unknown field " {
		return "unknown field " + msg[20:]
	}
	return "malformed JSON"
}

func jsonTypeName(kind string) string {
	switch kind {
	case "int", "int32", "int64", "uint", "uint32", "uint64", "float64":
		return "number"
	case "map", "struct":
		return "object"
	case "slice":
		return "array"
	case "bool":
		return "boolean"
	}
	return kind
}
