package chaos

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tetherhq/tether/internal/domain"
)

// Every resource a local create makes, on any host, it makes inside the
// sandbox's folder or after making it, and a destroy removes that folder
// last (internal/provider/local, create.go and destroy.go). So the
// folders' lives, watched with inotify in every host's state folder, are
// the resources' lives, seen whole rather than sampled: a sandbox with
// folders on two hosts, or two at once on one, was made twice; the moment
// its folder went is the moment its host no longer held it.

// life is one life of a sandbox's folder on a host.
type life struct {
	host     string
	from, to time.Time // to zero: still there
}

// folderWatch watches the state folders of the hosts.
type folderWatch struct {
	// f is the inotify descriptor, non-blocking so that closing it ends
	// a read under way (through the runtime's poller).
	f     *os.File
	hosts map[int]string // watch descriptor -> host
	done  chan struct{}

	mu    sync.Mutex
	lives map[string][]life // by sandbox id
	// overflowed is set when the kernel dropped events: the record is
	// incomplete.
	overflowed bool
}

// watchFolders starts watching dirs (host name -> its state folder).
func watchFolders(dirs map[string]string) (*folderWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	w := &folderWatch{f: os.NewFile(uintptr(fd), "inotify"), hosts: map[int]string{}, done: make(chan struct{}), lives: map[string][]life{}}
	for host, dir := range dirs {
		wd, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_DELETE|unix.IN_MOVED_FROM|unix.IN_MOVED_TO|unix.IN_ONLYDIR)
		if err != nil {
			_ = w.f.Close()
			return nil, fmt.Errorf("inotify %s: %w", dir, err)
		}
		w.hosts[wd] = host
		entries, err := os.ReadDir(dir)
		if err != nil {
			_ = w.f.Close()
			return nil, err
		}
		for _, e := range entries { // there before the watch: born now
			if e.IsDir() && domain.ValidID(e.Name()) {
				w.lives[e.Name()] = append(w.lives[e.Name()], life{host: host, from: time.Now()})
			}
		}
	}
	go w.read()
	return w, nil
}

// read records the events until the descriptor is closed.
func (w *folderWatch) read() {
	defer close(w.done)
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil || n <= 0 {
			return // closed by stop
		}
		now := time.Now()
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			raw := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			w.event(ev, string(raw[:clen(raw)]), now)
		}
	}
}

// clen is the length of a NUL-padded name.
func clen(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return len(b)
}

func (w *folderWatch) event(ev *unix.InotifyEvent, name string, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
		w.overflowed = true
		return
	}
	if ev.Mask&unix.IN_ISDIR == 0 || !domain.ValidID(name) {
		return
	}
	host := w.hosts[int(ev.Wd)]
	switch {
	case ev.Mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
		w.lives[name] = append(w.lives[name], life{host: host, from: at})
	case ev.Mask&(unix.IN_DELETE|unix.IN_MOVED_FROM) != 0:
		ls := w.lives[name]
		for i := len(ls) - 1; i >= 0; i-- {
			if ls[i].host == host && ls[i].to.IsZero() {
				ls[i].to = at
				break
			}
		}
	}
}

// stop ends the watch.
func (w *folderWatch) stop() {
	_ = w.f.Close()
	<-w.done
}

// record returns the lives seen, and whether the kernel dropped events.
func (w *folderWatch) record() (map[string][]life, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string][]life, len(w.lives))
	for id, ls := range w.lives {
		out[id] = slices.Clone(ls)
	}
	return out, w.overflowed
}

// madeTwice returns the sandboxes whose folders lived on two hosts, or
// twice at once on one; and counts those remade on their host after the
// first was gone (a create that retried after its replica's death clears
// the attempt's remains, then starts over).
func madeTwice(lives map[string][]life) (twice []string, remade int) {
	for id, ls := range lives {
		hosts := map[string]bool{}
		for _, l := range ls {
			hosts[l.host] = true
		}
		if len(hosts) > 1 {
			twice = append(twice, fmt.Sprintf("%s on %d hosts", id, len(hosts)))
			continue
		}
		if len(ls) > 1 {
			remade++
		}
		for i := range ls {
			for j := i + 1; j < len(ls); j++ {
				if overlap(ls[i], ls[j]) {
					twice = append(twice, fmt.Sprintf("%s twice at once on %s", id, ls[i].host))
				}
			}
		}
	}
	slices.Sort(twice)
	return twice, remade
}

func overlap(a, b life) bool {
	aEnd, bEnd := a.to, b.to
	if aEnd.IsZero() {
		aEnd = time.Now()
	}
	if bEnd.IsZero() {
		bEnd = time.Now()
	}
	return a.from.Before(bEnd) && b.from.Before(aEnd)
}

// gone returns, per sandbox, when its last folder went (none left).
func gone(lives map[string][]life) map[string]time.Time {
	out := map[string]time.Time{}
	for id, ls := range lives {
		var last time.Time
		for _, l := range ls {
			if l.to.IsZero() {
				last = time.Time{}
				break
			}
			if l.to.After(last) {
				last = l.to
			}
		}
		if !last.IsZero() {
			out[id] = last
		}
	}
	return out
}
