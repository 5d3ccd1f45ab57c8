package http

import "crypto/sha256"

// StatusOfCode is the table of error codes and their statuses, for the
// contract tests.
var StatusOfCode = statusOf

// SignForwarded signs a forwarded call the way a node does, for the tests
// that forge, replay and misdirect them.
// bodyMode is "none" or "trailer" (then send ForwardedDigest as the
// Tether-Forwarded-Digest trailer).
func SignForwarded(secret []byte, method, uri, by, to, at, nonce, tenant, keyID, keyName, bodyMode string) string {
	return (&router{Nodes: Nodes{Secret: secret}}).sign(method, uri, by, to, at, nonce, tenant, keyID, keyName, bodyMode)
}

// ForwardedDigest is the digest trailer of a forwarded call signed sig
// with the body.
func ForwardedDigest(secret []byte, sig string, body []byte) string {
	sum := sha256.Sum256(body)
	return (&router{Nodes: Nodes{Secret: secret}}).bodyDigest(sig, sum[:])
}
