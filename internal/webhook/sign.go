package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// The headers of a delivery.
const (
	// HeaderSignature carries "t=<unix seconds>,v1=<hex HMAC-SHA256 of
	// "<t>.<raw body>">" with the endpoint's secret.
	HeaderSignature = "Tether-Signature"
	// HeaderDelivery carries the delivery's id, its idempotency key.
	HeaderDelivery = "Tether-Delivery"
)

// mac is the hex HMAC-SHA256 of "<t>.<body>" with secret.
func mac(secret string, t int64, body []byte) string {
	h := hmac.New(sha256.New, []byte(secret))
	h.Write([]byte(strconv.FormatInt(t, 10)))
	h.Write([]byte{'.'})
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// Sign returns the Tether-Signature header of body sent at t.
func Sign(secret string, t time.Time, body []byte) string {
	ts := t.Unix()
	return "t=" + strconv.FormatInt(ts, 10) + ",v1=" + mac(secret, ts, body)
}

// ErrSignature is every reason Verify refuses a delivery.
var ErrSignature = errors.New("webhook: bad signature")

// Verify checks a Tether-Signature header against the raw body, as a
// receiver does: a v1 signature must match, and its timestamp must be
// within tolerance of now (so that a captured delivery cannot be replayed
// later; 0 skips that check). Several v1 values may appear; one must match.
func Verify(secret, header string, body []byte, tolerance time.Duration, now time.Time) error {
	var ts int64 = -1
	var sigs []string
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return ErrSignature
			}
			ts = n
		case "v1":
			sigs = append(sigs, v)
		}
	}
	if ts < 0 || len(sigs) == 0 {
		return ErrSignature
	}
	if tolerance > 0 {
		if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
			return ErrSignature
		}
	}
	want := []byte(mac(secret, ts, body))
	for _, s := range sigs {
		if hmac.Equal([]byte(s), want) {
			return nil
		}
	}
	return ErrSignature
}
