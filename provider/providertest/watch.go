package providertest

import (
	"context"
	"errors"
	"fmt"
	"path"
	"testing"
	"time"

	"github.com/tetherhq/tether/provider"
)

// The FileWatcher contract: the start event first, then create, write,
// chmod, rename and remove events with paths relative to the watched
// folder; folders below it, those made later included, when recursive,
// and not otherwise; the watch ends with its context; a missing folder,
// a file, and an unknown sandbox are refused. The suite makes the changes
// with exec.

func (s *suite) testWatch(t *testing.T) {
	skipWithout[provider.FileWatcher](t, s, "FileWatcher")
	skipWithout[provider.Execer](t, s, "Execer (the suite makes its changes with it)")
	if !s.probe.Info(s.ctx(t)).Watch {
		t.Skip("the provider implements FileWatcher but its Info says it offers none")
	}
	t.Parallel()
	t.Run("Events", s.testWatchEvents)
	t.Run("Recursive", s.testWatchRecursive)
	t.Run("NotRecursive", s.testWatchFlat)
	t.Run("Errors", s.testWatchErrors)
}

// watchSandbox makes a provider that watches, a sandbox in it and a
// folder there holding the subfolder old, and returns that folder.
func (s *suite) watchSandbox(t *testing.T) (provider.FileWatcher, provider.Execer, string, string) {
	t.Helper()
	p, e, res := s.execSandbox(t, nil)
	fw := capability[provider.FileWatcher](t, p, "FileWatcher")
	dir := path.Join(res.WorkDir, "providertest-watch")
	s.sh(t, e, res.SandboxID, "mkdir -p "+dir+"/old")
	return fw, e, res.SandboxID, dir
}

// sh runs a command that must succeed.
func (s *suite) sh(t *testing.T, e provider.Execer, id, command string) {
	t.Helper()
	if got := s.run(t, e, id, provider.ExecRequest{Command: command}); got.ExitCode != 0 {
		t.Fatalf("%s: %+v", command, got)
	}
}

// watch watches dir on a goroutine of its own and waits for its start
// event, which must come first.
func (s *suite) watch(t *testing.T, fw provider.FileWatcher, id, dir string, recursive bool) *stream[provider.FileEvent] {
	t.Helper()
	w := startStream(t, s.ctx(t), nil, func(ctx context.Context, emit func(provider.FileEvent) error) error {
		return fw.WatchFiles(ctx, id, dir, recursive, emit)
	})
	events := w.waitFor("start event", procWait, func(e []provider.FileEvent) bool { return len(e) > 0 })
	if events[0].Kind != provider.FileWatchStart || events[0].Path != "" {
		t.Fatalf("the first event of a watch = %+v, want start", events[0])
	}
	return w
}

// change is an event the suite waits for.
type change struct {
	kind  provider.FileEventKind
	path  string
	isDir bool
}

// saw is a waitFor condition: the events hold want in that order (with
// others between).
func saw(want ...change) func([]provider.FileEvent) bool {
	return func(events []provider.FileEvent) bool {
		i := 0
		for _, e := range events {
			if i < len(want) && e.Kind == want[i].kind && e.Path == want[i].path && e.IsDir == want[i].isDir {
				i++
			}
		}
		return i == len(want)
	}
}

func (s *suite) testWatchEvents(t *testing.T) {
	t.Parallel()
	fw, e, id, dir := s.watchSandbox(t)
	w := s.watch(t, fw, id, dir, false)
	s.sh(t, e, id, fmt.Sprintf("cd %s && echo hi > a.txt && chmod 600 a.txt && mv a.txt b.txt && rm b.txt", dir))
	events := w.waitFor("create, write, chmod, rename and remove", procWait, saw(
		change{provider.FileCreate, "a.txt", false}, change{provider.FileWrite, "a.txt", false},
		change{provider.FileChmod, "a.txt", false}, change{provider.FileRename, "a.txt", false},
		change{provider.FileCreate, "b.txt", false}, change{provider.FileRemove, "b.txt", false}))
	for _, ev := range events[1:] {
		if ev.At.IsZero() || time.Since(ev.At) > time.Hour {
			t.Errorf("event %+v has no time, or a wrong one", ev)
		}
	}
	w.stop()
	if err := w.wait(10 * time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("WatchFiles after its context ended returned %v, want context.Canceled", err)
	}
}

