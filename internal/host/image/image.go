// Package image builds what a sandbox's root is made of: the host's
// system folders and a curated /etc (HostRootArgs), or an image the
// operator registered, a folder or a tarball unpacked once and safely into
// a cache (Image.Root), bound entry by entry (RootArgs). It owns the
// unpacked images' cache.
package image

// Images: root file systems an operator registers (LOCAL_IMAGES), which a
// create may ask for by name (params.image) instead of the host's system
// folders.
//
// An image is a folder (built with debootstrap, say) or a tarball of one.
// A tarball is unpacked once, when the provider starts, into
// images/<name>-<sha256 of the tarball> under the state folder, and that
// folder is reused by every later start while the tarball stays the same.
// Unpacking uses Go's archive/tar through an os.Root: every path is
// resolved inside the cache folder, so no entry, whether by "..", an
// absolute name, or a symbolic link planted by an earlier entry, can land
// anywhere else; the system tar would need flags whose safety differs
// between its versions. What is unpacked is owned by root, without
// setuid, setgid or group and other write bits; device nodes, FIFOs and
// sockets are skipped (a sandbox has a fresh /dev of its own).
//
// A sandbox of an image gets the image's top-level folders, files and
// symbolic links and every entry of its /etc, each bound read-only into
// the sandbox's otherwise empty root, except what the sandbox has of its
// own: /proc, /dev, /tmp, /run, /workspace, and /etc/passwd and
// /etc/group. Commands need nothing of the image but /bin/sh (see
// enterScript); the files routes need the usual tools (coreutils, tar).

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/tetherhq/tether/internal/host/hostos"
)

// Image is a root file system the operator registers: Path is a folder,
// or a tarball of one (.tar, .tar.gz or .tgz).
type Image struct {
	Name string
	Path string
}

// Image sources, as a provider's Info reports them.
const (
	Folder  = "folder"
	Tarball = "tarball"
)

// imageName is what an image's name must match.
var imageName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// tarballSuffixes are the names a tarball image may have.
var tarballSuffixes = []string{".tar", ".tar.gz", ".tgz"}

// Source is Tarball for a path with a tarball's suffix, else
// Folder.
func (i Image) Source() string {
	for _, s := range tarballSuffixes {
		if strings.HasSuffix(i.Path, s) {
			return Tarball
		}
	}
	return Folder
}

// Parse reads LOCAL_IMAGES: comma-separated name=path pairs, such as
// "bookworm=/srv/tether/images/bookworm,tools=/srv/tether/tools.tar.gz".
// A name matches [a-z0-9][a-z0-9._-]{0,62}; a path is absolute and is a
// folder, or a file ending in .tar, .tar.gz or .tgz. It reports every
// problem, not just the first. An empty spec is no images.
func Parse(spec string) ([]Image, error) {
	var out []Image
	var errs []error
	seen := map[string]bool{}
	for item := range strings.SplitSeq(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, p, ok := strings.Cut(item, "=")
		name, p = strings.TrimSpace(name), strings.TrimSpace(p)
		if !ok || p == "" {
			errs = append(errs, fmt.Errorf("LOCAL_IMAGES: %q: want name=/absolute/path", item))
			continue
		}
		img := Image{Name: name, Path: p}
		if err := img.Check(); err != nil {
			errs = append(errs, fmt.Errorf("LOCAL_IMAGES: %w", err))
			continue
		}
		if seen[name] {
			errs = append(errs, fmt.Errorf("LOCAL_IMAGES: image %q is named twice", name))
			continue
		}
		seen[name] = true
		img.Path = filepath.Clean(p)
		out = append(out, img)
	}
	return out, errors.Join(errs...)
}

