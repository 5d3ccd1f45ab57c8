package providertest

import (
	"bytes"
	"errors"
	"fmt"
	"path"
	"sync"
	"testing"

	"github.com/tetherhq/tether/provider"
)

// raceRounds and racePairs make the racing batches: racePairs racing pairs
// at once (a client's batch of uploads, as deepagents sends 8), raceRounds
// times.
const (
	raceRounds = 25
	racePairs  = 4
)

// write is one racing upload and what it answered.
type write struct {
	path string
	body []byte
	err  error
}

// conflictCodes are what a write that lost a race to a folder or a file
// on its way may answer.
var conflictCodes = map[provider.Code]bool{provider.CodeIsDirectory: true, provider.CodeInvalidPath: true}

// checkWrites checks that every write that succeeded left its exact body
// at its path, and that every other one answered a conflict; it returns
// how many answered one.
func (s *suite) checkWrites(t *testing.T, f provider.Files, id string, writes []*write) (conflicts int) {
	t.Helper()
	for _, w := range writes {
		if w.err != nil {
			conflicts++
			var e *provider.Error
			if !errors.As(w.err, &e) || !conflictCodes[e.Code] {
				t.Errorf("racing write of %s: err = %v, want success, %s or %s", w.path, w.err, provider.CodeIsDirectory, provider.CodeInvalidPath)
			}
			continue
		}
		got, err := s.read(t, f, id, w.path, 1<<20)
		if err != nil || !bytes.Equal(got, w.body) {
			t.Errorf("racing write of %s answered success, but the path now reads %q, %v (want %q): a lost write", w.path, got, err, w.body)
		}
	}
	return conflicts
}

// race runs the writes of each batch at once and waits for them all.
func race(batch []func()) {
	var wg sync.WaitGroup
	for _, fn := range batch {
		wg.Go(fn)
	}
	wg.Wait()
}

// testFilesRace: uploads of D/f and of D in one batch race to make D a
// folder or a file. Whichever wins, no upload may answer success while its
// body went elsewhere (into D, when D became a folder under it).
func (s *suite) testFilesRace(t *testing.T) {
	t.Parallel()
	_, f, res := s.filesSandbox(t)
	conflicts := 0
	for round := range raceRounds {
		var writes []*write
		var batch []func()
		for pair := range racePairs {
			dir := path.Join(res.WorkDir, "race", fmt.Sprintf("r%d-p%d", round, pair))
			for _, w := range []*write{
				{path: path.Join(dir, "f"), body: fmt.Appendf(nil, "inner %d %d", round, pair)},
				{path: dir, body: fmt.Appendf(nil, "outer %d %d", round, pair)},
			} {
				writes = append(writes, w)
				batch = append(batch, func() {
					w.err = f.WriteFile(s.ctx(t), res.SandboxID, w.path, bytes.NewReader(w.body), 1<<20)
				})
			}
		}
		race(batch)
		conflicts += s.checkWrites(t, f, res.SandboxID, writes)
		if t.Failed() {
			return
		}
	}
	t.Logf("%d racing pairs: %d writes answered a conflict, none was lost", raceRounds*racePairs, conflicts)
}

// testArchivesRace: an archive into D races an upload of D itself (a file
// where the archive needs a folder), and an archive whose x is a file
// races an upload of D/x/y (which needs x a folder). Whatever wins, a
// write that answered success left its body, and the other answered a
// conflict.
func (s *suite) testArchivesRace(t *testing.T) {
	skipWithout[provider.Archives](t, s, "Archives")
	t.Parallel()
	p, f, res := s.filesSandbox(t)
	a := capability[provider.Archives](t, p, "Archives")
	conflicts := 0
	for round := range raceRounds {
		var writes []*write
		var batch []func()
		for pair := range racePairs {
			dir := path.Join(res.WorkDir, "arace", fmt.Sprintf("r%d-p%d", round, pair))
			x := fmt.Appendf(nil, "archived x %d %d", round, pair)
			archived := &write{path: path.Join(dir, "x"), body: x}
			upload := &write{path: path.Join(dir, "x", "y"), body: fmt.Appendf(nil, "uploaded y %d %d", round, pair)}
			if pair%2 == 1 {
				upload = &write{path: dir, body: fmt.Appendf(nil, "uploaded D %d %d", round, pair)}
			}
			archive := tarOf(t, map[string][]byte{"x": x})
			writes = append(writes, archived, upload)
			batch = append(batch,
				func() {
					archived.err = a.WriteArchive(s.ctx(t), res.SandboxID, dir, bytes.NewReader(archive), 1<<20)
				},
				func() {
					upload.err = f.WriteFile(s.ctx(t), res.SandboxID, upload.path, bytes.NewReader(upload.body), 1<<20)
				})
		}
		race(batch)
		conflicts += s.checkWrites(t, f, res.SandboxID, writes)
		if t.Failed() {
			return
		}
	}
	t.Logf("%d racing pairs: %d writes answered a conflict, none was lost", raceRounds*racePairs, conflicts)
}
