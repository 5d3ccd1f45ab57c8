package controlplane

import (
	"strconv"
	"time"

	"github.com/tetherhq/tether/internal/http/jsoncodec"
)

// appendJSON appends s as encoding/json encodes it with SetEscapeHTML(false)
// (field order, nulls, sorted labels, RFC 3339 times, string escapes),
// without reflection: the one body every sandbox read, create and wait
// answers with. TestSandboxJSONMatchesEncodingJSON holds the two equal.
func (s *Sandbox) appendJSON(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = jsoncodec.AppendString(b, s.ID)
	b = append(b, `,"state":`...)
	b = jsoncodec.AppendString(b, s.State)
	b = append(b, `,"provider":`...)
	b = jsoncodec.AppendString(b, s.Provider)
	b = append(b, `,"owner":`...)
	b = jsoncodec.AppendOptional(b, s.Owner)
	b = append(b, `,"labels":`...)
	b = jsoncodec.AppendLabels(b, s.Labels)
	b = append(b, `,"reason":`...)
	b = jsoncodec.AppendOptional(b, s.Reason)
	b = append(b, `,"error":`...)
	b = jsoncodec.AppendOptional(b, s.Error)
	b = append(b, `,"released":`...)
	b = strconv.AppendBool(b, s.Released)
	if s.ReleaseError != nil {
		b = append(b, `,"release_error":`...)
		b = jsoncodec.AppendString(b, *s.ReleaseError)
	}
	b = append(b, `,"provider_id":`...)
	b = jsoncodec.AppendOptional(b, s.ProviderID)
	b = append(b, `,"work_dir":`...)
	b = jsoncodec.AppendOptional(b, s.WorkDir)
	b = append(b, `,"node":`...)
	b = jsoncodec.AppendOptional(b, s.Node)
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(s.Attempts), 10)
	b = append(b, `,"created_at":`...)
	b = jsoncodec.AppendTime(b, s.CreatedAt)
	b = append(b, `,"updated_at":`...)
	b = jsoncodec.AppendTime(b, s.UpdatedAt)
	b = append(b, `,"ready_at":`...)
	b = jsoncodec.AppendOptionalTime(b, s.ReadyAt)
	b = append(b, `,"ended_at":`...)
	b = jsoncodec.AppendOptionalTime(b, s.EndedAt)
	b = append(b, `,"released_at":`...)
	b = jsoncodec.AppendOptionalTime(b, s.ReleasedAt)
	b = append(b, `,"expires_at":`...)
	b = jsoncodec.AppendTime(b, s.ExpiresAt)
	b = append(b, `,"create_deadline":`...)
	b = jsoncodec.AppendTime(b, s.CreateDeadline)
	b = append(b, `,"pause_deadline":`...)
	b = jsoncodec.AppendOptionalTime(b, s.PauseDeadline)
	b = append(b, `,"on_end":`...)
	b = jsoncodec.AppendOptional(b, s.OnEnd)
	b = append(b, `,"from_snapshot":`...)
	b = jsoncodec.AppendOptional(b, s.FromSnapshot)
	return append(b, '}')
}

// AppendJSON is appendJSON when s is jsonable: Sandbox is a
// jsoncodec.Appender.
func (s Sandbox) AppendJSON(b []byte) ([]byte, bool) {
	if !s.jsonable() {
		return b, false
	}
	return s.appendJSON(b), true
}

// jsonable is whether appendJSON encodes s as encoding/json would: every
// time is one it can encode (else encoding/json fails, and so must the
// caller, through it).
func (s *Sandbox) jsonable() bool {
	for _, t := range []*time.Time{s.ReadyAt, s.EndedAt, s.ReleasedAt, s.PauseDeadline} {
		if t != nil && !jsoncodec.TimeOK(*t) {
			return false
		}
	}
	return jsoncodec.TimeOK(s.CreatedAt) && jsoncodec.TimeOK(s.UpdatedAt) && jsoncodec.TimeOK(s.ExpiresAt) && jsoncodec.TimeOK(s.CreateDeadline)
}