// Check says what is wrong with the image's name or path, if anything.
func (i Image) Check() error {
	if !imageName.MatchString(i.Name) {
		return fmt.Errorf("image name %q must match [a-z0-9][a-z0-9._-]{0,62}", i.Name)
	}
	if !filepath.IsAbs(i.Path) {
		return fmt.Errorf("image %q: path %q must be absolute", i.Name, i.Path)
	}
	info, err := os.Stat(i.Path)
	switch {
	case err != nil:
		return fmt.Errorf("image %q: %w", i.Name, err)
	case info.IsDir():
		return nil
	case !info.Mode().IsRegular() || i.Source() != Tarball:
		return fmt.Errorf("image %q: %s must be a folder, or a file ending in .tar, .tar.gz or .tgz", i.Name, i.Path)
	}
	return nil
}

// imageSkipped are the top-level entries of an image a sandbox does not
// get from it: its own (/proc, /dev, /tmp, /run, /workspace), /etc, whose
// entries are bound one by one, and /sys, which sandboxes never have.
var imageSkipped = map[string]bool{"proc": true, "dev": true, "sys": true, "tmp": true, "run": true, "workspace": true, "etc": true}

// Root returns the folder holding the image's root, which the sandbox
// users must be able to reach: the registered folder (its symbolic links
// resolved), or the tarball unpacked into the folder cache (by an earlier
// start, or now).
func (i Image) Root(cache string) (string, error) {
	var root string
	var err error
	switch i.Source() {
	case Tarball:
		root, err = unpackImage(cache, i)
	default:
		root, err = filepath.EvalSymlinks(i.Path)
	}
	if err != nil {
		return "", err
	}
	if blocked := hostos.Untraversable(root); blocked != "" {
		return "", fmt.Errorf("%s is not reachable by the sandbox users: %s needs o+x (chmod o+x %s)", root, blocked, blocked)
	}
	return root, nil
}

// RootArgs are bwrap's options that fill the sandbox's empty root with
// root's top-level entries and an /etc of root's /etc entries, read-only,
// but for the names in ownEtc.
func RootArgs(root string, ownEtc map[string]bool) ([]string, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	var args []string
	for _, e := range entries {
		if imageSkipped[e.Name()] {
			continue
		}
		if args, err = BindArgs(args, filepath.Join(root, e.Name()), "/"+e.Name()); err != nil {
			return nil, err
		}
	}
	args = append(args, "--dir", "/etc")
	etc := filepath.Join(root, "etc")
	info, err := os.Lstat(etc)
	switch {
	case errors.Is(err, fs.ErrNotExist) || err == nil && !info.IsDir():
		return args, nil // an image without /etc gets only the sandbox's own
	case err != nil:
		return nil, fmt.Errorf("image: %w", err)
	}
	if entries, err = os.ReadDir(etc); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	for _, e := range entries {
		if ownEtc[e.Name()] {
			continue
		}
		if args, err = BindArgs(args, filepath.Join(etc, e.Name()), "/etc/"+e.Name()); err != nil {
			return nil, err
		}
	}
	return args, nil
}

// BindArgs adds to args what puts host, a path of the host's, at at in the
// sandbox: a read-only bind of a folder or a file, the same symbolic link
// (never followed on the host), and nothing for other kinds.
func BindArgs(args []string, host, at string) ([]string, error) {
	info, err := os.Lstat(host)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	switch t := info.Mode().Type(); {
	case t&fs.ModeSymlink != 0:
		target, err := os.Readlink(host)
		if err != nil {
			return nil, fmt.Errorf("image: %w", err)
		}
		return append(args, "--symlink", target, at), nil
	case t.IsDir(), t.IsRegular():
		return append(args, "--ro-bind", host, at), nil
	}
	return args, nil
}

