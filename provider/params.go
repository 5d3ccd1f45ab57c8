package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// DecodeParams decodes a create's params (CreateSpec.Params, or what
// ValidateParams is given) into v, strictly: no params (empty, null or
// {}) leave v as it is; a field v does not have, a value of the wrong
// type or anything but a JSON object is an *Error with CodeInvalidRequest
// that names the provider and the problem. known lists the fields a
// provider takes, for the message of an unknown one ("" says nothing
// more). What the values mean is the provider's to check after.
func DecodeParams(name string, raw json.RawMessage, v any, known string) error {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || string(trimmed) == "null" || string(trimmed) == "{}" {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return Errorf(CodeInvalidRequest, "params for provider %s: %s", name, paramsProblem(err, known))
	}
	return nil
}

// paramsProblem says what is wrong with params that did not decode.
func paramsProblem(err error, known string) string {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field != "" {
		return fmt.Sprintf("not a valid JSON object: field %q has the wrong type", typeErr.Field)
	}
	if rest, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if known != "" {
			return "unknown field " + rest + " (known: " + known + ")"
		}
		return "unknown field " + rest
	}
	return "not a valid JSON object"
}
