package http

// StatusOfCode is the table of error codes and their statuses, for the
// contract tests.
var StatusOfCode = statusOf
