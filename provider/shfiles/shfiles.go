// Package shfiles holds what the providers that move files with sh scripts
// run inside their sandboxes (local through nsenter, kubernetes through
// pods/exec) share: the checks of a path, the scripts' common parts, and
// what their exit codes mean as file errors. Where the providers differ
// (how the body reaches the sandbox, how a file's size is read), the
// package names each variant, and the provider picks one.
//
// Every script takes the sandbox path as $1 and exits with one of the Exit
// codes below for a path it refuses; each writes the literal number, which
// the constants here name.
package shfiles

import (
	"path"
	"strings"

	"github.com/tetherhq/tether/provider"
)

// Exit codes of the file scripts, each a kind of file error.
const (
	ExitNotFound    = 3
	ExitIsDirectory = 4
	ExitDenied      = 5
	ExitInvalidPath = 6
	ExitWriteFailed = 7
	// ExitTooLarge is a read script's exit code for a file over the limit.
	ExitTooLarge = 8
)

// prefix starts every script: unset variables are errors, and p is the
// sandbox path.
const prefix = `set -u; p=$1; `

// stageFileChecks checks what the path $1 holds and makes its folder; $2
// is the temporary file beside it that the upload goes to.
const stageFileChecks = prefix + `tmp=$2; d=$(dirname -- "$p")
[ -d "$p" ] && exit 4
if [ ! -d "$d" ]; then
	err=$(mkdir -p -- "$d" 2>&1) || case $err in
		*"ermission denied"*) exit 5 ;;
		*) exit 6 ;;
	esac
fi
[ -d "$d" ] || exit 6
[ -w "$d" ] || exit 5
[ ! -e "$p" ] || [ -f "$p" ] || exit 6
[ ! -e "$p" ] || [ -w "$p" ] || exit 5
`

// StageFileFromStdin is stageFileChecks, then the whole body, from stdin,
// into the temporary file (removed again if that fails).
const StageFileFromStdin = stageFileChecks + `cat > "$tmp" || { rm -f -- "$tmp"; exit 7; }`

// StageFileEmpty is stageFileChecks, then an empty temporary file, for a
// body that arrives later in chunks.
const StageFileEmpty = stageFileChecks + `: > "$tmp" || exit 7`

// readFileChecks checks that the path is a regular file the sandbox user
// may read; $2 is the limit.
const readFileChecks = prefix + `limit=$2
[ -e "$p" ] || exit 3
[ -d "$p" ] && exit 4
[ -f "$p" ] || exit 6
[ -r "$p" ] || exit 5
`

// ReadFileNonblock is readFileChecks, then the file's size by stat and at
// most the limit of it, streamed. dd opens the file without blocking, so a
// FIFO put in its place after the checks ends the read at once rather than
// hanging it; head cuts a file that grows meanwhile. It needs GNU stat and
// dd.
const ReadFileNonblock = readFileChecks + `size=$(stat -Lc %s -- "$p") || exit 6
[ "$size" -le "$limit" ] || exit 8
dd if="$p" iflag=nonblock bs=65536 status=none | head -c "$limit"`

// ReadFilePortable is readFileChecks, then the file's size by wc and at
// most the limit of it, streamed by head: what any image's sh and coreutils
// (busybox's included) can run.
const ReadFilePortable = readFileChecks + `size=$(wc -c < "$p") || exit 5
[ "$size" -le "$limit" ] || exit 8
head -c "$limit" -- "$p"`

// ReadArchive checks that the path is a folder the sandbox user may read,
// then streams it as a tar archive.
const ReadArchive = prefix + `[ -e "$p" ] || exit 3
[ -d "$p" ] || exit 6
[ -r "$p" ] && [ -x "$p" ] || exit 5
exec tar -C "$p" -cf - .`

// stageArchiveChecks makes the folder $1 if it is missing, checks that the
// sandbox user may write it, and makes the staging folder $2 inside it.
const stageArchiveChecks = prefix + `stage=$2
[ ! -e "$p" ] || [ -d "$p" ] || exit 6
if [ ! -d "$p" ]; then
	err=$(mkdir -p -- "$p" 2>&1) || case $err in
		*"ermission denied"*) exit 5 ;;
		*) exit 6 ;;
	esac
fi
[ -d "$p" ] || exit 6
[ -w "$p" ] && [ -x "$p" ] || exit 5
mkdir -- "$stage" || { [ -d "$p" ] || exit 6; exit 5; }
`

