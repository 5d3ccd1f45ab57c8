// Package workspace gives a sandbox's /workspace a size limit: a file
// system of its own, an ext4 image on a loop device, mounted on the
// workspace folder (Create), and found and removed again by its mount
// point and its loop device's backing file (Clear, Leftovers). It owns the
// images, their templates, the mounts and the loop devices.
package workspace

// The size limit of a sandbox's /workspace.
//
// Without one, /workspace is a folder under the state directory, on the
// host's disk, and a sandbox can fill that disk. With one (params.
// workspace_mb, or the operator's default), the folder is the mount point of
// a file system of the sandbox's own: before the sandbox starts, Tether makes
// a sparse file of that size beside it (workspace.img), a copy of an empty
// ext4 image of that size that it formatted once (FS.template), and
// mounts it on the folder through a loop device (nodev, nosuid). A write
// past the limit fails inside the sandbox with ENOSPC. The host's disk holds
// what the sandbox wrote (its high-water mark: deleting files inside frees
// space inside, not on the host) and some hundred KiB of ext4 metadata,
// never more than the limit.
//
// Nothing of it lives in Tether's memory: the mount is found by its mount
// point and the loop device by its backing file, so Destroy removes them
// whichever Tether made them, List finds a loop device left without its
// folder, and a restarted Tether leaves a running sandbox's workspace
// mounted as it is.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tetherhq/tether/internal/host/hostos"
)

const (
	// ImageFile is the file, in a sandbox's folder, that holds its
	// size-limited workspace.
	ImageFile = "workspace.img"
	// workspaceRelease bounds how long a destroy waits for the kernel to
	// let go of a workspace's loop device once it is unmounted.
	workspaceRelease = 10 * time.Second
	// probeWorkspaceDir is where New checks that the host can mount a
	// workspace image; not a sandbox id, so List never sees it.
	probeWorkspaceDir = ".probe-workspace"
	// workspaceTemplates is the folder of FS's templates; not a
	// sandbox id either.
	workspaceTemplates = ".workspace-templates"
)

// MinMB is the smallest size limit a workspace may have.
const MinMB = 16

// FS is what the size limit needs, found once by Detect.
type FS struct {
	// mkfs and mount are the paths of mkfs.ext4 and mount.
	mkfs, mount string
	// problem says why the limit is unavailable on this host, if it is.
	problem string
	// templateDir holds templates: per size in MiB, an image formatted
	// once by this provider, which each workspace of that size starts as a
	// copy of (its few hundred KiB of metadata; the rest is holes) rather
	// than formatting its own.
	templateDir string
	mu          sync.Mutex
	templates   map[int]string
}

// Detect finds the tools and checks, with a small image, that the host can
// format and mount a workspace in dir; the provider's own problem, if any,
// makes the limit unavailable too.
func (w *FS) Detect(dir, providerProblem string) {
	w.templateDir = filepath.Join(dir, workspaceTemplates)
	w.mkfs, _ = exec.LookPath("mkfs.ext4")
	w.mount, _ = exec.LookPath("mount")
	if providerProblem != "" {
		w.problem = "the local provider is unavailable"
		return
	}
	w.problem = w.probe(dir)
}

