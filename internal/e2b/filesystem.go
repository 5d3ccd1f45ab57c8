package e2b

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/tetherhq/tether/internal/e2b/envdpb/filesystem"
	"github.com/tetherhq/tether/internal/e2b/envdpb/filesystem/filesystemconnect"
	"github.com/tetherhq/tether/provider"
)

// filesystemService is filesystem.Filesystem: the listing and the changes
// as sh scripts run through /v1's exec (find, mkdir, mv, rm of the
// sandbox's root), the watch over the provider's FileWatcher.
type filesystemService struct {
	e envd
}

var _ filesystemconnect.FilesystemHandler = filesystemService{}

// The exit codes of the scripts below, each a kind of error.
const (
	exitNotFound = 3
	exitNotDir   = 4
	exitExists   = 5
	exitFailed   = 6
)

// entryFormat is find's -printf of one entry: type, size, mode, owner,
// group, modified time, symlink target and path, NUL after each.
const entryFormat = `'%y\0%s\0%m\0%u\0%g\0%T@\0%l\0%p\0'`

// Each script takes its paths as $1 (and $2), and prints the entries its
// answer needs with entryFormat.
const (
	statScript    = `[ -e "$1" ] || [ -L "$1" ] || exit 3; find "$1" -maxdepth 0 -printf ` + entryFormat + ` 2>/dev/null || exit 6`
	listScript    = `[ -e "$1" ] || exit 3; [ -d "$1" ] || exit 4; find "$1" -mindepth 1 -maxdepth "$2" -printf ` + entryFormat + ` 2>/dev/null || exit 6`
	makeDirScript = `[ -e "$1" ] && exit 5; mkdir -p -- "$1" 2>/dev/null || exit 6; find "$1" -maxdepth 0 -printf ` + entryFormat
	moveScript    = `[ -e "$1" ] || [ -L "$1" ] || exit 3; mkdir -p -- "$(dirname -- "$2")" 2>/dev/null && mv -fT -- "$1" "$2" 2>/dev/null || exit 6; find "$2" -maxdepth 0 -printf ` + entryFormat
	removeScript  = `[ -e "$1" ] || [ -L "$1" ] || exit 3; rm -rf -- "$1" 2>/dev/null || exit 6`
)

// quote is s as one sh word.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// run runs script with args in the call's sandbox through /v1's exec and
// returns its output; an exit code of the scripts' is the error it means.
func (s filesystemService) run(ctx context.Context, h http.Header, peer connect.Peer, script string, paths ...string) ([]byte, error) {
	t, err := s.e.rpcTarget(ctx, h, peer)
	if err != nil {
		return nil, err
	}
	if t.sb.State != "ready" {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("the sandbox is "+t.sb.State+", not running"))
	}
	args := make([]string, 0, len(paths))
	for _, p := range paths {
		abs, err := absPath(t.sb, p)
		if err != nil {
			return nil, rpcError(err)
		}
		args = append(args, quote(abs))
	}
	cmd := "set -- " + strings.Join(args, " ") + "; " + script
	from := &http.Request{Header: h, RemoteAddr: peer.Addr}
	rep, err := s.e.core.call(ctx, from, t.key, http.MethodPost, sandboxPath(t.sb.ID, "/exec", nil),
		map[string]string{"command": cmd, "output_encoding": "base64"})
	if err != nil {
		return nil, rpcError(err)
	}
	if !rep.ok() {
		return nil, rpcError(fromV1(rep))
	}
	var res struct {
		ExitCode int    `json:"exit_code"`
		Output   string `json:"output_base64"`
	}
	if err := rep.decode(&res); err != nil {
		return nil, rpcError(err)
	}
	out, err := base64.StdEncoding.DecodeString(res.Output)
	if err != nil {
		return nil, rpcError(err)
	}
	return out, scriptError(res.ExitCode, paths[0])
}

// scriptError is the Connect error of a script's exit code.
func scriptError(code int, p string) error {
	switch code {
	case 0:
		return nil
	case exitNotFound:
		return connect.NewError(connect.CodeNotFound, errors.New("path '"+p+"' does not exist"))
	case exitNotDir:
		return connect.NewError(connect.CodeInvalidArgument, errors.New("path '"+p+"' is not a directory"))
	case exitExists:
		return connect.NewError(connect.CodeAlreadyExists, errors.New("path '"+p+"' already exists"))
	}
	return connect.NewError(connect.CodeInternal, errors.New("the operation on '"+p+"' failed (exit "+strconv.Itoa(code)+")"))
}

// entries parses find's output of entryFormat.
func entries(out []byte) []*pb.EntryInfo {
	fields := bytes.Split(out, []byte{0})
	var es []*pb.EntryInfo
	for i := 0; i+8 <= len(fields); i += 8 {
		es = append(es, entryOf(fields[i:i+8]))
	}
	return es
}

// entryOf is one entry's EntryInfo from its eight fields.
func entryOf(f [][]byte) *pb.EntryInfo {
	size, _ := strconv.ParseInt(string(f[1]), 10, 64)
	perm, _ := strconv.ParseUint(string(f[2]), 8, 32)
	secs, _ := strconv.ParseFloat(string(f[5]), 64)
	mode := fs.FileMode(perm) & fs.ModePerm
	e := &pb.EntryInfo{
		Name: path.Base(string(f[7])), Path: string(f[7]), Size: size,
		Owner: string(f[3]), Group: string(f[4]),
		ModifiedTime: timestamppb.New(time.Unix(0, int64(secs*1e9))),
	}
	switch string(f[0]) {
	case "d":
		e.Type, mode = pb.FileType_FILE_TYPE_DIRECTORY, mode|fs.ModeDir
	case "l":
		e.Type, mode = pb.FileType_FILE_TYPE_SYMLINK, mode|fs.ModeSymlink
		target := string(f[6])
		e.SymlinkTarget = &target
	case "f":
		e.Type = pb.FileType_FILE_TYPE_FILE
	default:
		e.Type = pb.FileType_FILE_TYPE_UNSPECIFIED
	}
	e.Mode, e.Permissions = uint32(mode), mode.String()
	return e
}

