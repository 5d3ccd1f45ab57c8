//go:build linux

package vmagent

import (
	"archive/tar"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/tetherhq/tether/internal/vmwire"
)

// Files and archives are read and written by the agent (root in the
// guest, which is the sandbox's own machine); what it makes belongs to
// the guest's user.

// checkPath refuses paths that are not absolute and clean.
func checkPath(w *vmwire.Writer, p string) bool {
	if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
		_ = w.Fail(vmwire.FailInvalidPath, "%q is not an absolute, clean path below /", p)
		return false
	}
	return true
}

// failFor sends the failure an error of the file system stands for.
func failFor(w *vmwire.Writer, op string, err error) {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		_ = w.Fail(vmwire.FailNotFound, "%s: no such file", op)
	case errors.Is(err, errIsDir):
		_ = w.Fail(vmwire.FailIsDirectory, "%s: is a directory", op)
	case errors.Is(err, errNotDir):
		_ = w.Fail(vmwire.FailNotDir, "%s: not a directory", op)
	case errors.Is(err, errTooLarge):
		_ = w.Fail(vmwire.FailTooLarge, "%s: over the limit", op)
	case errors.Is(err, errBadArchive):
		_ = w.Fail(vmwire.FailBadRequest, "%s: %v", op, err)
	default:
		_ = w.Fail(vmwire.FailInvalidPath, "%s: %v", op, err)
	}
}

// Names of what a write or an extraction makes before it is done.
const (
	writePrefix = ".tether-write-"
	stagePrefix = ".tether-stage-"
)

var (
	errIsDir      = errors.New("is a directory")
	errNotDir     = errors.New("not a directory")
	errTooLarge   = errors.New("over the limit")
	errBadArchive = errors.New("not a tar archive")
)

func readFile(w *vmwire.Writer, req vmwire.Request) {
	if !checkPath(w, req.Path) {
		return
	}
	f, err := os.Open(req.Path)
	if err != nil {
		failFor(w, "reading "+req.Path, err)
		return
	}
	defer func() { _ = f.Close() }()
	st, err := f.Stat()
	switch {
	case err != nil:
		failFor(w, "reading "+req.Path, err)
		return
	case st.IsDir():
		failFor(w, "reading "+req.Path, errIsDir)
		return
	case st.Size() > req.Limit:
		failFor(w, "reading "+req.Path, errTooLarge)
		return
	}
	if w.Frame(vmwire.KindOK, nil) != nil {
		return
	}
	// A file that grows while it is read is cut at the limit plus one
	// byte: Tether refuses it then.
	if _, err := io.Copy(vmwire.DataWriter{W: w}, io.LimitReader(f, req.Limit+1)); err != nil {
		return
	}
	_ = w.Frame(vmwire.KindEnd, nil)
}

// writeFile takes the data frames into a temporary file beside the path
// and renames it into place once all arrived.
func writeFile(stream net.Conn, w *vmwire.Writer, req vmwire.Request) {
	data := &vmwire.DataReader{R: stream}
	defer drain(data)
	if !checkPath(w, req.Path) {
		return
	}
	if st, err := os.Stat(req.Path); err == nil && st.IsDir() {
		failFor(w, "writing "+req.Path, errIsDir)
		return
	}
	if err := mkdirs(path.Dir(req.Path)); err != nil {
		failFor(w, "writing "+req.Path, err)
		return
	}
	tmp, err := os.CreateTemp(path.Dir(req.Path), writePrefix+"*")
	if err != nil {
		failFor(w, "writing "+req.Path, err)
		return
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // gone already once renamed
	n, err := io.Copy(tmp, io.LimitReader(data, req.Limit+1))
	if err == nil && n > req.Limit {
		err = errTooLarge
	}
	if err == nil {
		err = tmp.Chown(UserID, UserID)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), req.Path)
	}
	if err != nil {
		failFor(w, "writing "+req.Path, err)
		return
	}
	_ = w.Frame(vmwire.KindOK, nil)
}

// drain reads the rest of Tether's data, so that a refused write does not
// leave Tether waiting on a full window.
func drain(r io.Reader) { _, _ = io.Copy(io.Discard, r) }

// mkdirs makes dir and its missing parents, the guest user's.
func mkdirs(dir string) error {
	st, err := os.Stat(dir)
	if err == nil {
		if !st.IsDir() {
			return errNotDir
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := mkdirs(path.Dir(dir)); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return os.Chown(dir, UserID, UserID)
}

func readTar(w *vmwire.Writer, req vmwire.Request) {
	if !checkPath(w, req.Path) {
		return
	}
	st, err := os.Stat(req.Path)
	if err != nil {
		failFor(w, "archiving "+req.Path, err)
		return
	}
	if !st.IsDir() {
		failFor(w, "archiving "+req.Path, errNotDir)
		return
	}
	if w.Frame(vmwire.KindOK, nil) != nil {
		return
	}
	tw := tar.NewWriter(vmwire.DataWriter{W: w})
	if err := addTree(tw, req.Path); err != nil {
		// Mid-stream: the archive is cut short, which Tether sees as a
		// broken one.
		_ = w.Fail(vmwire.FailInternal, "archiving %s: %v", req.Path, err)
		return
	}
	if err := tw.Close(); err == nil {
		_ = w.Frame(vmwire.KindEnd, nil)
	}
}

// addTree writes the folder's files, folders and symbolic links into tw,
// named relative to it. What vanishes while it is read (the sandbox's
// processes go on) is left out.
func addTree(tw *tar.Writer, dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if p == dir {
			return nil
		}
		if strings.HasPrefix(d.Name(), stagePrefix) || strings.HasPrefix(d.Name(), writePrefix) {
			// A write or an extraction under way: not the folder's yet.
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		} else if err != nil {
			return err
		}
		return addEntry(tw, p, filepath.ToSlash(strings.TrimPrefix(p, dir+"/")), info)
	})
}

