package cli

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"golang.org/x/term"
)

// What the CLI shows comes from sandboxes and tenants (a command's output,
// a file, labels, owners, key names, error details), and a terminal acts on
// some characters instead of showing them: output that moves the cursor,
// retitles the window, rewrites the line or writes to the clipboard must
// not do so in the operator's terminal. So:
//
//   - table cells, event lines and messages show such characters as
//     escapes (cell, printable), always;
//   - -o json escapes them as JSON does (\u001b), C1 controls and
//     bidirectional overrides included (jsonSafe), always;
//   - a command's output and a file's contents are shown escaped on a
//     terminal, and passed on byte for byte to a pipe or a file, or with
//     --raw (sandboxOutput).

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(f.Fd()))
}

// printable is s with the characters a terminal would act on shown as
// escapes instead. Newlines and tabs stay; other control characters (C0,
// DEL, C1), bidirectional overrides and invalid UTF-8 are shown as \xNN or
// \uNNNN.
func printable(s string) string { return escape(s, true) }

// cell is s for a table cell or a one-line message: printable, with
// newlines and tabs shown as escapes too, so that a value cannot break the
// table's lines or columns.
func cell(s string) string { return escape(s, false) }

func escape(s string, keepLayout bool) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case keepLayout && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
		i += size
	}
	return b.String()
}

// unsafeRune reports whether r, valid UTF-8 above ASCII, is a C1 control
// (which some terminals obey as ESC sequences) or a bidirectional override
// (which makes text read other than it is).
func unsafeRune(r rune) bool {
	return (r >= 0x80 && r <= 0x9f) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}

// jsonSafe is encoding/json's output with the characters it leaves as they
// are but a terminal may act on (C1 controls, bidirectional overrides)
// written as \u escapes: the same JSON value, safe to show. Outside
// strings JSON is ASCII, so every such character is inside a string.
func jsonSafe(data []byte) []byte {
	if !bytes.ContainsFunc(data, unsafeRune) {
		return data
	}
	var b bytes.Buffer
	for _, r := range string(data) {
		if unsafeRune(r) {
			fmt.Fprintf(&b, `\u%04x`, r)
		} else {
			b.WriteRune(r)
		}
	}
	return b.Bytes()
}

// sandboxOutput writes out, which came from a sandbox, to stdout: escaped
// on a terminal, unless raw; byte for byte otherwise.
func (c *cli) sandboxOutput(out string, raw bool) {
	if c.tty && !raw {
		out = printable(out)
	}
	_, _ = io.WriteString(c.stdout, out)
}
