package store

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"
	"unsafe"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tetherhq/tether/internal/domain"
)

// A sandbox row, declared once: each column of the table sandboxes that
// reads return, how it is read, and the field of domain.Sandbox it fills.
// The select lists (sandboxColumns, clientColumns), the fast decoder of
// Postgres's bytes (rawSandbox), pgx's scan (scanRow) and the column count
// all derive from it. A new column is a line here (and the Sandbox field it
// fills) beside its migration; fieldsOf refuses a line whose kind does
// not fit its field.
var sandboxTable = [...]column{
	{name: "id", field: "ID", kind: colText},
	{name: "tenant", field: "Tenant", kind: colText},
	{name: "state", field: "State", kind: colText},
	{name: "provider", field: "Provider", kind: colText},
	{name: "owner", field: "Owner", kind: colNullText},
	{name: "labels", field: "Labels", kind: colJSONB},
	// A client is never shown a sandbox's env, setup or params (secrets,
	// and large): its reads leave them in the database.
	{name: "env", field: "Env", kind: colJSONB, client: `'{}'::jsonb`},
	{name: "setup", field: "Setup", kind: colText, client: `''`},
	{name: "params", field: "Params", kind: colRawJSON, client: `'{}'::jsonb`},
	{name: "reason", field: "Reason", kind: colNullText},
	{name: "error", field: "Error", kind: colNullText},
	{name: "released", field: "Released", kind: colBool},
	{name: "provider_id", field: "ProviderID", kind: colNullText},
	{name: "work_dir", field: "WorkDir", kind: colNullText},
	{name: "created_at", field: "CreatedAt", kind: colTime},
	{name: "updated_at", field: "UpdatedAt", kind: colTime},
	{name: "ready_at", field: "ReadyAt", kind: colNullTime},
	{name: "ended_at", field: "EndedAt", kind: colNullTime},
	{name: "released_at", field: "ReleasedAt", kind: colNullTime},
	{name: "expires_at", field: "ExpiresAt", kind: colTime},
	{name: "create_deadline", field: "CreateDeadline", kind: colTime},
	{name: "epoch", field: "Epoch", kind: colInt8},
	{name: "attempts", field: "Attempts", kind: colInt4},
	{name: "release_error", field: "ReleaseError", kind: colNullText},
	{name: "release_attempts", field: "ReleaseAttempts", kind: colInt4},
	{name: "node", field: "Node", kind: colNullText},
	{name: "pause_deadline", field: "PauseDeadline", kind: colNullTime},
	{name: "on_end", field: "OnEnd", kind: colNullText},
	{name: "from_snapshot", field: "FromSnapshot", kind: colNullText},
}

// column is one column of sandboxTable.
type column struct {
	name string
	// field names the field of domain.Sandbox the column fills.
	field string
	kind  colKind
	// client is what reads that answer clients select in the column's
	// place, or "" to read the column.
	client string
}

// fieldTypes is the Go type of the field each kind fills (a named type of
// the same kind will do: domain.State for a string).
var fieldTypes = map[colKind]reflect.Type{
	colText: reflect.TypeFor[string](), colNullText: reflect.TypeFor[string](),
	colJSONB: reflect.TypeFor[map[string]string](), colRawJSON: reflect.TypeFor[json.RawMessage](),
	colBool: reflect.TypeFor[bool](), colInt8: reflect.TypeFor[int64](), colInt4: reflect.TypeFor[int](),
	colTime: reflect.TypeFor[time.Time](), colNullTime: reflect.TypeFor[*time.Time](),
}

// sandboxFields is where each column's field lies in a domain.Sandbox.
var sandboxFields = fieldsOf(sandboxTable[:])