// systemDirs are the host's top-level folders a sandbox sees, read-only:
// what programs need to run, and nothing of the host's data.
var systemDirs = []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// etcEntries are the entries of the host's /etc a sandbox sees, read-only:
// what the C library, shells, TLS and language runtimes read. Not the
// host's identity (hostname, machine-id), its users (passwd and group are
// the sandbox's own), its services' configuration or their secrets.
var etcEntries = []string{
	"nsswitch.conf", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives",
	"ssl/certs", "ca-certificates", "ca-certificates.conf", "localtime", "timezone", "hosts", "host.conf",
	"os-release", "debian_version", "lsb-release", "mime.types", "magic", "magic.mime",
	"protocols", "services", "inputrc", "bash.bashrc", "profile", "shells", "locale.alias",
	"login.defs", "gai.conf", "networks", "perl", "python3", "java-17-openjdk", "java-21-openjdk",
}

// HostRootArgs are bwrap's options that fill the sandbox's empty root with
// the host's system folders and a curated /etc, read-only: the root of a
// sandbox without an image. What the host lacks is left out.
func HostRootArgs() []string {
	var args []string
	bind := func(host string) {
		if more, err := BindArgs(args, host, host); err == nil {
			args = more
		}
	}
	for _, name := range systemDirs {
		bind("/" + name)
	}
	args = append(args, "--dir", "/etc")
	for _, name := range etcEntries {
		bind("/etc/" + name)
	}
	return args
}

