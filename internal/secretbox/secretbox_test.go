package secretbox_test

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/secretbox"
)

func newBox(t *testing.T, fill byte) *secretbox.Box {
	t.Helper()
	b, err := secretbox.New(bytes.Repeat([]byte{fill}, secretbox.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSealOpens(t *testing.T) {
	b := newBox(t, 1)
	sealed := b.Seal("acme", "gh-token", []byte("ghp_secret"))
	if bytes.Contains(sealed, []byte("ghp_secret")) {
		t.Fatal("the sealed value holds the secret in the clear")
	}
	got, err := b.Open("acme", "gh-token", sealed)
	if err != nil || string(got) != "ghp_secret" {
		t.Fatalf("Open = %q, %v", got, err)
	}
	if again := b.Seal("acme", "gh-token", []byte("ghp_secret")); bytes.Equal(again, sealed) {
		t.Fatal("two seals of one value are equal: the nonce is not fresh")
	}
}

func TestSealIsBoundToItsRow(t *testing.T) {
	b := newBox(t, 1)
	sealed := b.Seal("acme", "gh-token", []byte("v"))
	for _, c := range []struct{ tenant, name string }{{"other", "gh-token"}, {"acme", "other"}, {"acmegh", "-token"}} {
		if _, err := b.Open(c.tenant, c.name, sealed); err == nil {
			t.Errorf("Open(%q, %q) of acme/gh-token's seal succeeded", c.tenant, c.name)
		}
	}
	altered := bytes.Clone(sealed)
	altered[len(altered)-1] ^= 1
	if _, err := b.Open("acme", "gh-token", altered); err == nil {
		t.Error("an altered seal opened")
	}
	if _, err := b.Open("acme", "gh-token", sealed[:10]); err == nil {
		t.Error("a truncated seal opened")
	}
}

func TestOtherKeyIsNamed(t *testing.T) {
	sealed := newBox(t, 1).Seal("acme", "s", []byte("v"))
	if _, err := newBox(t, 2).Open("acme", "s", sealed); !errors.Is(err, secretbox.ErrOtherKey) {
		t.Fatalf("Open under another key: %v, want ErrOtherKey", err)
	}
}

func TestParseKey(t *testing.T) {
	key := bytes.Repeat([]byte{0xab}, secretbox.KeySize)
	for _, s := range []string{base64.StdEncoding.EncodeToString(key), base64.RawURLEncoding.EncodeToString(key), hex.EncodeToString(key),
		" " + base64.StdEncoding.EncodeToString(key) + "\n"} {
		got, err := secretbox.ParseKey(s)
		if err != nil || !bytes.Equal(got, key) {
			t.Errorf("ParseKey(%q) = %x, %v", s, got, err)
		}
	}
	for _, s := range []string{"", "short", base64.StdEncoding.EncodeToString(key[:16]), strings.Repeat("z", 64)} {
		if _, err := secretbox.ParseKey(s); err == nil {
			t.Errorf("ParseKey(%q) accepted", s)
		}
	}
	if _, err := secretbox.New(key[:16]); err == nil {
		t.Error("New accepted a 16-byte key")
	}
}