func addEntry(tw *tar.Writer, p, name string, info fs.FileInfo) error {
	var link string
	switch {
	case info.Mode()&fs.ModeSymlink != 0:
		l, err := os.Readlink(p)
		if err != nil {
			return nil //nolint:nilerr // gone meanwhile
		}
		link = l
	case info.IsDir(), info.Mode().IsRegular():
	default:
		return nil // devices, FIFOs and sockets are not archived
	}
	hdr, err := tar.FileInfoHeader(info, link)
	if err != nil {
		return err
	}
	hdr.Name = name
	if info.IsDir() {
		hdr.Name += "/"
	}
	hdr.Uname, hdr.Gname = "", ""
	if !info.Mode().IsRegular() {
		return tw.WriteHeader(hdr)
	}
	f, err := os.Open(p)
	if err != nil {
		return nil //nolint:nilerr // gone meanwhile
	}
	defer func() { _ = f.Close() }()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	// A file that changes size while it is read is padded or cut to the
	// size its header says.
	n, err := io.Copy(tw, io.LimitReader(f, hdr.Size))
	if err != nil {
		return err
	}
	if n < hdr.Size {
		_, err = io.CopyN(tw, zeros{}, hdr.Size-n)
	}
	return err
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// writeTar extracts the archive into a staging folder inside the target,
// then moves what it holds into place: a broken or refused archive leaves
// nothing behind.
func writeTar(stream net.Conn, w *vmwire.Writer, req vmwire.Request) {
	data := &vmwire.DataReader{R: stream}
	defer drain(data)
	if !checkPath(w, req.Path) {
		return
	}
	if err := mkdirs(req.Path); err != nil {
		failFor(w, "extracting into "+req.Path, err)
		return
	}
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	stage := filepath.Join(req.Path, stagePrefix+hex.EncodeToString(nonce[:]))
	if err := os.Mkdir(stage, 0o700); err != nil {
		failFor(w, "extracting into "+req.Path, err)
		return
	}
	defer func() { _ = os.RemoveAll(stage) }()
	lr := &limitedReader{r: data, left: req.Limit}
	if err := extract(stage, lr); err != nil {
		if lr.over {
			err = errTooLarge
		}
		failFor(w, "extracting into "+req.Path, err)
		return
	}
	if err := merge(stage, req.Path); err != nil {
		failFor(w, "extracting into "+req.Path, err)
		return
	}
	// Gone before the answer: Tether's next call must not see it.
	if err := os.RemoveAll(stage); err != nil {
		failFor(w, "extracting into "+req.Path, err)
		return
	}
	_ = w.Frame(vmwire.KindOK, nil)
}

type limitedReader struct {
	r    io.Reader
	left int64
	over bool
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		l.over = true
		return 0, errTooLarge
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

// extract unpacks the archive into dir, every entry resolved inside it.
func extract(dir string, r io.Reader) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer func() { _ = root.Close() }()
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if errors.Is(err, errTooLarge) {
				return err
			}
			return fmt.Errorf("%w: %w", errBadArchive, err)
		}
		name := path.Clean(strings.TrimPrefix(hdr.Name, "./"))
		if name == "." {
			continue
		}
		if !fs.ValidPath(name) {
			return fmt.Errorf("%w: the member %q leaves the folder", errBadArchive, hdr.Name)
		}
		if err := extractOne(root, name, hdr, tr); err != nil {
			return err
		}
	}
}

func extractOne(root *os.Root, name string, hdr *tar.Header, r io.Reader) error {
	if dir := path.Dir(name); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := root.MkdirAll(name, 0o755); err != nil {
			return err
		}
	case tar.TypeReg:
		f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fs.FileMode(hdr.Mode).Perm()&0o777)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, r)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			if errors.Is(err, errTooLarge) {
				return err
			}
			return fmt.Errorf("%w: %w", errBadArchive, err)
		}
	case tar.TypeSymlink:
		if err := root.Symlink(hdr.Linkname, name); err != nil {
			return err
		}
	default:
		return nil // devices, FIFOs and hard links are skipped
	}
	return root.Lchown(name, UserID, UserID)
}

// merge moves what src holds into dst: folders merge, a file replaces a
// file of its name. A file where dst has a folder, or a folder where it
// has a file, is a conflict (another write got there first), checked for
// the whole tree before anything moves.
func merge(src, dst string) error {
	if err := conflicts(src, dst); err != nil {
		return err
	}
	return move(src, dst)
}

func conflicts(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		st, err := os.Lstat(filepath.Join(dst, e.Name()))
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return err
		case e.IsDir() && st.IsDir():
			if err := conflicts(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
				return err
			}
		case e.IsDir():
			return fmt.Errorf("%s: %w", e.Name(), errNotDir)
		case st.IsDir():
			return fmt.Errorf("%s: %w", e.Name(), errIsDir)
		}
	}
	return nil
}

func move(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		from, to := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		if st, err := os.Lstat(to); err == nil && e.IsDir() && st.IsDir() {
			if err := move(from, to); err != nil {
				return err
			}
			continue
		}
		// A file over a file, atomically; over a folder made meanwhile,
		// rename fails, and so does the write.
		if err := os.Rename(from, to); err != nil {
			return err
		}
	}
	return nil
}