// testWatchRecursive: folders below the watched one are watched, those
// there before and those made later, however deep and however soon
// written.
func (s *suite) testWatchRecursive(t *testing.T) {
	t.Parallel()
	fw, e, id, dir := s.watchSandbox(t)
	w := s.watch(t, fw, id, dir, true)
	s.sh(t, e, id, "mkdir "+dir+"/sub")
	w.waitFor("the new folder", procWait, saw(change{provider.FileCreate, "sub", true}))
	s.sh(t, e, id, fmt.Sprintf("echo x > %[1]s/sub/c.txt && echo y > %[1]s/old/d.txt", dir))
	w.waitFor("writes in the new and the old subfolder", procWait, saw(
		change{provider.FileCreate, "sub/c.txt", false}, change{provider.FileWrite, "sub/c.txt", false},
		change{provider.FileCreate, "old/d.txt", false}, change{provider.FileWrite, "old/d.txt", false}))
	s.sh(t, e, id, fmt.Sprintf("mkdir -p %[1]s/sub/deep/er && echo z > %[1]s/sub/deep/er/e.txt", dir))
	w.waitFor("a file made at once in folders made at once", procWait, saw(
		change{provider.FileCreate, "sub/deep", true}, change{provider.FileCreate, "sub/deep/er/e.txt", false}))
	// A tree made elsewhere and moved in: all of it was made here, and
	// its folders are watched.
	s.sh(t, e, id, fmt.Sprintf("mkdir -p %[1]s.stage/tree/in && echo m > %[1]s.stage/tree/in/m.txt && mv %[1]s.stage/tree %[1]s/moved", dir))
	w.waitFor("a tree moved in", procWait, saw(change{provider.FileCreate, "moved", true}, change{provider.FileCreate, "moved/in/m.txt", false}))
	s.sh(t, e, id, fmt.Sprintf("echo more >> %s/moved/in/m.txt", dir))
	w.waitFor("a write in a folder moved in", procWait, saw(change{provider.FileWrite, "moved/in/m.txt", false}))
}

// testWatchFlat: without recursive, what happens in a subfolder is not
// reported.
func (s *suite) testWatchFlat(t *testing.T) {
	t.Parallel()
	fw, e, id, dir := s.watchSandbox(t)
	w := s.watch(t, fw, id, dir, false)
	s.sh(t, e, id, fmt.Sprintf("echo x > %[1]s/old/f.txt && mkdir %[1]s/sub2 && echo x > %[1]s/sub2/g.txt && echo y > %[1]s/marker.txt", dir))
	events := w.waitFor("the marker", procWait, saw(change{provider.FileCreate, "sub2", true}, change{provider.FileCreate, "marker.txt", false}))
	for _, ev := range events {
		if ev.Path == "old/f.txt" || ev.Path == "sub2/g.txt" {
			t.Errorf("a watch that is not recursive reported %+v", ev)
		}
	}
}

func (s *suite) testWatchErrors(t *testing.T) {
	t.Parallel()
	fw, e, id, dir := s.watchSandbox(t)
	s.sh(t, e, id, "echo x > "+dir+"/file")
	none := func(provider.FileEvent) error { return nil }
	wantCode(t, "WatchFiles of a missing folder", fw.WatchFiles(s.ctx(t), id, dir+"/missing", false, none), provider.CodeFileNotFound)
	wantCode(t, "WatchFiles of a file", fw.WatchFiles(s.ctx(t), id, dir+"/file", false, none), provider.CodeInvalidPath)
	wantCode(t, "WatchFiles in a sandbox the provider never made",
		fw.WatchFiles(s.ctx(t), provider.NewSandboxID(), "/tmp", false, none), provider.CodeProviderUnavailable)
}
