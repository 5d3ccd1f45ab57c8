// Package migrations holds Tether's schema as goose SQL migrations, embedded
// in the binary so that `tether migrate` and `tether serve` need no files.
package migrations

import "embed"

// FS holds the migration files, named YYYYMMDDHHMMSS_name.sql.
//
//go:embed *.sql
var FS embed.FS