// unpackImage returns the folder holding the root of img, a tarball,
// unpacked into cache: images/<name>-<sha256 of the tarball>, unpacked
// now unless an earlier start did. Unpacks happen under a lock (Tethers
// may share the state folder) into a temporary folder renamed into place
// once complete, so a folder of that name is always a whole image.
func unpackImage(cache string, img Image) (string, error) {
	sum, err := fileSHA256(img.Path)
	if err != nil {
		return "", err
	}
	final := filepath.Join(cache, img.Name+"-"+sum)
	if info, err := os.Stat(final); err == nil && info.IsDir() {
		return final, nil
	}
	if err := os.MkdirAll(cache, 0o711); err != nil {
		return "", err
	}
	if err := os.Chmod(cache, 0o711); err != nil {
		return "", err
	}
	unlock, err := hostos.Lock(filepath.Join(cache, ".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if info, err := os.Stat(final); err == nil && info.IsDir() {
		return final, nil // unpacked meanwhile by another Tether
	}
	// What an unpack that died left; none runs now, we hold the lock.
	if left, err := filepath.Glob(filepath.Join(cache, ".unpack-*")); err == nil {
		for _, d := range left {
			_ = os.RemoveAll(d)
		}
	}
	tmp, err := os.MkdirTemp(cache, ".unpack-"+img.Name+"-")
	if err != nil {
		return "", err
	}
	if err := extractTarball(img.Path, tmp, sum, int64(hostos.FreeMB(cache))<<20); err != nil {
		_ = os.RemoveAll(tmp)
		return "", fmt.Errorf("unpacking %s: %w", img.Path, err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		_ = os.RemoveAll(tmp)
		return "", err
	}
	if err := os.Rename(tmp, final); err != nil {
		_ = os.RemoveAll(tmp)
		return "", err
	}
	return final, nil
}

// fileSHA256 returns the hex SHA-256 of the file at path.
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// extractTarball unpacks the tarball at src, whose SHA-256 must be sum,
// into the folder dst (see the top of this file for what is kept). Its
// files may hold no more than maxBytes in all (0: no limit), counted by
// their sizes, holes included: a small tarball of sparse entries (or of
// compressed zeros) cannot unpack to more than the disk has. Runs of
// zeros are written as holes.
func extractTarball(src, dst, sum string, maxBytes int64) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	in := io.TeeReader(f, h)
	r := in
	if !strings.HasSuffix(src, ".tar") { // .tar.gz, .tgz
		zr, err := gzip.NewReader(in)
		if err != nil {
			return err
		}
		defer func() { _ = zr.Close() }()
		r = zr
	}
	root, err := os.OpenRoot(dst)
	if err != nil {
		return err
	}
	defer func() { _ = root.Close() }()
	tr := tar.NewReader(r)
	var total int64
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeReg || hdr.Typeflag == tar.TypeGNUSparse {
			if total += hdr.Size; maxBytes > 0 && total > maxBytes {
				return fmt.Errorf("its files hold more than %d MiB, three quarters of the space free under the state folder (entry %q, of %d MiB with its holes)", maxBytes>>20, hdr.Name, hdr.Size>>20)
			}
		}
		if err := extractEntry(root, tr, hdr); err != nil {
			return fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
	}
	// The rest of the file (the archive's padding), so that the sum covers
	// all of it.
	if _, err := io.Copy(io.Discard, in); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sum {
		return errors.New("the tarball changed while it was unpacked")
	}
	return nil
}

// errEscapes refuses an entry whose name or link leads out of the image.
var errEscapes = errors.New("leads out of the image's root")

// entryPath is a tar entry's name as a path inside the image: a leading
// "/" is dropped (the image's root is the archive's), and a name that
// leads out of the root with ".." is refused.
func entryPath(name string) (string, error) {
	p := path.Clean(strings.TrimLeft(name, "/"))
	if p == ".." || strings.HasPrefix(p, "../") {
		return "", errEscapes
	}
	return p, nil
}

// extractEntry writes one tar entry under root. Folders and files get
// the entry's permission bits less setuid, setgid, sticky and group and
// other write; everything belongs to the unpacking user (root). Symbolic
// links are written as they are (they are resolved inside the sandbox),
// but never followed out of root here. Device nodes, FIFOs and other
// kinds are skipped.
func extractEntry(root *os.Root, tr *tar.Reader, hdr *tar.Header) error {
	name, err := entryPath(hdr.Name)
	if err != nil {
		return err
	}
	perm := fs.FileMode(hdr.Mode).Perm() & 0o755
	if name == "." {
		return nil // the root itself: 0755, root's
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := clearFor(root, name, true); err != nil {
			return err
		}
		if err := root.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		return root.Chmod(name, perm)
	case tar.TypeReg, tar.TypeGNUSparse:
		if err := clearFor(root, name, false); err != nil {
			return err
		}
		// O_EXCL: never through a link that something put there meanwhile.
		f, err := root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		err = writeSparse(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		if err := root.Chmod(name, perm); err != nil {
			return err
		}
		return root.Chtimes(name, time.Time{}, hdr.ModTime)
	case tar.TypeSymlink:
		if err := clearFor(root, name, false); err != nil {
			return err
		}
		return root.Symlink(hdr.Linkname, name)
	case tar.TypeLink:
		target, err := entryPath(hdr.Linkname)
		if err != nil {
			return fmt.Errorf("hard link to %q: %w", hdr.Linkname, err)
		}
		if err := clearFor(root, name, false); err != nil {
			return err
		}
		return root.Link(target, name)
	}
	return nil
}

// writeSparse copies r to f, seeking over blocks of zeros rather than
// writing them, so that they stay holes on disk.
func writeSparse(f *os.File, r io.Reader) error {
	buf := make([]byte, len(zeroBlock))
	var size int64
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			chunk := buf[:n]
			if isZero(chunk) {
				if _, serr := f.Seek(int64(n), io.SeekCurrent); serr != nil {
					return serr
				}
			} else if _, werr := f.Write(chunk); werr != nil {
				return werr
			}
			size += int64(n)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return f.Truncate(size) // a trailing hole
		}
		if err != nil {
			return err
		}
	}
}

// zeroBlock is writeSparse's buffer's worth of zeros, to compare with.
var zeroBlock = make([]byte, 64<<10)

func isZero(b []byte) bool { return bytes.Equal(b, zeroBlock[:len(b)]) }

// clearFor makes name's parent folders and removes what is at name, unless
// both it and the entry to come are folders.
func clearFor(root *os.Root, name string, dir bool) error {
	if parent := path.Dir(name); parent != "." {
		if err := root.MkdirAll(parent, 0o755); err != nil {
			return err
		}
	}
	info, err := root.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case dir && info.IsDir():
		return nil
	}
	return root.RemoveAll(name)
}
