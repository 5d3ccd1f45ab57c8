package store

import (
	"strings"
	"testing"
)

// TestColumnTableRefusesAMisfit: a column whose kind cannot fill its field,
// or whose field is not there, is refused when the table is read.
func TestColumnTableRefusesAMisfit(t *testing.T) {
	t.Parallel()
	for _, c := range []column{
		{name: "epoch", field: "Epoch", kind: colText},
		{name: "labels", field: "Labels", kind: colRawJSON},
		{name: "ready_at", field: "ReadyAt", kind: colTime},
		{name: "nope", field: "NoSuchField", kind: colText},
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(r.(string), c.name) {
					t.Errorf("fieldsOf(%+v) = %v; want a panic naming the column", c, r)
				}
			}()
			fieldsOf([]column{c})
		}()
	}
	if got := fieldsOf(sandboxTable[:]); len(got) != len(sandboxTable) {
		t.Errorf("fieldsOf(sandboxTable) = %d offsets, want %d", len(got), len(sandboxTable))
	}
}
