//go:build unix

package cli

import (
	"os"

	"golang.org/x/sys/unix"
)

// resizeSignals tell shell that the local terminal changed size.
var resizeSignals = []os.Signal{unix.SIGWINCH}
