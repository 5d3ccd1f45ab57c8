package lifecycle

import (
	"context"
	"log/slog"
	"slices"
)

// lazyWith is log.With(attrs...) for a logger made per sandbox operation:
// a JSON or text handler formats With's attributes at once, which the
// executor paid on every create and release (15% of Tether's CPU per
// unloaded create in cmd/bench's profile) although at the usual levels
// most such loggers never log. Here they are formatted only when a record
// is: the output is the same, attributes in the same order.
func lazyWith(log *slog.Logger, attrs ...slog.Attr) *slog.Logger {
	return slog.New(&lazyAttrs{h: log.Handler(), attrs: attrs})
}

// lazyAttrs is a handler whose own attributes are added to the inner
// handler only for a record it handles.
type lazyAttrs struct {
	h     slog.Handler
	attrs []slog.Attr
}

func (l *lazyAttrs) Enabled(ctx context.Context, level slog.Level) bool {
	return l.h.Enabled(ctx, level)
}

func (l *lazyAttrs) Handle(ctx context.Context, r slog.Record) error {
	return l.h.WithAttrs(l.attrs).Handle(ctx, r)
}

func (l *lazyAttrs) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &lazyAttrs{h: l.h, attrs: append(slices.Clip(l.attrs), attrs...)}
}

func (l *lazyAttrs) WithGroup(name string) slog.Handler {
	return l.h.WithAttrs(l.attrs).WithGroup(name)
}