// fieldsOf finds each column's field in domain.Sandbox, and checks that
// its kind fills it: a column that does not is a bug, refused at start
// (and by every test of the package).
func fieldsOf(cols []column) []uintptr {
	st := reflect.TypeFor[domain.Sandbox]()
	offsets := make([]uintptr, len(cols))
	for i, c := range cols {
		f, ok := st.FieldByName(c.field)
		want := fieldTypes[c.kind]
		if !ok || want == nil || f.Type.Kind() != want.Kind() || (want.Kind() != reflect.String && f.Type != want) {
			panic(fmt.Sprintf("store: column %s fills domain.Sandbox.%s, which a column of kind %d cannot", c.name, c.field, c.kind))
		}
		offsets[i] = f.Offset
	}
	return offsets
}

// colValue is one column's value as read: text (for NULL, ""), jsonb as its
// text, a bool, an integer, a time (null set for a NULL time).
type colValue struct {
	text []byte
	b    bool
	i    int64
	t    time.Time
	null bool
}

// The select lists: every sandbox read uses sandboxColumns, in
// sandboxTable's order; reads that answer clients use clientColumns. Queries
// that read through an UPDATE ... RETURNING qualify them with the table
// alias s.
var (
	sandboxColumns = selectList(false)
	clientColumns  = selectList(true)
)

func selectList(forClients bool) string {
	cols := make([]string, len(sandboxTable))
	for i, c := range sandboxTable {
		cols[i] = "s." + c.name
		if forClients && c.client != "" {
			cols[i] = c.client
		}
	}
	return strings.Join(cols, ", ")
}

// fill makes a sandbox of its columns' values, in sandboxTable's order:
// each written to its field where fieldsOf found it, as its kind reads.
func fill(values *[len(sandboxTable)]colValue) (domain.Sandbox, error) {
	var sb domain.Sandbox
	base := unsafe.Pointer(&sb)
	for i := range sandboxTable {
		p, v := unsafe.Add(base, sandboxFields[i]), &values[i]
		switch sandboxTable[i].kind {
		case colText, colNullText:
			*(*string)(p) = string(v.text)
		case colJSONB:
			m, err := decodeStringMap(v.text)
			if err != nil {
				return domain.Sandbox{}, fmt.Errorf("decode %s: %w", sandboxTable[i].name, err)
			}
			*(*map[string]string)(p) = m
		case colRawJSON:
			*(*json.RawMessage)(p) = append(json.RawMessage{}, v.text...)
		case colBool:
			*(*bool)(p) = v.b
		case colInt8:
			*(*int64)(p) = v.i
		case colInt4:
			*(*int)(p) = int(v.i)
		case colTime:
			*(*time.Time)(p) = v.t
		case colNullTime:
			if !v.null {
				t := v.t
				*(**time.Time)(p) = &t
			}
		}
	}
	return sb, nil
}

// holder is where pgx's scan puts one column of a kind, and how it becomes
// a colValue: for scanRow, the slow path.
type holder struct {
	text  pgtype.Text
	bytes []byte
	str   string
	b     bool
	i8    int64
	i4    int32
	t     pgtype.Timestamptz
}

// dest is the scan destination of a column of kind k.
func (h *holder) dest(k colKind) any {
	switch k {
	case colText:
		return &h.str
	case colNullText:
		return &h.text
	case colJSONB, colRawJSON:
		return &h.bytes
	case colBool:
		return &h.b
	case colInt8:
		return &h.i8
	case colInt4:
		return &h.i4
	default:
		return &h.t
	}
}

// value is the column's value once scanned.
func (h *holder) value(k colKind) colValue {
	switch k {
	case colText:
		return colValue{text: []byte(h.str)}
	case colNullText:
		return colValue{text: []byte(h.text.String)}
	case colJSONB, colRawJSON:
		return colValue{text: h.bytes}
	case colBool:
		return colValue{b: h.b}
	case colInt8:
		return colValue{i: h.i8}
	case colInt4:
		return colValue{i: int64(h.i4)}
	default:
		return colValue{t: h.t.Time, null: !h.t.Valid}
	}
}
