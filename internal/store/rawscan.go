package store

import (
	"encoding/binary"
	"encoding/json"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tetherhq/tether/internal/domain"
)

// A sandbox row read the fast way: the columns decoded straight from the
// bytes Postgres sent, without pgx's per-query scan
// planning, which builds a plan for each of the 29 columns on every query
// (a timestamptz plan alone is an allocation; eight of them per row). Any
// column whose type, format or value is not the one expected (a NULL where
// none may be, an infinite timestamp, a text-format timestamp) sends the whole
// row down pgx's own Scan instead, so that the result, or the error, is
// what it always was. TestFastScanMatchesScan compares the two.

// rawRow is a row whose columns can be read as the bytes Postgres sent:
// pgx.Rows, and the rows pgx.CollectRows hands out.
type rawRow interface {
	FieldDescriptions() []pgconn.FieldDescription
	RawValues() [][]byte
	Scan(dest ...any) error
}

// firstRow is the first row of a query, as pgx's QueryRow gives it, but
// readable by scanSandbox's fast path (QueryRow's row hides its bytes).
type firstRow struct {
	rows pgx.Rows
	err  error
}

// Scan is pgx.Row's Scan.
func (r firstRow) Scan(dest ...any) error {
	return r.read(func(rows pgx.Rows) error { return rows.Scan(dest...) })
}

