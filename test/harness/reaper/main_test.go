package main

import (
	"slices"
	"testing"
)

func TestLoopMounts(t *testing.T) {
	t.Parallel()
	const table = `27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
22 27 0:21 / /proc rw,relatime - proc proc rw
103 52 7:34 / /tmp/tether-flake.A9eV7N/local/sbx_1/workspace rw,nosuid,nodev,relatime - ext4 /dev/loop34 rw,noinit_itable
104 52 7:35 / /tmp/a\040b/workspace rw,relatime shared:7 - ext4 /dev/loop35 rw
105 52 0:40 / /tmp/not-a-loop rw,relatime - tmpfs loopy rw
`
	got := loopMounts(table)
	want := []string{"/tmp/tether-flake.A9eV7N/local/sbx_1/workspace", "/tmp/a b/workspace"}
	if !slices.Equal(got, want) {
		t.Errorf("loopMounts = %q, want %q", got, want)
	}
}
