package lifecycle

import (
	"bytes"
	"io"
	"log/slog"
	"testing"
)

// TestLazyWithLogsAsWith: a lazyWith logger writes what log.With's would,
// attributes in the same order, nested With and groups included.
func TestLazyWithLogsAsWith(t *testing.T) {
	var eager, lazy bytes.Buffer
	opts := &slog.HandlerOptions{Level: slog.LevelInfo, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}
	base := func(w io.Writer) *slog.Logger {
		return slog.New(slog.NewJSONHandler(w, opts)).With("component", "executor")
	}
	e := base(&eager).With("sandbox", "sbx_1", "epoch", int64(3), "state", stateLike("ready"))
	l := lazyWith(base(&lazy), slog.String("sandbox", "sbx_1"), slog.Int64("epoch", 3), slog.Any("state", stateLike("ready")))
	for _, lg := range []*slog.Logger{e, l} {
		lg.Info("one", "took", 5)
		lg.With("more", true).Warn("two")
		lg.WithGroup("g").Error("three", "k", "v")
		lg.Debug("not logged")
	}
	if eager.String() != lazy.String() {
		t.Fatalf("lazyWith wrote\n%s\nlog.With wrote\n%s", lazy.String(), eager.String())
	}
}

type stateLike string

// countingHandler counts WithAttrs calls: the formatting lazyWith defers.
type countingHandler struct {
	slog.Handler
	withs *int
}

func (c countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	*c.withs++
	return countingHandler{c.Handler.WithAttrs(as), c.withs}
}

// TestLazyWithFormatsOnlyWhatIsLogged: a record below the level costs no
// formatting of the attributes.
func TestLazyWithFormatsOnlyWhatIsLogged(t *testing.T) {
	withs := 0
	h := countingHandler{slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}), &withs}
	l := lazyWith(slog.New(h), slog.String("sandbox", "sbx_1"))
	l.Info("below the level")
	if withs != 0 {
		t.Fatalf("%d WithAttrs for a record below the level, want 0", withs)
	}
	l.Warn("logged")
	if withs != 1 {
		t.Fatalf("%d WithAttrs for one logged record, want 1", withs)
	}
}

// BenchmarkLoggerPerCreate is the executor's logger per create, at
// LOG_LEVEL=warn, with one Info that is not logged (as a create that
// becomes ready has).
func BenchmarkLoggerPerCreate(b *testing.B) {
	log := slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn})).With("component", "executor")
	b.Run("With", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l := log.With("sandbox", "sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w", "provider", "sim", "epoch", int64(1), "attempt", 1)
			l.Info("executor: sandbox ready", "took", 5)
		}
	})
	b.Run("lazyWith", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l := lazyWith(log, slog.String("sandbox", "sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w"), slog.String("provider", "sim"),
				slog.Int64("epoch", 1), slog.Int("attempt", 1))
			l.Info("executor: sandbox ready", "took", 5)
		}
	})
}