// one is the single entry a script printed.
func one(out []byte) (*pb.EntryInfo, error) {
	es := entries(out)
	if len(es) != 1 {
		return nil, connect.NewError(connect.CodeInternal, errors.New("the entry could not be read"))
	}
	return es[0], nil
}

// Stat answers the entry at path.
func (s filesystemService) Stat(ctx context.Context, req *connect.Request[pb.StatRequest]) (*connect.Response[pb.StatResponse], error) {
	out, err := s.run(ctx, req.Header(), req.Peer(), statScript, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	e, err := one(out)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.StatResponse{Entry: e}), nil
}

// maxDepth bounds a listing's depth.
const maxDepth = 64

// ListDir lists the folder at path, to depth levels (1: its entries).
func (s filesystemService) ListDir(ctx context.Context, req *connect.Request[pb.ListDirRequest]) (*connect.Response[pb.ListDirResponse], error) {
	depth := req.Msg.GetDepth()
	if depth == 0 {
		depth = 1
	}
	if depth > maxDepth {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("depth must be at most "+strconv.Itoa(maxDepth)))
	}
	t, err := s.e.rpcTarget(ctx, req.Header(), req.Peer())
	if err != nil {
		return nil, err
	}
	p, err := absPath(t.sb, req.Msg.GetPath())
	if err != nil {
		return nil, rpcError(err)
	}
	script := `set -- "$1" ` + strconv.Itoa(int(depth)) + `; ` + listScript
	out, err := s.run(ctx, req.Header(), req.Peer(), script, p)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.ListDirResponse{Entries: entries(out)}), nil
}

// MakeDir makes the folder at path and its parents; AlreadyExists when
// something is there.
func (s filesystemService) MakeDir(ctx context.Context, req *connect.Request[pb.MakeDirRequest]) (*connect.Response[pb.MakeDirResponse], error) {
	out, err := s.run(ctx, req.Header(), req.Peer(), makeDirScript, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	e, err := one(out)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.MakeDirResponse{Entry: e}), nil
}

// Move moves source to destination, making destination's folder.
func (s filesystemService) Move(ctx context.Context, req *connect.Request[pb.MoveRequest]) (*connect.Response[pb.MoveResponse], error) {
	out, err := s.run(ctx, req.Header(), req.Peer(), moveScript, req.Msg.GetSource(), req.Msg.GetDestination())
	if err != nil {
		return nil, err
	}
	e, err := one(out)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.MoveResponse{Entry: e}), nil
}

// Remove removes the file or folder (with what it holds) at path.
func (s filesystemService) Remove(ctx context.Context, req *connect.Request[pb.RemoveRequest]) (*connect.Response[pb.RemoveResponse], error) {
	if _, err := s.run(ctx, req.Header(), req.Peer(), removeScript, req.Msg.GetPath()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.RemoveResponse{}), nil
}

// eventTypes are E2B's event types of the provider's file events.
var eventTypes = map[provider.FileEventKind]pb.EventType{
	provider.FileCreate: pb.EventType_EVENT_TYPE_CREATE, provider.FileWrite: pb.EventType_EVENT_TYPE_WRITE,
	provider.FileRemove: pb.EventType_EVENT_TYPE_REMOVE, provider.FileRename: pb.EventType_EVENT_TYPE_RENAME,
	provider.FileChmod: pb.EventType_EVENT_TYPE_CHMOD,
}

// WatchDir streams the changes in the folder at path: a start event once
// the watch is armed, then one event per change, its name relative to
// the folder.
func (s filesystemService) WatchDir(ctx context.Context, req *connect.Request[pb.WatchDirRequest], stream *connect.ServerStream[pb.WatchDirResponse]) error {
	if req.Msg.GetIncludeEntry() || req.Msg.GetAllowNetworkMounts() {
		return connect.NewError(connect.CodeUnimplemented, errors.New("include_entry and allow_network_mounts are not supported"))
	}
	t, err := s.e.rpcTarget(ctx, req.Header(), req.Peer())
	if err != nil {
		return err
	}
	w, err := capability[provider.FileWatcher](s.e, t, "watching folders")
	if err != nil {
		return err
	}
	p, err := absPath(t.sb, req.Msg.GetPath())
	if err != nil {
		return rpcError(err)
	}
	err = w.WatchFiles(ctx, t.sb.ID, p, req.Msg.GetRecursive(), func(ev provider.FileEvent) error {
		if ev.Kind == provider.FileWatchStart {
			return stream.Send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Start{Start: &pb.WatchDirResponse_StartEvent{}}})
		}
		kind, ok := eventTypes[ev.Kind]
		if !ok {
			return nil
		}
		return stream.Send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Filesystem{Filesystem: &pb.FilesystemEvent{Name: ev.Path, Type: kind}}})
	})
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		err = nil // the caller stopped watching
	}
	return rpcError(err)
}
