package provider_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/tetherhq/tether/provider"
)

func TestDecodeParams(t *testing.T) {
	type params struct {
		Size int    `json:"size"`
		Mode string `json:"mode"`
	}
	for _, none := range []string{"", " ", "null", "{}"} {
		p := params{Size: 7}
		if err := provider.DecodeParams("x", json.RawMessage(none), &p, "size, mode"); err != nil || p.Size != 7 {
			t.Errorf("DecodeParams(%q) = %v, %+v; want nothing decoded", none, err, p)
		}
	}
	var p params
	if err := provider.DecodeParams("x", json.RawMessage(`{"size":3,"mode":"a"}`), &p, ""); err != nil || p != (params{3, "a"}) {
		t.Errorf("DecodeParams = %v, %+v", err, p)
	}
	for raw, want := range map[string]string{
		`{"colour":"red"}`: `params for provider x: unknown field "colour" (known: size, mode)`,
		`{"size":"big"}`:   `params for provider x: not a valid JSON object: field "size" has the wrong type`,
		`[1]`:              `params for provider x: not a valid JSON object`,
		`{"size":`:         `params for provider x: not a valid JSON object`,
	} {
		err := provider.DecodeParams("x", json.RawMessage(raw), &params{}, "size, mode")
		var e *provider.Error
		if !errors.As(err, &e) || e.Code != provider.CodeInvalidRequest || e.Message != want {
			t.Errorf("DecodeParams(%s) = %v, want INVALID_REQUEST %q", raw, err, want)
		}
	}
}
