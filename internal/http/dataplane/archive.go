package dataplane

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/httpapi"
)

// HandleArchivePut extracts a tar archive into a folder of a sandbox.
//
//	@Summary		Upload a folder into a sandbox, as a tar archive
//	@Description	Extracts the tar archive in the request body into the folder at path (made if missing; what is there already stays unless the archive replaces it). The archive is extracted aside first and copied into place only once it arrived whole: a refused or broken archive leaves the folder as it was. Path rules, limits (MAX_FILE_BYTES for the archive) and errors are those of the file routes; a body that is not a tar archive is 400 INVALID_REQUEST.
//	@ID				putArchive
//	@Tags			data plane
//	@Accept			application/x-tar
//	@Produce		json
//	@Param			id		path	string	true	"sandbox id"									example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Param			path	query	string	true	"absolute path of a folder inside the sandbox"	example(/workspace)
//	@Param			archive	body	string	true	"a tar archive"
//	@Success		204		"extracted"
//	@Failure		400		{object}	httpapi.Problem				"INVALID_PATH, INVALID_REQUEST"
//	@Failure		403		{object}	httpapi.Problem				"PERMISSION_DENIED"
//	@Failure		404		{object}	httpapi.Problem				"NOT_FOUND (the sandbox)"
//	@Failure		409		{object}	httpapi.Problem				"SANDBOX_STATE_CONFLICT"
//	@Failure		413		{object}	httpapi.Problem				"PAYLOAD_TOO_LARGE"
//	@Failure		501		{object}	httpapi.Problem				"NOT_SUPPORTED"
//	@Failure		503		{object}	httpapi.Problem				"PROVIDER_UNAVAILABLE or UNAVAILABLE"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/archive [put]
func HandleArchivePut(log *slog.Logger, cfg httpapi.Config, st Store, providers map[string]domain.Provider) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		path, err := filePath(c)
		if err != nil {
			return err
		}
		sb, archives, err := ReadySandbox[domain.Archives](c, st, providers, "archives")
		if err != nil {
			return err
		}
		started, body := time.Now(), &countingReader{r: c.Request.Body}
		err = httpapi.BodyError(c, archives.WriteArchive(c.Request.Context(), sb.ID, path, body, cfg.MaxFileBytes))
		RecordActivity(c, log, st, sb, domain.Activity{Kind: domain.ActivityArchiveWrite, Target: path, Bytes: &body.n}, started, err)
		if err != nil {
			return err
		}
		c.Status(http.StatusNoContent)
		return nil
	}
}

// HandleArchiveGet downloads a folder of a sandbox as a tar archive.
//
//	@Summary		Download a folder from a sandbox, as a tar archive
//	@Description	Streams the folder at path as a tar archive (members relative to the folder). The archive is cut at the server's file limit (MAX_FILE_BYTES), counted in the bytes the archive takes, so sparse files count at their full size: past it the response ends without the end of the tar stream (the connection is cut, so that no client takes it for whole), and the activity records PAYLOAD_TOO_LARGE. A missing folder is 404 FILE_NOT_FOUND; a path that is not a folder is 400 INVALID_PATH; a folder the sandbox user may not read is 403 PERMISSION_DENIED.
//	@ID				getArchive
//	@Tags			data plane
//	@Produce		application/x-tar
//	@Param			id		path		string				true	"sandbox id"									example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Param			path	query		string				true	"absolute path of a folder inside the sandbox"	example(/workspace)
//	@Success		200		{file}		binary				"a tar archive of the folder"
//	@Failure		400		{object}	httpapi.Problem				"INVALID_PATH"
//	@Failure		403		{object}	httpapi.Problem				"PERMISSION_DENIED"
//	@Failure		404		{object}	httpapi.Problem				"FILE_NOT_FOUND or NOT_FOUND"
//	@Failure		409		{object}	httpapi.Problem				"SANDBOX_STATE_CONFLICT"
//	@Failure		413		{object}	httpapi.Problem				"PAYLOAD_TOO_LARGE"
//	@Failure		501		{object}	httpapi.Problem				"NOT_SUPPORTED"
//	@Failure		503		{object}	httpapi.Problem				"PROVIDER_UNAVAILABLE or UNAVAILABLE"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/archive [get]
func HandleArchiveGet(log *slog.Logger, cfg httpapi.Config, st Store, providers map[string]domain.Provider) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		path, err := filePath(c)
		if err != nil {
			return err
		}
		sb, archives, err := ReadySandbox[domain.Archives](c, st, providers, "archives")
		if err != nil {
			return err
		}
		w, started := &lazyWriter{c: c, contentType: "application/x-tar"}, time.Now()
		capped := &cappedWriter{w: w, left: cfg.MaxFileBytes}
		err = archives.ReadArchive(c.Request.Context(), sb.ID, path, capped)
		if capped.cut {
			// Whatever the provider made of its failed write, this is why.
			err = domain.Errorf(domain.CodePayloadTooLarge, "the archive of %s exceeds the %d-byte limit (MAX_FILE_BYTES); it was cut there", path, cfg.MaxFileBytes)
		}
		RecordActivity(c, log, st, sb, domain.Activity{Kind: domain.ActivityArchiveRead, Target: path, Bytes: &w.n}, started, err)
		if err != nil && w.started {
			// Too late for a problem document: cut the response short.
			panic(http.ErrAbortHandler)
		}
		if err != nil {
			return err
		}
		w.start() // tar always writes something; this is for a provider that wrote nothing
		return nil
	}
}

// cappedWriter passes at most left bytes on; a write past them is refused
// whole and marks the stream cut.
type cappedWriter struct {
	w    io.Writer
	left int64
	cut  bool
}

// errArchiveCut is what a provider's write past the limit gets.
var errArchiveCut = errors.New("archive cut at the size limit")

func (w *cappedWriter) Write(b []byte) (int, error) {
	if int64(len(b)) > w.left {
		w.cut = true
		return 0, errArchiveCut
	}
	n, err := w.w.Write(b)
	w.left -= int64(n)
	return n, err
}
