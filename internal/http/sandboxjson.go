package http

import (
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// appendJSON appends s as encoding/json encodes it with SetEscapeHTML(false)
// (field order, nulls, sorted labels, RFC 3339 times, string escapes),
// without reflection: the one body every sandbox read, create and wait
// answers with. TestSandboxJSONMatchesEncodingJSON holds the two equal.
func (s *Sandbox) appendJSON(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, s.ID)
	b = append(b, `,"state":`...)
	b = appendJSONString(b, s.State)
	b = append(b, `,"provider":`...)
	b = appendJSONString(b, s.Provider)
	b = append(b, `,"owner":`...)
	b = appendJSONOptional(b, s.Owner)
	b = append(b, `,"labels":`...)
	b = appendJSONLabels(b, s.Labels)
	b = append(b, `,"reason":`...)
	b = appendJSONOptional(b, s.Reason)
	b = append(b, `,"error":`...)
	b = appendJSONOptional(b, s.Error)
	b = append(b, `,"released":`...)
	b = strconv.AppendBool(b, s.Released)
	if s.ReleaseError != nil {
		b = append(b, `,"release_error":`...)
		b = appendJSONString(b, *s.ReleaseError)
	}
	b = append(b, `,"provider_id":`...)
	b = appendJSONOptional(b, s.ProviderID)
	b = append(b, `,"work_dir":`...)
	b = appendJSONOptional(b, s.WorkDir)
	b = append(b, `,"node":`...)
	b = appendJSONOptional(b, s.Node)
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(s.Attempts), 10)
	b = append(b, `,"created_at":`...)
	b = appendJSONTime(b, s.CreatedAt)
	b = append(b, `,"updated_at":`...)
	b = appendJSONTime(b, s.UpdatedAt)
	b = append(b, `,"ready_at":`...)
	b = appendJSONOptionalTime(b, s.ReadyAt)
	b = append(b, `,"ended_at":`...)
	b = appendJSONOptionalTime(b, s.EndedAt)
	b = append(b, `,"released_at":`...)
	b = appendJSONOptionalTime(b, s.ReleasedAt)
	b = append(b, `,"expires_at":`...)
	b = appendJSONTime(b, s.ExpiresAt)
	b = append(b, `,"create_deadline":`...)
	b = appendJSONTime(b, s.CreateDeadline)
	b = append(b, `,"pause_deadline":`...)
	b = appendJSONOptionalTime(b, s.PauseDeadline)
	b = append(b, `,"on_end":`...)
	b = appendJSONOptional(b, s.OnEnd)
	b = append(b, `,"from_snapshot":`...)
	b = appendJSONOptional(b, s.FromSnapshot)
	return append(b, '}')
}

// jsonTimeOK is whether encoding/json can encode t (time.Time.MarshalJSON
// refuses years outside 0-9999).
func jsonTimeOK(t time.Time) bool { y := t.Year(); return y >= 0 && y <= 9999 }

// jsonable is whether appendJSON encodes s as encoding/json would: every
// time is one it can encode (else encoding/json fails, and so must the
// caller, through it).
func (s *Sandbox) jsonable() bool {
	for _, t := range []*time.Time{s.ReadyAt, s.EndedAt, s.ReleasedAt, s.PauseDeadline} {
		if t != nil && !jsonTimeOK(*t) {
			return false
		}
	}
	return jsonTimeOK(s.CreatedAt) && jsonTimeOK(s.UpdatedAt) && jsonTimeOK(s.ExpiresAt) && jsonTimeOK(s.CreateDeadline)
}

func appendJSONOptional(b []byte, s *string) []byte {
	if s == nil {
		return append(b, "null"...)
	}
	return appendJSONString(b, *s)
}

func appendJSONTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

func appendJSONOptionalTime(b []byte, t *time.Time) []byte {
	if t == nil {
		return append(b, "null"...)
	}
	return appendJSONTime(b, *t)
}

// appendJSONLabels appends a map as encoding/json does: null for nil, the
// keys sorted.
func appendJSONLabels(b []byte, m map[string]string) []byte {
	if m == nil {
		return append(b, "null"...)
	}
	b = append(b, '{')
	var small [8]string
	keys := small[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		b = append(b, ':')
		b = appendJSONString(b, m[k])
	}
	return append(b, '}')
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s quoted as encoding/json quotes it without HTML
// escaping: \" \\ \b \f \n \r \t, other control characters as \u00XX,
// invalid UTF-8 as \ufffd, and U+2028 and U+2029 escaped.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= ' ' && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