// probe returns why a workspace image cannot be made and mounted under dir,
// or "". Tethers that share dir take turns, and each first clears what a
// probe that died left.
func (w *FS) probe(dir string) string {
	if missing := hostos.Missing(hostos.Tool{Path: w.mkfs, What: "mkfs.ext4 (Debian package e2fsprogs)"},
		hostos.Tool{Path: w.mount, What: "mount (Debian package mount)"}); missing != "" {
		return missing
	}
	unlock, err := hostos.Lock(filepath.Join(dir, probeWorkspaceDir+".lock"))
	if err != nil {
		return fmt.Sprintf("cannot lock the probe: %v", err)
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pdir := filepath.Join(dir, probeWorkspaceDir)
	cleanUp := func() error {
		if err := Clear(ctx, pdir); err != nil {
			return err
		}
		return os.RemoveAll(pdir)
	}
	if err := cleanUp(); err != nil {
		return fmt.Sprintf("cannot clear an earlier probe's workspace in %s: %v", pdir, err)
	}
	defer func() { _ = cleanUp() }()
	if err := os.MkdirAll(filepath.Join(pdir, "workspace"), 0o700); err != nil {
		return fmt.Sprintf("cannot make a workspace under %s: %v", dir, err)
	}
	if err := w.Create(ctx, pdir, 0, MinMB); err != nil {
		return fmt.Sprintf("cannot format and mount a workspace image here: %v", err)
	}
	return ""
}

// Problem says why the size limit is unavailable on this host, or "".
func (w *FS) Problem() string { return w.problem }

// Note is the limit's line in the provider's Info.
func (w *FS) Note(def, maxMB int) string {
	switch {
	case w.problem != "":
		return "/workspace size: not limited (a sandbox can fill the host's disk under the state folder); the limit is unavailable on this host, and creates that ask for params.workspace_mb are refused: " + w.problem
	case def == 0:
		return fmt.Sprintf("/workspace size: not limited unless the create asks (params.workspace_mb, %d to %d MiB: an ext4 file system of the sandbox's own, ENOSPC past it); without it a sandbox can fill the host's disk under the state folder",
			MinMB, maxMB)
	default:
		return fmt.Sprintf("/workspace size: %d MiB (params.workspace_mb, %d to %d): an ext4 file system of the sandbox's own, ENOSPC past it",
			def, MinMB, maxMB)
	}
}

// Create makes dir's workspace image, of mb MiB, with its root owned by uid,
// and mounts it on dir/workspace, which must exist. What it made is removed
// by Clear and the removal of dir.
func (w *FS) Create(ctx context.Context, dir string, uid, mb int) error {
	img := filepath.Join(dir, ImageFile)
	tmpl, err := w.template(ctx, mb)
	if err != nil {
		return fmt.Errorf("workspace image: %w", err)
	}
	if err := copySparse(ctx, tmpl, img, int64(mb)<<20, false); err != nil {
		return fmt.Errorf("workspace image: %w", err)
	}
	ws := filepath.Join(dir, "workspace")
	// mount sets the loop device to detach itself when it is unmounted.
	if err := hostos.RunTool(ctx, "", w.mount, "-t", "ext4", "-o", "loop,nodev,nosuid,noinit_itable", img, ws); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	// An empty folder, as without a limit, the sandbox user's.
	if err := os.Remove(filepath.Join(ws, "lost+found")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("workspace: %w", err)
	}
	if err := os.Chown(ws, uid, uid); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	return nil
}

// template returns the path of the template image of mb MiB, formatting
// it first if this provider has not yet: a sparse file of that size, ext4
// without a journal (the file system ends with its sandbox, which a host
// crash ends too), no reserved blocks, no room to grow, inode tables left
// to be zeroed never (mount's noinit_itable: the kernel knows them unused),
// and no discard of the fresh, empty file. Its root is root's; create
// hands each copy's to its sandbox user.
func (w *FS) template(ctx context.Context, mb int) (string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if path, ok := w.templates[mb]; ok {
		return path, nil
	}
	if err := os.MkdirAll(w.templateDir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(w.templateDir, strconv.Itoa(mb)+".img")
	tmp := path + "." + hostos.RandomSuffix() // another provider may share the state folder
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return "", err
	}
	defer func() { _ = os.Remove(tmp) }()
	err = f.Truncate(int64(mb) << 20) // sparse: the disk holds what is written
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	if err := hostos.RunTool(ctx, "", w.mkfs, "-q", "-F", "-b", "4096", "-i", "16384", "-m", "0",
		"-O", "^has_journal,^resize_inode", "-E", "lazy_itable_init=1,nodiscard", tmp); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", err
	}
	if w.templates == nil {
		w.templates = map[int]string{}
	}
	w.templates[mb] = path
	return path, nil
}

