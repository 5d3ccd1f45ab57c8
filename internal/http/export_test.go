package http

import "github.com/tetherhq/tether/internal/http/httpapi"

// StatusOfCode is the table of error codes and their statuses, for the
// contract tests.
var StatusOfCode = httpapi.StatusOf