// StageArchiveFromStdin is stageArchiveChecks, then the archive, from
// stdin, extracted into the staging folder (removed again if that fails;
// exit 7 here is a body tar refuses).
const StageArchiveFromStdin = stageArchiveChecks + `tar -C "$stage" -xf - --no-same-owner || { rm -rf -- "$stage"; exit 7; }`

// StageArchiveEmpty is stageArchiveChecks, then the empty file
// "$stage.tar" beside the staging folder, for an archive that arrives
// later in chunks.
const StageArchiveEmpty = stageArchiveChecks + `: > "$stage.tar" || exit 7`

// CommitFile moves the staged file $1 to the path $2, never into a folder:
// the path may have become one since the staging (an upload of a file
// below it, racing this one), and mv without -T would move the file into
// it and succeed, losing the write. With -T, rename(2) refuses a folder in
// one step; the exit is then ExitIsDirectory, and the staged file stays
// for the caller to discard. An mv without -T (an older busybox) moves
// plainly, and a file found moved into a folder is removed again, with
// the same exit. Other failures exit ExitWriteFailed with mv's message on
// stderr.
const CommitFile = `set -u; tmp=$1; p=$2
err=$(mv -fT -- "$tmp" "$p" 2>&1) && exit 0
[ -d "$p" ] && exit 4
case $err in
*"nvalid option"*|*"nrecognized option"*|*"nknown option"*|*"llegal option"*) ;;
*) printf '%s\n' "$err" >&2; exit 7 ;;
esac
mv -f -- "$tmp" "$p" || exit 7
b=${tmp##*/}
if [ -e "$p/$b" ]; then rm -f -- "$p/$b"; exit 4; fi
exit 0`

// CheckPath validates a path inside the sandbox: absolute, no NUL. It
// returns the path cleaned.
func CheckPath(p string) (string, error) {
	if p == "" || !strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) {
		return "", provider.Errorf(provider.CodeInvalidPath, "path must be an absolute path inside the sandbox")
	}
	return path.Clean(p), nil
}

// Error turns a file script's exit code into the file error it means, for
// the path clean; stderr is what the script wrote there. fullNote follows
// the message for a full file system (the provider's word on why it is
// full; "" for none).
func Error(code int, clean, stderr, fullNote string) error {
	switch code {
	case ExitNotFound:
		return provider.Errorf(provider.CodeFileNotFound, "no file at %s in the sandbox", clean)
	case ExitIsDirectory:
		return provider.Errorf(provider.CodeIsDirectory, "%s is a directory", clean)
	case ExitDenied:
		return provider.Errorf(provider.CodePermissionDenied, "the sandbox user may not access %s", clean)
	case ExitInvalidPath:
		return provider.Errorf(provider.CodeInvalidPath, "%s is not a regular file, or a folder on its way is not a folder", clean)
	}
	// A folder or a file that took a path's place while the write was
	// under way (a racing write made it): the shell's, mv's or cp's words.
	switch {
	case strings.Contains(stderr, "ot a directory"), strings.Contains(stderr, "overwrite non-directory"):
		return provider.Errorf(provider.CodeInvalidPath, "a folder on the way to %s is not a folder", clean)
	case strings.Contains(stderr, "s a directory"), strings.Contains(stderr, "overwrite directory"):
		return provider.Errorf(provider.CodeIsDirectory, "%s, or a path below it, is a directory", clean)
	}
	if strings.Contains(stderr, "No space left on device") || strings.Contains(stderr, "Disk quota exceeded") {
		return provider.Errorf(provider.CodePayloadTooLarge, "no room for %s: the sandbox's file system is full%s", clean, fullNote)
	}
	return provider.Errorf(provider.CodeInvalidRequest, "cannot access %s: %s", clean, ShellError(stderr))
}

// ShellError extracts the reason from a shell error line such as
// "sh: 1: cannot create /x: Read-only file system".
func ShellError(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndex(s, ": "); i >= 0 {
		return s[i+2:]
	}
	if s == "" {
		return "failed"
	}
	return s
}