// read moves to the first row, reads it with f, and closes the rows; no
// row is pgx.ErrNoRows.
func (r firstRow) read(f func(pgx.Rows) error) error {
	if r.err != nil {
		if r.rows != nil {
			r.rows.Close()
		}
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := f(r.rows); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

// colKind is how a column of sandboxTable is read.
type colKind uint8

const (
	colText       colKind = iota // text NOT NULL, into a string
	colNullText                  // text, into a string ("" for NULL)
	colJSONB                     // jsonb NOT NULL, as its text, into a map of strings
	colRawJSON                   // jsonb NOT NULL, as its text, into a json.RawMessage
	colBool                      // boolean NOT NULL
	colTime                      // timestamptz NOT NULL
	colNullTime                  // timestamptz
	colInt8                      // bigint NOT NULL
	colInt4                      // integer NOT NULL
	colExtraState                // a leading text NOT NULL, into a *domain.State
)

const (
	binaryFormat            = pgtype.BinaryFormatCode
	microsecFromUnixToY2K   = 946684800 * 1_000_000
	infinityMicroseconds    = 9223372036854775807
	negInfinityMicroseconds = -9223372036854775808
)

// kindOIDs is the type each kind must have.
var kindOIDs = [...]uint32{
	colText: pgtype.TextOID, colNullText: pgtype.TextOID, colJSONB: pgtype.JSONBOID, colRawJSON: pgtype.JSONBOID, colBool: pgtype.BoolOID,
	colTime: pgtype.TimestamptzOID, colNullTime: pgtype.TimestamptzOID, colInt8: pgtype.Int8OID, colInt4: pgtype.Int4OID,
	colExtraState: pgtype.TextOID,
}

// rawSandbox decodes a row of sandboxColumns, after the extra columns
// (each a *domain.State), from its bytes; ok is false when it cannot,
// and the row must be scanned by pgx.
func rawSandbox(r rawRow, extra []any) (sb domain.Sandbox, ok bool, err error) {
	fds, values := r.FieldDescriptions(), r.RawValues()
	if len(fds) != len(extra)+len(sandboxTable) || len(values) != len(fds) {
		return sb, false, nil
	}
	var decoded [len(sandboxTable)]colValue
	for i, fd := range fds {
		kind := colExtraState
		if i >= len(extra) {
			kind = sandboxTable[i-len(extra)].kind
		}
		v, ok := rawColumn(fd, values[i], kind)
		if !ok {
			return sb, false, nil
		}
		if i < len(extra) {
			if !setExtra(extra[i], v) {
				return sb, false, nil
			}
			continue
		}
		if decoded[i-len(extra)], ok = rawValue(v, kind); !ok {
			return sb, false, nil
		}
	}
	sb, err = fill(&decoded)
	return sb, true, err
}

// setExtra puts a leading column's text into its destination, a
// *domain.State; false for any other destination.
func setExtra(dest any, v []byte) bool {
	st, ok := dest.(*domain.State)
	if ok {
		*st = domain.State(v)
	}
	return ok
}

// rawValue is a column's value from the bytes rawColumn cut out of it;
// ok is false when pgx must scan the row.
func rawValue(v []byte, kind colKind) (colValue, bool) {
	switch kind {
	case colText, colNullText, colJSONB, colRawJSON:
		return colValue{text: v}, true
	case colBool:
		return colValue{b: v[0] != 0}, true
	case colInt8:
		return colValue{i: int64(binary.BigEndian.Uint64(v))}, true
	case colInt4:
		return colValue{i: int64(int32(binary.BigEndian.Uint32(v)))}, true
	}
	if v == nil {
		return colValue{null: true}, true
	}
	t, ok := rawTime(v)
	return colValue{t: t}, ok
}

// rawColumn checks the bytes v of a column of kind against its
// description and returns what is to be decoded of them (jsonb's text);
// ok is false when pgx must scan the row.
func rawColumn(fd pgconn.FieldDescription, v []byte, kind colKind) (_ []byte, ok bool) {
	if fd.DataTypeOID != kindOIDs[kind] || (v == nil && kind != colNullText && kind != colNullTime) {
		return nil, false
	}
	// pgx asks for text and jsonb as text, the rest in binary; text reads
	// the same either way, and binary jsonb is a version byte and the text.
	isBinary := fd.Format == binaryFormat
	switch kind {
	case colText, colNullText, colExtraState:
		return v, true
	case colJSONB, colRawJSON:
		if !isBinary {
			return v, true
		}
		if len(v) == 0 || v[0] != 1 {
			return nil, false
		}
		return v[1:], true
	case colBool:
		return v, isBinary && len(v) == 1
	case colInt8:
		return v, isBinary && len(v) == 8
	case colInt4:
		return v, isBinary && len(v) == 4
	default: // timestamps, checked by rawTimes
		return v, isBinary
	}
}

// minTime and endTime bound the timestamps pgx accepts; outside them (and
// for ±infinity) pgx's scan decides.
var (
	minTime = time.Date(-4713, 11, 24, 0, 0, 0, 0, time.UTC)
	endTime = time.Date(294277, 1, 1, 0, 0, 0, 0, time.UTC)
)

// rawTime is a binary timestamptz as pgx's scan makes it (the same
// time.Unix, in the local zone), and whether pgx would make one.
func rawTime(b []byte) (time.Time, bool) {
	if len(b) != 8 {
		return time.Time{}, false
	}
	us := int64(binary.BigEndian.Uint64(b))
	if us == infinityMicroseconds || us == negInfinityMicroseconds {
		return time.Time{}, false
	}
	t := time.Unix(microsecFromUnixToY2K/1_000_000+us/1_000_000, (microsecFromUnixToY2K%1_000_000*1_000)+(us%1_000_000*1_000))
	if t.Before(minTime) || !t.Before(endTime) {
		return time.Time{}, false
	}
	return t, true
}

// decodeStringMap decodes a JSON object of strings (labels, env). The
// objects Postgres writes for jsonb (`{"a": "b", "c": "d"}`) without
// escapes are read by hand; anything else goes to encoding/json, whose
// result this matches.
func decodeStringMap(b []byte) (map[string]string, error) {
	if string(b) == "{}" {
		return map[string]string{}, nil
	}
	if m, ok := plainStringMap(b); ok {
		return m, nil
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// plainStringMap reads a JSON object of strings that have no escapes and
// are valid UTF-8; ok is false for anything else.
func plainStringMap(b []byte) (map[string]string, bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	m := map[string]string{}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return m, skipSpace(b, i+1) == len(b)
	}
	for {
		k, next, ok := plainString(b, i)
		if !ok {
			return nil, false
		}
		i = skipSpace(b, next)
		if i >= len(b) || b[i] != ':' {
			return nil, false
		}
		v, next, ok := plainString(b, skipSpace(b, i+1))
		if !ok {
			return nil, false
		}
		m[k] = v
		i = skipSpace(b, next)
		if i >= len(b) {
			return nil, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return m, skipSpace(b, i+1) == len(b)
		default:
			return nil, false
		}
	}
}

// plainString reads the JSON string at b[i] if it has no escapes and no
// control characters and is valid UTF-8, returning it and the index past
// its closing quote.
func plainString(b []byte, i int) (string, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return "", 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			s := b[i+1 : j]
			if !utf8.Valid(s) {
				return "", 0, false
			}
			return string(s), j + 1, true
		case c == '\\' || c < ' ':
			return "", 0, false
		}
	}
	return "", 0, false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
