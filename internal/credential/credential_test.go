package credential_test

import (
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/credential"
)

// TestTags: a secret a Tagger made checks Genuine under the same
// installation's secret and no other; any change to it, or a value of its
// shape it did not make, is Forged; older secrets and other values are
// Untagged, and so is everything for a Tagger without a key.
func TestTags(t *testing.T) {
	t.Parallel()
	tg := credential.NewTagger([]byte("cluster secret one"))
	other := credential.NewTagger([]byte("cluster secret two"))
	s := tg.New("tk_")
	if len(s) != len("tk_")+credential.TaggedLen || !strings.HasPrefix(s, "tk_") {
		t.Fatalf("New = %q (%d characters)", s, len(s))
	}
	if tg.New("tk_") == s {
		t.Fatal("two secrets are the same")
	}
	flip := func(s string, i int) string {
		b := []byte(s)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	var nilTagger *credential.Tagger
	for _, tc := range []struct {
		name   string
		tagger *credential.Tagger
		prefix string
		value  string
		want   credential.Verdict
	}{
		{"its own", tg, "tk_", s, credential.Genuine},
		{"another installation's", other, "tk_", s, credential.Forged},
		{"a random part changed", tg, "tk_", flip(s, 10), credential.Forged},
		{"the tag changed", tg, "tk_", flip(s, len(s)-3), credential.Forged},
		{"another prefix", tg, "tpv_", "tpv_" + strings.TrimPrefix(s, "tk_"), credential.Forged},
		{"not base64url", tg, "tk_", "tk_" + strings.Repeat("!", credential.TaggedLen), credential.Forged},
		{"not canonical", tg, "tk_", s[:len(s)-1] + "B", credential.Forged},
		{"made before tags", tg, "tk_", "tk_" + strings.Repeat("a", credential.UntaggedLen), credential.Untagged},
		{"an operator's key", tg, "tk_", "dev-key-change-me", credential.Untagged},
		{"without the prefix", tg, "tk_", strings.TrimPrefix(s, "tk_"), credential.Untagged},
		{"no key", nilTagger, "tk_", s, credential.Untagged},
		{"zero value", &credential.Tagger{}, "tk_", s, credential.Untagged},
	} {
		if got := tc.tagger.Check(tc.prefix, tc.value); got != tc.want {
			t.Errorf("%s: Check = %d; want %d", tc.name, got, tc.want)
		}
	}
	if p := tg.New("tpv_"); tg.Check("tpv_", p) != credential.Genuine || tg.Check("tk_", "tk_"+strings.TrimPrefix(p, "tpv_")) != credential.Forged {
		t.Error("a preview token's tag is not bound to its prefix")
	}
}

// TestDerive: a derived secret is the same every time and on every
// Tagger of the installation, and another for another subject, prefix or
// installation; Derived accepts it and nothing else, and a Tagger without
// a key derives nothing.
func TestDerive(t *testing.T) {
	t.Parallel()
	tg := credential.NewTagger([]byte("cluster secret one"))
	same := credential.NewTagger([]byte("cluster secret one"))
	other := credential.NewTagger([]byte("cluster secret two"))
	s := tg.Derive("tta_", "sbx_a")
	if len(s) != len("tta_")+credential.DerivedLen || !strings.HasPrefix(s, "tta_") {
		t.Fatalf("Derive = %q (%d characters)", s, len(s))
	}
	if same.Derive("tta_", "sbx_a") != s {
		t.Fatal("another replica of the installation derives another secret")
	}
	for _, o := range []string{tg.Derive("tta_", "sbx_b"), tg.Derive("ttb_", "sbx_a"), other.Derive("tta_", "sbx_a"), tg.New("tta_")} {
		if o == s || strings.TrimPrefix(o, "tta_") == strings.TrimPrefix(s, "tta_") {
			t.Fatalf("%q and %q are the same secret", o, s)
		}
	}
	// The prefix and the subject are read one way: ("ab", "c") is not ("a", "bc").
	if strings.TrimPrefix(tg.Derive("ab", "c"), "ab") == strings.TrimPrefix(tg.Derive("a", "bc"), "a") {
		t.Fatal("the prefix runs into the subject")
	}
	if !tg.Derived("tta_", "sbx_a", s) || !same.Derived("tta_", "sbx_a", s) {
		t.Fatal("Derived refuses the secret Derive made")
	}
	var nilTagger *credential.Tagger
	for _, tc := range []struct {
		name    string
		tagger  *credential.Tagger
		subject string
		value   string
	}{
		{"another subject", tg, "sbx_b", s},
		{"another installation", other, "sbx_a", s},
		{"cut short", tg, "sbx_a", s[:len(s)-1]},
		{"empty", tg, "sbx_a", ""},
		{"no key", nilTagger, "sbx_a", s},
		{"zero value", &credential.Tagger{}, "sbx_a", s},
	} {
		if tc.tagger.Derived("tta_", tc.subject, tc.value) {
			t.Errorf("%s: Derived accepts %q", tc.name, tc.value)
		}
	}
}
