package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"

	"github.com/tetherhq/tether/clients/go/tether"
)

// filesCommands are `tether sandboxes files SUB`.
var filesCommands = subcommands{
	"put": filesPut,
	"get": filesGet,
}

// runFiles is `tether sandboxes files put|get`.
func runFiles(ctx context.Context, _ string, args []string, std stdio) error {
	return filesCommands.run(ctx, "sandboxes files", args, std)
}

// filesPut is `tether sandboxes files put ID PATH [FILE|-]`: FILE's bytes,
// or stdin's, written to PATH in the sandbox.
func filesPut(ctx context.Context, _ string, args []string, std stdio) error {
	c, rest, err := newCLI("sandboxes files put", args, std, nil)
	if err != nil {
		return err
	}
	if len(rest) != 2 && len(rest) != 3 {
		return errors.New("sandboxes files put: want ID PATH [FILE|-]")
	}
	id, path := rest[0], rest[1]
	body := c.stdin
	var editors []tether.RequestEditorFn
	if len(rest) == 3 && rest[2] != "-" {
		f, err := os.Open(rest[2])
		if err != nil {
			return fmt.Errorf("sandboxes files put: %w", err)
		}
		defer func() { _ = f.Close() }()
		if info, err := f.Stat(); err == nil && info.Mode().IsRegular() {
			// A known length lets the server refuse a file over its
			// limit before any of it is sent.
			editors = append(editors, func(_ context.Context, req *http.Request) error {
				req.ContentLength = info.Size()
				return nil
			})
		}
		body = f
	}
	if body == nil {
		body = http.NoBody
	}
	counted := &countingReader{r: body}
	resp, err := c.api.PutFileWithBodyWithResponse(ctx, id, &tether.PutFileParams{Path: path}, "application/octet-stream", counted, editors...)
	if err != nil {
		return fmt.Errorf("put file: %w", err)
	}
	if err := problem(resp.StatusCode(), resp.Body); err != nil {
		return err
	}
	if c.json {
		return c.printJSON(map[string]any{"sandbox_id": id, "path": path, "bytes": counted.n})
	}
	_, err = fmt.Fprintf(c.stdout, "wrote %d bytes to %s in %s\n", counted.n, cell(path), cell(id))
	return err
}

// filesGet is `tether sandboxes files get ID PATH`: the file's bytes on
// stdout, as they are to a pipe or a file, shown escaped on a terminal
// (unless --raw).
func filesGet(ctx context.Context, _ string, args []string, std stdio) error {
	var raw bool
	c, rest, err := newCLI("sandboxes files get", args, std, func(fs *flag.FlagSet) {
		fs.BoolVar(&raw, "raw", false, "print the file as it is on a terminal too, escapes included (to a pipe or file it always is)")
	})
	if err != nil {
		return err
	}
	if len(rest) != 2 {
		return errors.New("sandboxes files get: want ID PATH")
	}
	resp, err := c.api.GetFile(ctx, rest[0], &tether.GetFileParams{Path: rest[1]})
	if err != nil {
		return fmt.Errorf("get file: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if err := problem(resp.StatusCode, body); err != nil {
			return err
		}
		return fmt.Errorf("get file: unexpected answer %d", resp.StatusCode)
	}
	if c.tty && !raw {
		data, err := io.ReadAll(resp.Body)
		c.sandboxOutput(string(data), false)
		if err != nil {
			return fmt.Errorf("get file: %w", err)
		}
		return nil
	}
	if _, err := io.Copy(c.stdout, resp.Body); err != nil {
		return fmt.Errorf("get file: %w", err)
	}
	return nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (r *countingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.n += int64(n)
	return n, err
}
