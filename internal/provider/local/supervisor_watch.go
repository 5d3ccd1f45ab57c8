package local

// A watch of a folder by the exec server (supervisor.go): inotify inside
// the sandbox, as its user, so it sees what the sandbox's processes may
// see and nothing else.

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// watchMask is what a watch of a folder asks inotify for.
const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_EXCL_UNLINK | unix.IN_ONLYDIR

// errDenied is the supervisor's code for a folder the sandbox's user may
// not read.
const errDenied = "denied"

// dirWatch is one watch: an inotify instance and the folders it watches,
// by watch descriptor, as paths relative to the root.
type dirWatch struct {
	f         *os.File
	root      string
	recursive bool
	dirs      map[int]string
	conn      *net.UnixConn
	// rootWD is the root's watch descriptor.
	rootWD int
}

// serveWatch watches r.Path and streams its changes to conn until conn
// fails or is closed by Tether, or the folder goes.
func serveWatch(conn *net.UnixConn, r *procRequest) error {
	root := filepath.Clean(r.Path)
	fi, err := os.Stat(root)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return supErr(errNoFile, fmt.Sprintf("no folder %s", root))
	case errors.Is(err, fs.ErrPermission):
		return supErr(errDenied, fmt.Sprintf("%s may not be read", root))
	case err != nil:
		return err
	case !fi.IsDir():
		return supErr(errNotDir, fmt.Sprintf("%s is not a folder", root))
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("inotify: %w", err)
	}
	w := &dirWatch{f: os.NewFile(uintptr(fd), "inotify"), root: root, recursive: r.Recursive, dirs: map[int]string{}, conn: conn}
	defer func() { _ = w.f.Close() }()
	if w.rootWD, err = w.add(""); err != nil {
		return supErr(errDenied, fmt.Sprintf("cannot watch %s: %v", root, err))
	}
	if w.recursive {
		w.scan("", false)
	}
	gone := make(chan struct{})
	go func() { // ends once conn is closed, which ends the watch's reads too
		_, _ = io.Copy(io.Discard, conn)
		_ = w.f.SetReadDeadline(time.Now())
		close(gone)
	}()
	defer func() { _ = conn.Close(); <-gone }()
	if !w.send(fileEvent{Kind: "start", At: time.Now().UTC()}) {
		return nil
	}
	if err := w.loop(); err != nil {
		replyErr(conn, err)
	}
	return nil
}

// add watches the folder rel (relative to the root).
func (w *dirWatch) add(rel string) (int, error) {
	wd, err := unix.InotifyAddWatch(int(w.fd()), filepath.Join(w.root, rel), watchMask)
	if err != nil {
		return 0, err
	}
	w.dirs[wd] = rel
	return wd, nil
}

// fd is the inotify descriptor, without putting it into blocking mode.
func (w *dirWatch) fd() uintptr {
	var out uintptr
	if rc, err := w.f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { out = fd })
	}
	return out
}

// scan watches the folders below rel and, with announce, says each file
// and folder found there was made (it was, since rel was: made or moved
// in before its watch began).
func (w *dirWatch) scan(rel string, announce bool) {
	entries, err := os.ReadDir(filepath.Join(w.root, rel))
	if err != nil {
		return
	}
	for _, e := range entries {
		child := path.Join(rel, e.Name())
		if announce && !w.send(fileEvent{Kind: "create", Path: child, IsDir: e.IsDir(), At: time.Now().UTC()}) {
			return
		}
		if e.IsDir() {
			if _, err := w.add(child); err == nil {
				w.scan(child, announce)
			}
		}
	}
}

// send sends e, reporting whether it could (false: Tether went away).
func (w *dirWatch) send(e fileEvent) bool {
	return writeFrame(w.conn, procReply{File: &e}) == nil
}

// loop reads inotify's events and sends them until the watch ends.
func (w *dirWatch) loop() error {
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, os.ErrClosed) {
			return nil // Tether went away
		}
		if err != nil {
			return fmt.Errorf("reading inotify's events: %w", err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off])) //nolint:gosec // the kernel's struct, within n
			nameStart := off + unix.SizeofInotifyEvent
			nameEnd := min(nameStart+int(ev.Len), n)
			name := string(trimNUL(buf[nameStart:nameEnd]))
			off = nameEnd
			done, err := w.handle(int(ev.Wd), ev.Mask, name)
			if done || err != nil {
				return err
			}
		}
	}
}

func trimNUL(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}

// handle sends what one inotify event says; done once the watch is over
// (the root went, or Tether).
func (w *dirWatch) handle(wd int, mask uint32, name string) (done bool, _ error) {
	if mask&unix.IN_IGNORED != 0 {
		delete(w.dirs, wd)
		if wd == w.rootWD {
			return true, supErr(errNoFile, fmt.Sprintf("%s was removed", w.root))
		}
		return false, nil
	}
	dir, known := w.dirs[wd]
	if !known || name == "" || mask&unix.IN_Q_OVERFLOW != 0 {
		return false, nil // the folder's own events, or lost ones
	}
	rel := path.Join(dir, name)
	isDir := mask&unix.IN_ISDIR != 0
	now := time.Now().UTC()
	// A new folder is watched before its creation is sent, so that a
	// client which saw it made sees every change below it from then on.
	newDir := isDir && w.recursive && mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0
	added := false
	if newDir {
		_, err := w.add(rel)
		added = err == nil
	}
	for _, k := range []struct {
		bit  uint32
		kind string
	}{{unix.IN_CREATE | unix.IN_MOVED_TO, "create"}, {unix.IN_MOVED_FROM, "rename"}, {unix.IN_ATTRIB, "chmod"},
		{unix.IN_MODIFY, "write"}, {unix.IN_DELETE, "remove"}} {
		if mask&k.bit == 0 {
			continue
		}
		if !w.send(fileEvent{Kind: k.kind, Path: rel, IsDir: isDir, At: now}) {
			return true, nil // Tether went away
		}
	}
	if added {
		w.scan(rel, true)
	}
	return false, nil
}
