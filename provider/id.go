package provider

import (
	"crypto/rand"
	"encoding/base32"
	"strings"
	"time"
)

// idPrefix starts every sandbox id.
const idPrefix = "sbx_"

var idEncoding = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

// NewSandboxID returns a fresh sandbox id: "sbx_" and 26 base32 characters
// (digits and lower-case letters) encoding the creation time in
// milliseconds (48 bits) then 80 random bits. Ids made later sort later, so
// new rows land at the end of the id indexes instead of all over them (less
// I/O, less WAL); the random part keeps them unguessable.
//
// Every sandbox id Tether gives a provider has this shape: 30 characters of
// [0-9a-z_], safe as a file name, a label value or (with "_" replaced) a DNS
// label.
func NewSandboxID() string {
	var b [16]byte
	_, _ = rand.Read(b[6:]) // crypto/rand.Read never fails
	ms := uint64(time.Now().UnixMilli())
	for i := 5; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	return idPrefix + idEncoding.EncodeToString(b[:])
}

// ValidSandboxID reports whether id has the shape of a sandbox id:
// NewSandboxID's, in its one spelling (26 characters carry 130 bits, so the
// last two must be zero; otherwise several ids would name the same 128).
func ValidSandboxID(id string) bool {
	rest, ok := strings.CutPrefix(id, idPrefix)
	if !ok || len(rest) != 26 {
		return false
	}
	b, err := idEncoding.DecodeString(rest)
	return err == nil && idEncoding.EncodeToString(b) == rest
}

// snapshotPrefix starts every snapshot id.
const snapshotPrefix = "snp_"

// NewSnapshotID returns a fresh snapshot id: "snp_" and 26 characters made
// like a sandbox id's (NewSandboxID), so that it too is safe as a file
// name and sorts by creation.
func NewSnapshotID() string {
	return snapshotPrefix + strings.TrimPrefix(NewSandboxID(), idPrefix)
}

// ValidSnapshotID reports whether id has the shape of a snapshot id.
func ValidSnapshotID(id string) bool {
	rest, ok := strings.CutPrefix(id, snapshotPrefix)
	return ok && ValidSandboxID(idPrefix+rest)
}

// ValidName reports whether name is a name a tenant gives what it keeps
// in Tether and refers to by name in create params (secrets, network
// policies): 1-100 letters, digits, '.', '_' and '-', starting with a
// letter or digit.
func ValidName(name string) bool {
	if name == "" || len(name) > 100 {
		return false
	}
	for i, c := range name {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}
