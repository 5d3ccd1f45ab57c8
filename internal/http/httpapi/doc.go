// Package httpapi holds the request and response pieces every part of the
// API shares: problems (RFC 9457 errors) and the handler type that returns
// them, the request state the middleware leaves for handlers, decoding and
// validation of what clients send, and the middleware itself (request ids,
// logging, metrics, recovery, body limits and pacing, authentication and
// its guard, quotas). It imports no other part of the API.
package httpapi
