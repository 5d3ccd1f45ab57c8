package openapi

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/go-openapi/spec"
)

// A common is what every operation of a group answers besides its own
// responses: the errors of the middleware in front of it (authentication,
// the request rate, a bug, the store out of reach) and the response headers
// that go with them. The handlers' annotations leave them out and name only
// their own responses; AddCommon adds them to the Swagger 2.0 document.
type common struct {
	// prefix selects the group: the operations whose path starts with it.
	prefix string
	// responses are the Problem responses of each status, by status.
	responses map[int]string
	// headers are added to the responses of their status (0: every
	// response), after the responses.
	headers []commonHeader
}

// commonHeader is a response header of a common.
type commonHeader struct {
	status                 int // 0: every response
	name, typ, description string
}

// The descriptions more than one group shares.
const (
	internalBug        = "INTERNAL: a bug; quote the request id when reporting it"
	requestIDEchoed    = "identifies the request in Tether's logs (echoes a sane X-Request-ID sent with the request)"
	retryAfter         = "seconds to wait before retrying"
	retryAfterUnavail  = "seconds to wait before retrying, sent with UNAVAILABLE"
	problemDefinition  = "Problem"
	problemDefinitionR = "#/definitions/" + problemDefinition
)

// retryHeaders are the headers of every 429 and 503 and of every response
// of the API and of preview URLs.
var retryHeaders = []commonHeader{
	{429, "Retry-After", "integer", retryAfter},
	{503, "Retry-After", "integer", retryAfterUnavail},
	{0, "X-Request-ID", "string", requestIDEchoed},
}

// commons is the table of what each group of operations shares; the first
// group whose prefix a path has is its group.
var commons = []common{
	{ // the API: withAuth (401), the key's request rate (429), the store (503)
		prefix: "/v1/",
		responses: map[int]string{
			401: "UNAUTHENTICATED: no API key, or one Tether does not know",
			429: "QUOTA_EXCEEDED: over the API key's request rate; retry after Retry-After seconds",
			500: internalBug,
			503: "UNAVAILABLE",
		},
		headers: append([]commonHeader{{401, "WWW-Authenticate", "string", "the Bearer challenge"}}, retryHeaders...),
	},
	{ // preview URLs: no API key; their 429 and 503 are their own
		prefix:    "/p/",
		responses: map[int]string{500: internalBug},
		headers:   retryHeaders,
	},
	{ // health, metrics and this API's documents
		prefix:    "/",
		responses: map[int]string{500: "INTERNAL"},
		headers:   []commonHeader{{0, "X-Request-ID", "string", "identifies the request in Tether's logs"}},
	},
}

// AddCommon adds to every operation of a Swagger 2.0 document what its
// group shares (see commons): each response whose status the operation
// does not declare, then each header its responses do not declare. What an
// annotation declares is kept as it is.
func AddCommon(sw *spec.Swagger) error {
	if sw.Paths == nil {
		return fmt.Errorf("add common responses: the document has no paths")
	}
	if _, ok := sw.Definitions[problemDefinition]; !ok {
		return fmt.Errorf("add common responses: the document has no %s definition", problemDefinition)
	}
	for path, item := range sw.Paths.Paths {
		i := slices.IndexFunc(commons, func(c common) bool { return strings.HasPrefix(path, c.prefix) })
		if i < 0 {
			return fmt.Errorf("add common responses: %s is in no group", path)
		}
		for _, op := range []*spec.Operation{item.Get, item.Put, item.Post, item.Delete, item.Options, item.Head, item.Patch} {
			if op != nil {
				commons[i].addTo(op)
			}
		}
	}
	return nil
}

// addTo adds c's responses, then its headers, to op where op declares none.
func (c common) addTo(op *spec.Operation) {
	if op.Responses == nil {
		op.Responses = &spec.Responses{}
	}
	rs := &op.Responses.ResponsesProps
	if rs.StatusCodeResponses == nil {
		rs.StatusCodeResponses = map[int]spec.Response{}
	}
	for _, status := range slices.Sorted(maps.Keys(c.responses)) {
		if _, ok := rs.StatusCodeResponses[status]; !ok {
			rs.StatusCodeResponses[status] = *spec.NewResponse().
				WithDescription(c.responses[status]).WithSchema(spec.RefSchema(problemDefinitionR))
		}
	}
	for _, h := range c.headers {
		for status, r := range rs.StatusCodeResponses {
			if h.status == 0 || h.status == status {
				rs.StatusCodeResponses[status] = withHeader(r, h)
			}
		}
		if h.status == 0 && rs.Default != nil {
			d := withHeader(*rs.Default, h)
			rs.Default = &d
		}
	}
}

// withHeader is r with the header h, unless r declares one of that name.
func withHeader(r spec.Response, h commonHeader) spec.Response {
	for name := range r.Headers {
		if strings.EqualFold(name, h.name) {
			return r
		}
	}
	headers := maps.Clone(r.Headers)
	if headers == nil {
		headers = map[string]spec.Header{}
	}
	headers[h.name] = spec.Header{SimpleSchema: spec.SimpleSchema{Type: h.typ}, HeaderProps: spec.HeaderProps{Description: h.description}}
	r.Headers = headers
	return r
}
