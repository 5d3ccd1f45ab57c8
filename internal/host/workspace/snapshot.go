package workspace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tetherhq/tether/internal/host/hostos"
)

// Snapshots of a size-limited workspace: a copy of its ext4 image, taken
// while the file system is frozen (FIFREEZE on the mount point: the kernel
// writes out every dirty page and metadata block and holds every writer
// until the thaw), so that the copy is the file system as of one moment,
// clean, whatever the sandbox's processes were writing. The copy is sparse:
// only the image's data is copied (copy_file_range, which a file system
// with reflinks, such as XFS or Btrfs, makes a clone of), its holes stay
// holes.

// The freeze ioctls, _IOWR('X', 119, int) and _IOWR('X', 120, int), as
// linux/fs.h has them.
const (
	fiFreeze = 0xC0045877
	fiThaw   = 0xC0045878
)

// maxFreeze bounds how long a workspace stays frozen: past it the copy
// gives up and the file system is thawed, so that a slow disk cannot hang
// the sandbox for long.
const maxFreeze = 5 * time.Minute

// copyChunk is how much one copy_file_range call copies at most, so that a
// cancelled copy stops soon.
const copyChunk = 64 << 20

// Snapshot copies the mounted workspace image of the sandbox folder dir to
// the new file dst, the workspace frozen meanwhile, and returns the bytes
// dst takes on disk. A dir whose workspace has no image of its own is an
// error (ErrNoImage).
func Snapshot(ctx context.Context, dir, dst string) (int64, error) {
	img, ws := filepath.Join(dir, ImageFile), filepath.Join(dir, "workspace")
	info, err := os.Stat(img)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && !Mounted(ws)) {
		return 0, ErrNoImage
	}
	if err != nil {
		return 0, fmt.Errorf("workspace snapshot: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, maxFreeze)
	defer cancel()
	thaw, err := freeze(ws)
	if err != nil {
		return 0, fmt.Errorf("workspace snapshot: freeze: %w", err)
	}
	err = copySparse(ctx, img, dst, info.Size(), true)
	if terr := thaw(); err == nil && terr != nil {
		err = fmt.Errorf("thaw: %w", terr)
	}
	if err != nil {
		_ = os.Remove(dst)
		return 0, fmt.Errorf("workspace snapshot: %w", err)
	}
	return DiskUsage(dst)
}

// ErrNoImage is the error of a snapshot of a workspace that is a plain
// folder (no size limit): it has no image to copy.
var ErrNoImage = errors.New("the workspace has no file system of its own (no size limit)")

// freeze freezes the file system mounted on path and returns its thaw.
func freeze(path string) (func() error, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if err := ioctl(f, fiFreeze); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() error {
		defer func() { _ = f.Close() }()
		err := ioctl(f, fiThaw)
		if errors.Is(err, unix.EINVAL) {
			return nil // not frozen (any more): thawed already
		}
		return err
	}, nil
}

// ioctl makes the freeze or thaw call on f (the kernel ignores its
// argument).
func ioctl(f *os.File, req uint) error {
	return unix.IoctlSetInt(int(f.Fd()), req, 0)
}

// DiskUsage is the bytes the file at path takes on disk (its blocks, not
// its holes).
func DiskUsage(path string) (int64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Blocks * 512, nil
}

// Restore makes dir's workspace image a copy of the snapshot image src,
// mounts it on dir/workspace (which must exist) and hands every file in it
// to uid: the files were the snapshotted sandbox's user's. What it made is
// removed by Clear and the removal of dir, as Create's.
func (w *FS) Restore(ctx context.Context, dir, src string, uid int) error {
	if w.problem != "" {
		return fmt.Errorf("workspace restore: %s", w.problem)
	}
	info, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("workspace restore: %w", err)
	}
	img, ws := filepath.Join(dir, ImageFile), filepath.Join(dir, "workspace")
	if err := copySparse(ctx, src, img, info.Size(), true); err != nil {
		return fmt.Errorf("workspace restore: %w", err)
	}
	if err := hostos.RunTool(ctx, "", w.mount, "-t", "ext4", "-o", "loop,nodev,nosuid,noinit_itable", img, ws); err != nil {
		return fmt.Errorf("workspace restore: %w", err)
	}
	err = filepath.WalkDir(ws, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, uid)
	})
	if err != nil {
		return fmt.Errorf("workspace restore: %w", err)
	}
	return nil
}

// copySparse copies the file src, size bytes long, to a new file dst: only
// src's data, in chunks; its holes stay holes. It gives up when ctx ends.
// durable syncs dst before it is closed (a snapshot, a restore); a fresh
// workspace made from a template needs no sync.
func copySparse(ctx context.Context, src, dst string, size int64, durable bool) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if durable {
			if serr := out.Sync(); err == nil {
				err = serr
			}
		}
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	if err := out.Truncate(size); err != nil {
		return err
	}
	rfd, wfd := int(in.Fd()), int(out.Fd())
	for off := int64(0); off < size; {
		data, err := unix.Seek(rfd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) { // only a hole is left
			return nil
		}
		if err != nil {
			return err
		}
		hole, err := unix.Seek(rfd, data, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		for roff, woff := data, data; roff < hole; {
			if err := ctx.Err(); err != nil {
				return err
			}
			n, err := unix.CopyFileRange(rfd, &roff, wfd, &woff, int(min(hole-roff, copyChunk)), 0)
			if err != nil {
				return err
			}
			if n == 0 {
				return fmt.Errorf("copying %s: unexpected end", src)
			}
		}
		off = hole
	}
	return nil
}
