//go:build !unix

package cli

import "os"

// resizeSignals: none where there is no SIGWINCH; a shell keeps the size
// it started with.
var resizeSignals []os.Signal
