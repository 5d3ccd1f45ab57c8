package cluster

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"io"
	"net/http"
	"strconv"

	"github.com/tetherhq/tether/internal/domain"
)

// This file is where a forwarded call is signed (Sign) and where its
// signature and body digest are checked (checkSignature, verifiedBody):
// nothing else in Tether holds the secret's HMAC.
//
// The signature covers the method, the request URI, the forwarding and the
// receiving node's ids, the time, a nonce, the caller and how the body is
// covered: a call with a body sends it chunked with a trailer,
// Tether-Forwarded-Digest, an HMAC of the signature and the body's SHA-256,
// checked when the body ends, before the call has any effect (an exec's
// command runs only after its whole body arrived; an upload is committed
// only then). A body that does not match fails its reads with errBody.

// The headers of a forwarded request.
const (
	hdrBy      = "Tether-Forwarded-By"
	hdrTo      = "Tether-Forwarded-To"
	hdrNonce   = "Tether-Forwarded-Nonce"
	hdrAt      = "Tether-Forwarded-At"
	hdrTenant  = "Tether-Forwarded-Tenant"
	hdrKeyID   = "Tether-Forwarded-Key-Id"
	hdrKeyName = "Tether-Forwarded-Key-Name"
	hdrBody    = "Tether-Forwarded-Body"
	hdrDigest  = "Tether-Forwarded-Digest"
	hdrSig     = "Tether-Forwarded-Signature"
)

// How a forwarded call's body is covered (hdrBody).
const (
	bodyNone    = "none"    // no body: any byte of one fails the call
	bodyTrailer = "trailer" // the digest trailer covers it
)

// Sign makes r a call this node forwards to node `to` for the caller as:
// it sets the forwarding headers and their signature, drops the API key
// (which stays with the replica it was sent to) and, when r has a body,
// sends it chunked, followed by the digest trailer that covers it.
func (c *Cluster) Sign(r *http.Request, to string, as Caller) {
	h := r.Header
	h.Del("Authorization")
	h.Set(hdrBy, c.Self)
	h.Set(hdrTo, to)
	h.Set(hdrNonce, rand.Text())
	h.Set(hdrAt, strconv.FormatInt(c.Now().UnixMilli(), 10))
	h.Set(hdrTenant, as.Tenant)
	h.Set(hdrKeyID, as.Key.KeyID)
	h.Set(hdrKeyName, as.Key.KeyName)
	if r.Body == nil || r.Body == http.NoBody {
		h.Set(hdrBody, bodyNone)
		h.Set(hdrSig, c.sign(signedFields(r)...))
		return
	}
	h.Set(hdrBody, bodyTrailer)
	sig := c.sign(signedFields(r)...)
	h.Set(hdrSig, sig)
	// Chunked, so that the digest can follow the body as a trailer.
	r.ContentLength = -1
	h.Del("Content-Length")
	r.Trailer = http.Header{hdrDigest: nil}
	r.Body = &digestingBody{rc: r.Body, h: sha256.New(), trailer: r.Trailer,
		done: func(sum []byte) string { return c.bodyDigest(sig, sum) }}
}

// sign is the signature of a forwarded request's fields.
func (c *Cluster) sign(fields ...string) string {
	mac := hmac.New(sha256.New, c.Secret)
	for _, f := range fields {
		mac.Write([]byte(f))
		mac.Write([]byte{0})
	}
	return hex.EncodeToString(mac.Sum(nil))
}

// signedFields are the fields a forwarded request's signature covers.
func signedFields(r *http.Request) []string {
	h := r.Header
	return []string{r.Method, r.URL.RequestURI(), h.Get(hdrBy), h.Get(hdrTo),
		h.Get(hdrAt), h.Get(hdrNonce),
		h.Get(hdrTenant), h.Get(hdrKeyID), h.Get(hdrKeyName), h.Get(hdrBody)}
}

// bodyDigest is the digest trailer of a forwarded call signed sig whose
// body has the SHA-256 sum.
func (c *Cluster) bodyDigest(sig string, sum []byte) string {
	return c.sign("body", sig, hex.EncodeToString(sum))
}

// checkSignature reports whether r's signature is the one its fields have.
func (c *Cluster) checkSignature(r *http.Request) error {
	sig, err := hex.DecodeString(r.Header.Get(hdrSig))
	if err != nil {
		return errSig
	}
	want, _ := hex.DecodeString(c.sign(signedFields(r)...))
	if !hmac.Equal(sig, want) {
		return errSig
	}
	return nil
}

// digestingBody is a forwarded call's outgoing body: at its end it sets
// the digest trailer.
type digestingBody struct {
	rc      io.ReadCloser
	h       hash.Hash
	trailer http.Header
	done    func(sum []byte) string
}

func (b *digestingBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.h.Write(p[:n])
	if errors.Is(err, io.EOF) {
		b.trailer.Set(hdrDigest, b.done(b.h.Sum(nil)))
	}
	return n, err
}

func (b *digestingBody) Close() error { return b.rc.Close() }

// verifyBody replaces the body of r, a call whose signature checked, with
// one whose end is an error unless the digest trailer matches what arrived
// (or, for a call signed without a body, unless nothing did). bad, if not
// nil, is told of that error.
func (c *Cluster) verifyBody(r *http.Request, mode string, bad func(error)) {
	sig := r.Header.Get(hdrSig)
	body := r.Body
	if body == nil {
		body = http.NoBody
	}
	r.Body = &verifiedBody{rc: body, req: r, mode: mode, h: sha256.New(), bad: bad,
		want: func(sum []byte) string { return c.bodyDigest(sig, sum) }}
}

// verifiedBody is a forwarded call's incoming body (see verifyBody).
type verifiedBody struct {
	rc   io.ReadCloser
	req  *http.Request
	mode string
	h    hash.Hash
	want func(sum []byte) string
	bad  func(error) // may be nil
	n    int64
	err  error
}

// errBody is a forwarded call whose body is not the one signed.
func errBody() error {
	return domain.Errorf(domain.CodeUnauthenticated, "the forwarded call is refused: its body is not the one its signature covers")
}

func (b *verifiedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.rc.Read(p)
	b.n += int64(n)
	b.h.Write(p[:n])
	if errors.Is(err, io.EOF) || (b.mode == bodyNone && b.n > 0) {
		ok := b.n == 0
		if b.mode == bodyTrailer {
			got, _ := hex.DecodeString(b.req.Trailer.Get(hdrDigest))
			want, _ := hex.DecodeString(b.want(b.h.Sum(nil)))
			ok = len(got) > 0 && hmac.Equal(got, want)
		}
		if !ok {
			b.err = errBody()
			if b.bad != nil {
				b.bad(b.err)
			}
			return 0, b.err
		}
	}
	return n, err
}

func (b *verifiedBody) Close() error { return b.rc.Close() }
