package e2b

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"

	pb "github.com/tetherhq/tether/internal/e2b/envdpb/filesystem"
	"github.com/tetherhq/tether/provider"
)

// The polled watchers (CreateWatcher, GetWatcherEvents, RemoveWatcher)
// are the form of a folder's watch for a client that holds no stream (E2B's
// Python SDK's): a watch over the provider's FileWatcher whose events are
// kept until a poll takes them. Each runs in a goroutine the daemon's
// watcher table owns and ends: when RemoveWatcher removes it, when nobody
// polled it for watcherIdle, and on its own when its sandbox ends or it
// holds maxWatcherEvents events nobody took (the next poll says so).
const (
	maxWatchers      = 64
	maxWatcherEvents = 10000
	watcherIdle      = 5 * time.Minute
)

// errWatcherFull ends a watch whose events nobody took.
var errWatcherFull = connect.NewError(connect.CodeResourceExhausted,
	errors.New("the watcher holds "+strconv.Itoa(maxWatcherEvents)+" events nobody polled; it was removed"))

// watchers is the daemon's table of polled watchers, by id.
type watchers struct {
	mu   sync.Mutex
	byID map[string]*watcher
}

func newWatchers() *watchers { return &watchers{byID: map[string]*watcher{}} }

// watcher is one polled watch of a folder of sandboxID.
type watcher struct {
	id, sandboxID string
	cancel        context.CancelFunc
	done          chan struct{} // closed once the watch returned
	idle          *time.Timer   // removes the watcher nobody polls

	mu     sync.Mutex
	events []*pb.FilesystemEvent
	err    error // why the watch ended, once it has
}

// newWatcherID is a new watcher's id.
func newWatcherID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b) // crypto/rand does not fail
	return "wch_" + hex.EncodeToString(b)
}

// start watches path in sandboxID with fw and answers the watcher once
// the watch is armed (a change after it is seen), or the watch's error.
func (ws *watchers) start(ctx context.Context, fw provider.FileWatcher, sandboxID, path string, recursive bool) (*watcher, error) {
	ws.mu.Lock()
	n := 0
	for _, w := range ws.byID {
		if w.sandboxID == sandboxID {
			n++
		}
	}
	if n >= maxWatchers {
		ws.mu.Unlock()
		return nil, connect.NewError(connect.CodeResourceExhausted,
			errors.New("the sandbox has "+strconv.Itoa(maxWatchers)+" watchers; remove one first"))
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w := &watcher{id: newWatcherID(), sandboxID: sandboxID, cancel: cancel, done: make(chan struct{})}
	w.idle = time.AfterFunc(watcherIdle, func() { ws.remove(w.id) })
	ws.byID[w.id] = w
	ws.mu.Unlock()

	armed := make(chan struct{})
	go w.run(wctx, fw, path, recursive, armed) // ended by ws.remove (cancel), or on its own
	select {
	case <-armed:
		return w, nil
	case <-w.done:
		ws.remove(w.id)
		return nil, rpcError(w.err)
	case <-ctx.Done():
		ws.remove(w.id)
		return nil, rpcError(ctx.Err())
	}
}

// run watches until ctx ends or the watch fails, keeping its events;
// armed is closed once the watch is.
func (w *watcher) run(ctx context.Context, fw provider.FileWatcher, path string, recursive bool, armed chan struct{}) {
	defer close(w.done)
	var once sync.Once
	err := fw.WatchFiles(ctx, w.sandboxID, path, recursive, func(ev provider.FileEvent) error {
		if ev.Kind == provider.FileWatchStart {
			once.Do(func() { close(armed) })
			return nil
		}
		kind, ok := eventTypes[ev.Kind]
		if !ok {
			return nil
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.events) >= maxWatcherEvents {
			return errWatcherFull
		}
		w.events = append(w.events, &pb.FilesystemEvent{Name: ev.Path, Type: kind})
		return nil
	})
	w.mu.Lock()
	w.err = err
	w.mu.Unlock()
}

// take answers the events kept since the last take; once the watch has
// ended and its events are taken, the error it ended with.
func (w *watcher) take() ([]*pb.FilesystemEvent, error) {
	ended := false
	select {
	case <-w.done:
		ended = true
	default:
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	evs := w.events
	w.events = nil
	if len(evs) == 0 && ended {
		if w.err == nil || errors.Is(w.err, context.Canceled) {
			return nil, connect.NewError(connect.CodeUnavailable, errors.New("the watch has ended"))
		}
		return nil, rpcError(w.err)
	}
	return evs, nil
}

// lookup finds the watcher id of sandboxID and holds off its idle end.
func (ws *watchers) lookup(id, sandboxID string) (*watcher, error) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w, ok := ws.byID[id]
	if !ok || w.sandboxID != sandboxID {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("watcher "+strconv.Quote(id)+" not found"))
	}
	w.idle.Reset(watcherIdle)
	return w, nil
}

// remove ends the watcher id and waits for its watch to return; an
// unknown id is nothing to do.
func (ws *watchers) remove(id string) {
	ws.mu.Lock()
	w, ok := ws.byID[id]
	delete(ws.byID, id)
	ws.mu.Unlock()
	if !ok {
		return
	}
	w.idle.Stop()
	w.cancel()
	<-w.done
}

// CreateWatcher starts a polled watch of the folder at path.
func (s filesystemService) CreateWatcher(ctx context.Context, req *connect.Request[pb.CreateWatcherRequest]) (*connect.Response[pb.CreateWatcherResponse], error) {
	if req.Msg.GetIncludeEntry() || req.Msg.GetAllowNetworkMounts() {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("include_entry and allow_network_mounts are not supported"))
	}
	t, err := s.e.rpcTarget(ctx, req.Header(), req.Peer())
	if err != nil {
		return nil, err
	}
	fw, err := capability[provider.FileWatcher](s.e, t, "watching folders")
	if err != nil {
		return nil, err
	}
	p, err := absPath(t.sb, req.Msg.GetPath())
	if err != nil {
		return nil, rpcError(err)
	}
	w, err := s.e.watchers.start(ctx, fw, t.sb.ID, p, req.Msg.GetRecursive())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.CreateWatcherResponse{WatcherId: w.id}), nil
}

// watcherOf finds the watcher id of the call's sandbox, for a caller who
// may see that sandbox.
func (s filesystemService) watcherOf(ctx context.Context, h http.Header, peer connect.Peer, id string) (*watcher, error) {
	t, err := s.e.rpcTarget(ctx, h, peer)
	if err != nil {
		return nil, err
	}
	return s.e.watchers.lookup(id, t.sb.ID)
}

// GetWatcherEvents answers the watcher's events since the last call;
// once its watch has ended, the error it ended with, and the watcher is
// removed.
func (s filesystemService) GetWatcherEvents(ctx context.Context, req *connect.Request[pb.GetWatcherEventsRequest]) (*connect.Response[pb.GetWatcherEventsResponse], error) {
	w, err := s.watcherOf(ctx, req.Header(), req.Peer(), req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	evs, err := w.take()
	if err != nil {
		s.e.watchers.remove(w.id)
		return nil, err
	}
	return connect.NewResponse(&pb.GetWatcherEventsResponse{Events: evs}), nil
}

// RemoveWatcher ends the watcher.
func (s filesystemService) RemoveWatcher(ctx context.Context, req *connect.Request[pb.RemoveWatcherRequest]) (*connect.Response[pb.RemoveWatcherResponse], error) {
	w, err := s.watcherOf(ctx, req.Header(), req.Peer(), req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	s.e.watchers.remove(w.id)
	return connect.NewResponse(&pb.RemoveWatcherResponse{}), nil
}
