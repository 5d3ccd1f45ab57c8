// Package secretbox seals tenants' secrets for storage: AES-256-GCM under
// the operator's key (SECRETS_KEY). The tenant and the secret's name are
// the additional data of each seal, so a sealed value copied into another
// tenant's row, or under another name, does not open; each seal also
// names the key it was made with, so a server started with another key
// says so rather than failing to decrypt.
package secretbox

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// KeySize is the size of a key: AES-256.
const KeySize = 32

// version is the first byte of every seal.
const version = 1

// keyIDSize is how many bytes of the key's id a seal carries.
const keyIDSize = 8

// ErrOtherKey is the error of Open for a value sealed under another key.
var ErrOtherKey = errors.New("sealed under another SECRETS_KEY")

// Box seals and opens values under one key.
type Box struct {
	aead  cipher.AEAD
	keyID [keyIDSize]byte
}

// ParseKey reads a key as written in SECRETS_KEY: 32 bytes, base64
// (standard or URL alphabet, padded or not) or 64 hex digits.
func ParseKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if len(s) == 2*KeySize {
		if b, err := hex.DecodeString(s); err == nil {
			return b, nil
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			if len(b) != KeySize {
				return nil, fmt.Errorf("the key is %d bytes; it must be %d (openssl rand -base64 32)", len(b), KeySize)
			}
			return b, nil
		}
	}
	return nil, fmt.Errorf("the key is neither base64 nor hex; make one with: openssl rand -base64 32")
}

// New returns a box for key, which must be KeySize bytes.
func New(key []byte) (*Box, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("secretbox: key of %d bytes; it must be %d", len(key), KeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("secretbox: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("secretbox: %w", err)
	}
	b := &Box{aead: aead}
	sum := sha256.Sum256(append([]byte("tether secretbox key id\x00"), key...))
	copy(b.keyID[:], sum[:])
	return b, nil
}

// Seal seals value for tenant's secret name: version, key id, nonce, then
// the ciphertext with its tag.
func (b *Box) Seal(tenant, name string, value []byte) []byte {
	out := make([]byte, 0, 1+keyIDSize+b.aead.NonceSize()+len(value)+b.aead.Overhead())
	out = append(out, version)
	out = append(out, b.keyID[:]...)
	nonce := make([]byte, b.aead.NonceSize())
	_, _ = rand.Read(nonce) // crypto/rand.Read never fails
	out = append(out, nonce...)
	return b.aead.Seal(out, nonce, value, additional(tenant, name))
}

// Open opens what Seal sealed for tenant's secret name.
func (b *Box) Open(tenant, name string, sealed []byte) ([]byte, error) {
	head := 1 + keyIDSize + b.aead.NonceSize()
	if len(sealed) < head+b.aead.Overhead() || sealed[0] != version {
		return nil, errors.New("secretbox: not a sealed value")
	}
	if string(sealed[1:1+keyIDSize]) != string(b.keyID[:]) {
		return nil, ErrOtherKey
	}
	out, err := b.aead.Open(nil, sealed[1+keyIDSize:head], sealed[head:], additional(tenant, name))
	if err != nil {
		return nil, fmt.Errorf("secretbox: the sealed value does not open (altered, or moved to another row): %w", err)
	}
	return out, nil
}

// additional binds a seal to its tenant and name (names hold no NUL).
func additional(tenant, name string) []byte {
	return []byte("tether secret\x00" + tenant + "\x00" + name)
}
