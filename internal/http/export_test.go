package http

// StatusOfCode is the table of error codes and their statuses, for the
// contract tests.
var StatusOfCode = statusOf

// SignForwarded signs a forwarded call the way a node does, for the tests
// that forge, replay and misdirect them.
func SignForwarded(secret []byte, method, uri, by, to, at, nonce, tenant, keyID, keyName string) string {
	return (&router{Nodes: Nodes{Secret: secret}}).sign(method, uri, by, to, at, nonce, tenant, keyID, keyName)
}