// Clear unmounts dir/workspace, as often as something is mounted
// there, and detaches every loop device whose backing file is dir's
// workspace image, waiting (at most workspaceRelease) for the kernel to let
// them go. Nothing to clear is success; the image itself is left to the
// removal of dir.
func Clear(ctx context.Context, dir string) error {
	ws := filepath.Join(dir, "workspace")
	// The kernel names the image by its real path, which holds it even
	// once dir is gone.
	img := filepath.Join(hostos.RealPath(filepath.Dir(dir)), filepath.Base(dir), ImageFile)
	if Mounted(ws) {
		discard(ws, img)
	}
	for tries := 0; Mounted(ws); tries++ {
		if tries == 8 {
			return fmt.Errorf("workspace: %s stays mounted", ws)
		}
		err := unix.Unmount(ws, 0)
		if errors.Is(err, unix.EBUSY) {
			// Held by a process outside the sandbox (a shell whose folder
			// it is, say): out of the tree now, the file system goes when
			// that process lets go, and the loop device with it.
			err = unix.Unmount(ws, unix.MNT_DETACH)
		}
		if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("workspace: unmounting %s: %w", ws, err)
		}
	}
	deadline := time.Now().Add(workspaceRelease)
	for {
		loops := loopDevices(func(backing string) bool { return backing == img })
		if len(loops) == 0 {
			return nil
		}
		for _, dev := range loops {
			detachLoop(dev, img)
		}
		if loops = loopDevices(func(backing string) bool { return backing == img }); len(loops) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("workspace: the loop devices %v of %s are still in use (%s)", loops, img, holders(loops))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("workspace: waiting for the loop devices %v of %s (%s): %w", loops, img, holders(loops), ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// ext4Shutdown is EXT4_IOC_SHUTDOWN, and ext4NoLogFlush its flag that
// drops what is not written yet.
const (
	ext4Shutdown   = 0x8004587d // _IOR('X', 125, __u32)
	ext4NoLogFlush = 2
)

// discard shuts the file system mounted on ws down without writing
// what it still holds in memory, if it is the ext4 of the loop device
// attached to img: it is about to be removed, and unmounting it would
// first write all that to the host's disk (a second or two for a gigabyte
// just written). Failing that, the unmount writes it.
func discard(ws, img string) {
	f, err := os.OpenFile(ws, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return
	}
	defer func() { _ = f.Close() }()
	var st unix.Stat_t
	var sfs unix.Statfs_t
	if unix.Fstat(int(f.Fd()), &st) != nil || unix.Fstatfs(int(f.Fd()), &sfs) != nil || sfs.Type != unix.EXT4_SUPER_MAGIC {
		return
	}
	dev := fmt.Sprintf("/sys/dev/block/%d:%d/loop/backing_file", unix.Major(st.Dev), unix.Minor(st.Dev))
	if loopBacking(dev) != img {
		return
	}
	_ = unix.IoctlSetPointerInt(int(f.Fd()), ext4Shutdown, ext4NoLogFlush)
}

// Mounted reports whether something is mounted on path: it lies on
// another device than its parent folder.
func Mounted(path string) bool {
	var st, parent unix.Stat_t
	if unix.Lstat(path, &st) != nil || unix.Lstat(filepath.Dir(path), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// loopDevices returns the names (loop0, ...) of the attached loop devices
// whose backing file, as the kernel names it without its " (deleted)"
// mark, match accepts.
func loopDevices(match func(backing string) bool) []string {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var out []string
	for _, f := range files {
		if backing := loopBacking(f); backing != "" && match(backing) {
			out = append(out, filepath.Base(filepath.Dir(filepath.Dir(f))))
		}
	}
	return out
}

// loopBacking reads a loop device's backing_file (in sysfs): the path of
// the file it is attached to, without the " (deleted)" the kernel adds once
// the file is removed; "" if the device is not attached.
func loopBacking(sysfsFile string) string {
	b, err := os.ReadFile(sysfsFile)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), " (deleted)")
}

// detachLoop detaches the loop device name if it is still attached to img.
// A device in use is only marked to detach itself once it is let go.
func detachLoop(name, img string) {
	f, err := os.OpenFile("/dev/"+name, os.O_RDONLY, 0)
	if err != nil {
		return
	}
	defer func() { _ = f.Close() }()
	// Checked with the device open, which keeps it from being freed and
	// handed to another image meanwhile.
	if loopBacking(filepath.Join("/sys/block", name, "loop", "backing_file")) != img {
		return
	}
	_ = unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0)
}

// Leftovers returns the names of the folders under dir (the sandboxes')
// whose workspace image a loop device is still attached to.
func Leftovers(dir string) map[string]bool {
	dir = hostos.RealPath(dir)
	out := map[string]bool{}
	loopDevices(func(backing string) bool {
		rest, ok := strings.CutPrefix(backing, dir+"/")
		if id, ok2 := strings.CutSuffix(rest, "/"+ImageFile); ok && ok2 && !strings.Contains(id, "/") {
			out[id] = true
		}
		return false
	})
	return out
}
