// Package credential makes and checks the bearer secrets Tether hands
// out: API keys and preview tokens, and the secrets it derives rather than
// keeps (Derive: E2B's traffic access tokens).
//
// A secret is a prefix ("tk_", "tpv_") and 40 bytes, base64url: 32 random
// bytes, then a tag, the first 8 bytes of an HMAC-SHA256 of the prefix and
// the random part under a key derived from the installation's cluster
// secret. Any replica can tell a secret of its installation from a guess
// with no query: a guess of that shape fails the tag check (one chance in
// 2^64 of passing), so a flood of guesses costs Postgres nothing, while a
// real secret is always worth a lookup. Secrets made before tags (the
// prefix and 32 bytes) and keys an operator chose (BOOTSTRAP_API_KEY) have
// no tag: they are Untagged, and looked up as before.
package credential

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"strings"
)

// Sizes of a tagged secret's parts, in bytes.
const (
	randomLen = 32
	tagLen    = 8
)

// TaggedLen is the length of a tagged secret after its prefix, in
// characters; UntaggedLen that of one made before tags.
const (
	TaggedLen   = 54 // randomLen+tagLen (40) bytes, base64url without padding
	UntaggedLen = 43 // randomLen (32) bytes, base64url without padding
)

// encoding refuses non-canonical encodings (stray bits in the last
// character), so that one secret has one spelling.
var encoding = base64.RawURLEncoding.Strict()

// Verdict is what a presented value is, as far as its shape and tag tell.
type Verdict int

const (
	// Untagged is a value not of the tagged shape (a secret made before
	// tags, a key an operator chose, or junk): only a lookup tells.
	Untagged Verdict = iota
	// Genuine is the tagged shape with a tag that holds: this
	// installation made it (it may since have been revoked or expired).
	Genuine
	// Forged is the tagged shape (the prefix and TaggedLen characters)
	// with a tag that does not hold, or that is not base64url: this
	// installation never made it.
	Forged
)

// Tagger makes and checks tagged secrets under one installation's key.
// The zero value and nil have no key: they check nothing (every value is
// Untagged) and cannot make secrets.
type Tagger struct {
	key    []byte
	derive []byte // the key of derived secrets (Derive)
}

// tagDomain separates the tags' key from the cluster secret's other use
// (signing forwarded calls); deriveDomain, the derived secrets' key from
// both.
const (
	tagDomain    = "tether credential tag v1"
	deriveDomain = "tether derived secret v1"
)

// NewTagger returns the Tagger of the installation whose cluster secret
// is secret.
func NewTagger(secret []byte) *Tagger {
	return &Tagger{key: subkey(secret, tagDomain), derive: subkey(secret, deriveDomain)}
}

// subkey is the key of one use of the cluster secret, named by purpose.
func subkey(secret []byte, purpose string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(purpose))
	return m.Sum(nil)
}

// tag is the tag of prefix and random.
func (t *Tagger) tag(prefix string, random []byte) []byte {
	m := hmac.New(sha256.New, t.key)
	m.Write([]byte(prefix))
	m.Write(random)
	return m.Sum(nil)[:tagLen]
}

// New makes a random secret with the prefix and its tag. It panics on a
// Tagger without a key: a secret without its tag would be refused.
func (t *Tagger) New(prefix string) string {
	if t == nil || t.key == nil {
		panic("credential: New on a Tagger without a key")
	}
	b := make([]byte, randomLen, randomLen+tagLen)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return prefix + encoding.EncodeToString(append(b, t.tag(prefix, b)...))
}

// Derive returns the secret with the prefix that this installation
// derives for subject: the prefix and an HMAC-SHA256 of the prefix and
// subject, base64url (DerivedLen characters), under a key of its own
// taken from the cluster secret. Unlike New's, it is not random and is
// never stored: any replica makes it again from the subject, and checks a
// presented one that way (Derived). It lasts as long as its subject does,
// and cannot be revoked apart from it: derive only for subjects that end
// and whose names are never reused (a sandbox's id). It panics on a Tagger
// without a key.
func (t *Tagger) Derive(prefix, subject string) string {
	if t == nil || t.derive == nil {
		panic("credential: Derive on a Tagger without a key")
	}
	m := hmac.New(sha256.New, t.derive)
	m.Write([]byte(prefix))
	m.Write([]byte{0}) // prefixes hold no NUL: (prefix, subject) reads one way
	m.Write([]byte(subject))
	return prefix + encoding.EncodeToString(m.Sum(nil))
}

// DerivedLen is the length of a derived secret after its prefix, in
// characters: 32 bytes, base64url without padding.
const DerivedLen = 43

// Derived reports, in constant time, whether s is the secret Derive
// makes of prefix and subject. A Tagger without a key derives nothing:
// false.
func (t *Tagger) Derived(prefix, subject, s string) bool {
	if t == nil || t.derive == nil {
		return false
	}
	return hmac.Equal([]byte(s), []byte(t.Derive(prefix, subject)))
}

// Tagged reports whether s has the tagged shape: the prefix and
// TaggedLen characters. Only such a value needs Check.
func Tagged(prefix, s string) bool {
	return len(s) == len(prefix)+TaggedLen && strings.HasPrefix(s, prefix)
}

// Check tells whether s, presented as a secret with the prefix, is
// Genuine, Forged or Untagged. It costs an HMAC, no query.
func (t *Tagger) Check(prefix, s string) Verdict {
	if !Tagged(prefix, s) || t == nil || t.key == nil {
		return Untagged
	}
	b, err := encoding.DecodeString(s[len(prefix):])
	if err != nil || len(b) != randomLen+tagLen {
		return Forged
	}
	if hmac.Equal(b[randomLen:], t.tag(prefix, b[:randomLen])) {
		return Genuine
	}
	return Forged
}
