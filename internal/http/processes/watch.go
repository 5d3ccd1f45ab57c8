package processes

import (
	"context"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/dataplane"
	"github.com/tetherhq/tether/internal/http/httpapi"
)

// FileChange is the data of a watch's events: one change under the watched folder.
type FileChange struct {
	// Kind is what changed: create (made, or moved in under this name), write, remove, rename (moved away from this name) or chmod (mode, owner or times).
	Kind string `json:"kind" enums:"create,write,remove,rename,chmod" x-enum-varnames:"FileChangeCreate,FileChangeWrite,FileChangeRemove,FileChangeRename,FileChangeChmod" example:"write"`
	// Path is relative to the watched folder.
	Path string `json:"path" example:"src/app.py"`
	// IsDir is true for a folder.
	IsDir bool `json:"is_dir" example:"false"`
	// At is when the sandbox saw it.
	At time.Time `json:"at" format:"date-time" example:"2026-01-02T15:04:05.5Z"`
} // @name FileChange

// WatchStarted is the data of a watch's start event: the watch is armed, and every change after it is seen.
type WatchStarted struct {
	Path      string `json:"path" example:"/workspace"`
	Recursive bool   `json:"recursive" example:"true"`
} // @name WatchStarted

// watchQuery is a watch's query: the folder, and whether below it too.
func watchQuery(c *gin.Context) (string, bool, error) {
	if err := httpapi.OnlyQuery(c, "path", "recursive"); err != nil {
		return "", false, err
	}
	p := c.Query("path")
	if p == "" || p[0] != '/' || !utf8.ValidString(p) || strings.ContainsRune(p, 0) || len(p) > domain.MaxActivityTarget {
		return "", false, domain.Errorf(domain.CodeInvalidPath, "path must be an absolute path inside the sandbox, valid UTF-8 without NUL bytes, e.g. ?path=/workspace")
	}
	switch c.Query("recursive") {
	case "", "false":
		return p, false, nil
	case "true":
		return p, true, nil
	}
	return "", false, domain.Errorf(domain.CodeInvalidRequest, "recursive must be true or false")
}

// HandleSandboxWatch streams a folder's changes.
//
//	@Summary		Watch a folder for changes
//	@Description	Streams, as Server-Sent Events, what changes under the folder at path in the ready sandbox (below it too with recursive=true, folders made later included), from inotify inside the sandbox. A `start` event (WatchStarted) comes first, once the watch is armed: every change after it is seen. Then one event per change, named by its kind (create, write, remove, rename, chmod), whose data is a FileChange. The watch ends when the client leaves or the sandbox ends (an `error` event whose data is a Problem). A comment every 15 s keeps an idle stream open. A missing folder is 404 FILE_NOT_FOUND; a path that is not a folder, 400 INVALID_PATH.
//	@ID				watchFiles
//	@Tags			processes
//	@Produce		text/event-stream,json
//	@Param			id			path		string	true	"sandbox id"								example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Param			path		query		string	true	"the folder, an absolute path in the sandbox"	example(/workspace)
//	@Param			recursive	query		bool	false	"watch the folders below it too"			example(true)
//	@Success		200			{object}	FileChange			"the events (text/event-stream)"
//	@Failure		400			{object}	httpapi.Problem				"INVALID_REQUEST or INVALID_PATH"
//	@Failure		403			{object}	httpapi.Problem				"PERMISSION_DENIED"
//	@Failure		404			{object}	httpapi.Problem				"NOT_FOUND (the sandbox) or FILE_NOT_FOUND"
//	@Failure		409			{object}	httpapi.Problem				"SANDBOX_STATE_CONFLICT"
//	@Failure		501			{object}	httpapi.Problem				"NOT_SUPPORTED"
//	@Failure		503			{object}	httpapi.Problem				"PROVIDER_UNAVAILABLE or UNAVAILABLE"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/watch [get]
func HandleSandboxWatch(log *slog.Logger, st dataplane.Store, providers map[string]domain.Provider, draining context.Context) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		path, recursive, err := watchQuery(c)
		if err != nil {
			return err
		}
		sb, watcher, err := dataplane.ReadySandbox[domain.FileWatcher](c, st, providers, "watch files")
		if err != nil {
			return err
		}
		s := &sseStream{c: c}
		return s.follow(log, draining, func(ctx context.Context) error {
			err := watcher.WatchFiles(ctx, sb.ID, path, recursive, func(ev domain.FileEvent) error {
				if ev.Kind == domain.FileWatchStart {
					return s.event("start", WatchStarted{Path: path, Recursive: recursive})
				}
				return s.event(string(ev.Kind), FileChange{Kind: string(ev.Kind), Path: ev.Path, IsDir: ev.IsDir, At: ev.At.UTC()})
			})
			return httpapi.EndedMeanwhile(c, st, sb, "watch files", err)
		})
	}
}
