// Package jsoncodec is the API's JSON codec: a strict decoder of request
// bodies (exactly one object, no unknown fields, no key named twice, errors
// a client can act on) and an encoder of answers that lets the most common
// bodies write themselves without reflection (Appender).
package jsoncodec
