package e2b

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/tetherhq/tether/internal/domain"
	pb "github.com/tetherhq/tether/internal/e2b/envdpb/process"
	"github.com/tetherhq/tether/internal/e2b/envdpb/process/processconnect"
	"github.com/tetherhq/tether/provider"
)

// keepaliveEvery is how often a stream with nothing to say sends a
// keepalive event, so that no proxy between takes it for dead.
const keepaliveEvery = 20 * time.Second

// processService is process.Process. What /v1 audits goes through /v1's
// process routes, in process with the caller's key, so that it is checked
// and recorded in the sandbox's activity as a /v1 call is: a start, input
// (and closing stdin), a signal, and a terminal's resize. What /v1 does
// not record, the listing and the output's streams, is read of the
// provider's Processes capability.
type processService struct {
	e envd
}

var _ processconnect.ProcessHandler = processService{}

// processes resolves a call's sandbox and its provider's Processes.
func (s processService) processes(ctx context.Context, h http.Header, peer connect.Peer) (target, provider.Processes, error) {
	t, err := s.e.rpcTarget(ctx, h, peer)
	if err != nil {
		return t, nil, err
	}
	p, err := capability[provider.Processes](s.e, t, "processes")
	return t, p, err
}

// checkUser accepts the user a call runs as (HTTP basic, as the SDK sends
// it): none, E2B's user or root. A Tether sandbox has one user, which
// every process runs as.
func checkUser(h http.Header) error {
	a, ok := strings.CutPrefix(h.Get("Authorization"), "Basic ")
	if !ok {
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(a))
	if err != nil {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("the user is not valid base64"))
	}
	user, _, _ := strings.Cut(string(b), ":")
	switch user {
	case "", "user", "root":
		return nil
	}
	return connect.NewError(connect.CodeInvalidArgument, errors.New("user "+user+" does not exist: a Tether sandbox runs every process as its one user (user or root)"))
}

// selector is the provider's selector of a process.
func selector(sel *pb.ProcessSelector) (provider.ProcessSelector, error) {
	switch v := sel.GetSelector().(type) {
	case *pb.ProcessSelector_Pid:
		if v.Pid == 0 {
			break
		}
		return provider.ProcessSelector{PID: int(v.Pid)}, nil
	case *pb.ProcessSelector_Tag:
		if v.Tag == "" {
			break
		}
		return provider.ProcessSelector{Tag: v.Tag}, nil
	}
	return provider.ProcessSelector{}, connect.NewError(connect.CodeInvalidArgument, errors.New("name the process by pid or tag"))
}

// v1Size is /v1's TerminalSize.
type v1Size struct {
	Rows int `json:"rows"`
	Cols int `json:"cols"`
}

// v1Start is /v1's StartProcessRequest as this package sends it: E2B's
// command as argv, its program (cmd) then its args.
type v1Start struct {
	Argv  []string          `json:"argv"`
	Env   map[string]string `json:"env,omitempty"`
	Cwd   string            `json:"cwd,omitempty"`
	Tag   string            `json:"tag,omitempty"`
	Stdin bool              `json:"stdin,omitempty"`
	PTY   *v1Size           `json:"pty,omitempty"`
}

// startOf is /v1's start of an E2B start request.
func startOf(req *pb.StartRequest) (v1Start, error) {
	cfg := req.GetProcess()
	if cfg.GetCmd() == "" {
		return v1Start{}, connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is required"))
	}
	st := v1Start{
		Argv:  append([]string{cfg.GetCmd()}, cfg.GetArgs()...),
		Env:   cfg.GetEnvs(),
		Cwd:   cfg.GetCwd(),
		Tag:   req.GetTag(),
		Stdin: req.GetStdin(),
	}
	if req.Pty != nil {
		size := req.GetPty().GetSize()
		st.PTY = &v1Size{Rows: int(size.GetRows()), Cols: int(size.GetCols())}
	}
	return st, nil
}

// processPath is /v1's path of the selected process of t, with suffix
// and query q. A tag /v1 would not take names no process: NotFound.
func processPath(t target, sel provider.ProcessSelector, suffix string, q url.Values) (string, error) {
	name := strconv.Itoa(sel.PID)
	if sel.PID == 0 {
		if !domain.ValidProcessTag(sel.Tag) {
			return "", connect.NewError(connect.CodeNotFound, errors.New("no process tagged "+strconv.Quote(sel.Tag)))
		}
		name = sel.Tag
	}
	return sandboxPath(t.sb.ID, "/processes/"+url.PathEscape(name)+suffix, q), nil
}

// v1Call makes the /v1 process call method path for t, its body JSON
// (or with raw, those bytes as they are); a failure is answered as the
// Connect error processError makes of it.
func (s processService) v1Call(ctx context.Context, t target, p provider.Processes, sel provider.ProcessSelector,
	method, path string, body any, raw []byte,
) (reply, error) {
	var (
		rep reply
		err error
	)
	if raw != nil {
		var req *http.Request
		req, err = http.NewRequestWithContext(ctx, method, path, bytes.NewReader(raw))
		if err == nil {
			rep = s.e.core.do(req, t.from, t.key, "application/octet-stream")
		}
	} else {
		rep, err = s.e.core.call(ctx, t.from, t.key, method, path, body)
	}
	if err != nil {
		return rep, rpcError(err)
	}
	if !rep.ok() {
		return rep, processError(ctx, p, t, sel, rep)
	}
	return rep, nil
}

// processError is the Connect error of a /v1 process call's failure, the
// code the provider's own error had when the call went to it: a sandbox
// that is no longer ready is not running (Unavailable); a process /v1
// says is in the wrong state is not found once it has ended (E2B's
// daemon forgets ended processes, and the SDK's kill answers false for
// one not found), an invalid argument while it runs (no stdin, stdin
// closed, no terminal).
func processError(ctx context.Context, p provider.Processes, t target, sel provider.ProcessSelector, rep reply) error {
	err := fromV1(rep)
	var ae *apiError
	if !errors.As(err, &ae) {
		return rpcError(err)
	}
	switch ae.Code {
	case "SANDBOX_STATE_CONFLICT":
		return connect.NewError(connect.CodeUnavailable, errors.New(ae.Message))
	case "PROCESS_STATE_CONFLICT":
		if running(ctx, p, t.sb.ID, sel) {
			return connect.NewError(connect.CodeInvalidArgument, errors.New(ae.Message))
		}
		return connect.NewError(connect.CodeNotFound, errors.New(ae.Message))
	}
	return rpcError(err)
}

// running reports whether the selected process runs.
func running(ctx context.Context, p provider.Processes, id string, sel provider.ProcessSelector) bool {
	infos, err := p.ListProcesses(ctx, id)
	if err != nil {
		return false
	}
	for _, in := range infos {
		if in.Running && ((sel.PID != 0 && in.PID == sel.PID) || (sel.PID == 0 && in.Tag == sel.Tag)) {
			return true
		}
	}
	return false
}

// eventOf is the process event of a provider event; nil for one E2B has
// no event for (output that fell out of the window).
func eventOf(ev provider.ProcessEvent) *pb.ProcessEvent {
	switch ev.Kind {
	case provider.ProcessStart:
		return &pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: uint32(ev.PID)}}}
	case provider.ProcessStdout:
		return dataEvent(&pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stdout{Stdout: ev.Data}})
	case provider.ProcessStderr:
		return dataEvent(&pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stderr{Stderr: ev.Data}})
	case provider.ProcessPTYOutput:
		return dataEvent(&pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Pty{Pty: ev.Data}})
	case provider.ProcessEnd:
		end := &pb.ProcessEvent_EndEvent{ExitCode: -1}
		if x := ev.Exit; x != nil {
			end.ExitCode, end.Exited, end.Status = int32(x.Code), x.Exited, x.Status
		}
		return &pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: end}}
	}
	return nil
}

func dataEvent(d *pb.ProcessEvent_DataEvent) *pb.ProcessEvent {
	return &pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: d}}
}

// relay attaches to the selected process and sends its events with send,
// and a keepalive whenever the stream was quiet for keepaliveEvery; it
// returns once the process ended (nil), or the call or the sandbox did.
func relay(ctx context.Context, p provider.Processes, id string, sel provider.ProcessSelector, from provider.AttachFrom,
	send func(*pb.ProcessEvent) error,
) error {
	var mu sync.Mutex
	last := time.Now()
	locked := func(ev *pb.ProcessEvent) error {
		mu.Lock()
		defer mu.Unlock()
		last = time.Now()
		return send(ev)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { // the keepalive's ticker, ended with the relay
		t := time.NewTicker(keepaliveEvery / 4)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				mu.Lock()
				quiet := time.Since(last) >= keepaliveEvery
				mu.Unlock()
				if quiet && locked(&pb.ProcessEvent{Event: &pb.ProcessEvent_Keepalive{Keepalive: &pb.ProcessEvent_KeepAlive{}}}) != nil {
					cancel()
					return
				}
			}
		}
	})
	err := p.AttachProcess(ctx, id, sel, from, func(ev provider.ProcessEvent) error {
		if e := eventOf(ev); e != nil {
			return locked(e)
		}
		return nil
	})
	cancel()
	wg.Wait()
	return rpcError(err)
}

// Start starts a process through /v1 (POST .../processes, recorded as
// process_start) and streams its events until it ends: its start (pid)
// first, its output from its start on (the provider keeps it from the
// start, so none is lost between the start and the attach), its end. The
// process belongs to the sandbox: a caller that goes away leaves it
// running.
func (s processService) Start(ctx context.Context, req *connect.Request[pb.StartRequest], stream *connect.ServerStream[pb.StartResponse]) error {
	if err := checkUser(req.Header()); err != nil {
		return err
	}
	st, err := startOf(req.Msg)
	if err != nil {
		return err
	}
	t, p, err := s.processes(ctx, req.Header(), req.Peer())
	if err != nil {
		return err
	}
	rep, err := s.v1Call(ctx, t, p, provider.ProcessSelector{}, http.MethodPost, sandboxPath(t.sb.ID, "/processes", nil), st, nil)
	if err != nil {
		return err
	}
	var started struct {
		PID int `json:"pid"`
	}
	if err := rep.decode(&started); err != nil {
		return rpcError(err)
	}
	return relay(ctx, p, t.sb.ID, provider.ProcessSelector{PID: started.PID}, provider.AttachStart, func(ev *pb.ProcessEvent) error {
		return stream.Send(&pb.StartResponse{Event: ev})
	})
}

// Connect streams a running process's events from now on.
func (s processService) Connect(ctx context.Context, req *connect.Request[pb.ConnectRequest], stream *connect.ServerStream[pb.ConnectResponse]) error {
	sel, err := selector(req.Msg.GetProcess())
	if err != nil {
		return err
	}
	t, p, err := s.processes(ctx, req.Header(), req.Peer())
	if err != nil {
		return err
	}
	return relay(ctx, p, t.sb.ID, sel, provider.AttachNow, func(ev *pb.ProcessEvent) error {
		return stream.Send(&pb.ConnectResponse{Event: ev})
	})
}

// List lists the sandbox's running processes.
func (s processService) List(ctx context.Context, req *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	t, p, err := s.processes(ctx, req.Header(), req.Peer())
	if err != nil {
		return nil, err
	}
	infos, err := p.ListProcesses(ctx, t.sb.ID)
	if err != nil {
		return nil, rpcError(err)
	}
	out := &pb.ListResponse{}
	for _, in := range infos {
		if !in.Running || len(in.Argv) == 0 {
			continue
		}
		pi := &pb.ProcessInfo{Pid: uint32(in.PID), Config: &pb.ProcessConfig{Cmd: in.Argv[0], Args: in.Argv[1:], Envs: in.Env}}
		if in.Cwd != "" {
			pi.Config.Cwd = &in.Cwd
		}
		if in.Tag != "" {
			pi.Tag = &in.Tag
		}
		out.Processes = append(out.Processes, pi)
	}
	return connect.NewResponse(out), nil
}

// input writes one input message to the selected process through /v1
// (POST .../stdin, recorded as process_input). Empty input, which /v1
// refuses and which writes nothing, goes to the provider as before.
func (s processService) input(ctx context.Context, t target, p provider.Processes, sel provider.ProcessSelector, in *pb.ProcessInput) error {
	var data []byte
	switch v := in.GetInput().(type) {
	case *pb.ProcessInput_Stdin:
		data = v.Stdin
	case *pb.ProcessInput_Pty:
		data = v.Pty
	default:
		return connect.NewError(connect.CodeInvalidArgument, errors.New("input.stdin or input.pty is required"))
	}
	if len(data) == 0 {
		return rpcError(p.WriteStdin(ctx, t.sb.ID, sel, data))
	}
	path, err := processPath(t, sel, "/stdin", nil)
	if err != nil {
		return err
	}
	_, err = s.v1Call(ctx, t, p, sel, http.MethodPost, path, nil, data)
	return err
}

// SendInput writes to a process's stdin or terminal.
func (s processService) SendInput(ctx context.Context, req *connect.Request[pb.SendInputRequest]) (*connect.Response[pb.SendInputResponse], error) {
	sel, err := selector(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	t, p, err := s.processes(ctx, req.Header(), req.Peer())
	if err != nil {
		return nil, err
	}
	if err := s.input(ctx, t, p, sel, req.Msg.GetInput()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.SendInputResponse{}), nil
}

// StreamInput writes a stream of input to the process its first message
// names, each message through /v1 as SendInput does.
func (s processService) StreamInput(ctx context.Context, stream *connect.ClientStream[pb.StreamInputRequest]) (*connect.Response[pb.StreamInputResponse], error) {
	t, p, err := s.processes(ctx, stream.RequestHeader(), stream.Peer())
	if err != nil {
		return nil, err
	}
	var sel *provider.ProcessSelector
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *pb.StreamInputRequest_Start:
			one, err := selector(ev.Start.GetProcess())
			if err != nil {
				return nil, err
			}
			sel = &one
		case *pb.StreamInputRequest_Data:
			if sel == nil {
				return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("the first message must name the process (start)"))
			}
			if err := s.input(ctx, t, p, *sel, ev.Data.GetInput()); err != nil {
				return nil, err
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&pb.StreamInputResponse{}), nil
}

// CloseStdin closes a process's stdin through /v1 (POST
// .../stdin?close=true, recorded as process_input of no bytes).
func (s processService) CloseStdin(ctx context.Context, req *connect.Request[pb.CloseStdinRequest]) (*connect.Response[pb.CloseStdinResponse], error) {
	sel, err := selector(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	t, p, err := s.processes(ctx, req.Header(), req.Peer())
	if err != nil {
		return nil, err
	}
	path, err := processPath(t, sel, "/stdin", url.Values{"close": {"true"}})
	if err != nil {
		return nil, err
	}
	if _, err := s.v1Call(ctx, t, p, sel, http.MethodPost, path, nil, nil); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.CloseStdinResponse{}), nil
}

// SendSignal sends SIGTERM or SIGKILL to a process (and its group)
// through /v1 (POST .../signal, recorded as process_signal).
func (s processService) SendSignal(ctx context.Context, req *connect.Request[pb.SendSignalRequest]) (*connect.Response[pb.SendSignalResponse], error) {
	sel, err := selector(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	sig := req.Msg.GetSignal()
	if sig != pb.Signal_SIGNAL_SIGKILL && sig != pb.Signal_SIGNAL_SIGTERM {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("signal must be SIGTERM or SIGKILL"))
	}
	t, p, err := s.processes(ctx, req.Header(), req.Peer())
	if err != nil {
		return nil, err
	}
	name := "TERM"
	if sig == pb.Signal_SIGNAL_SIGKILL {
		name = "KILL"
	}
	path, err := processPath(t, sel, "/signal", nil)
	if err != nil {
		return nil, err
	}
	if _, err := s.v1Call(ctx, t, p, sel, http.MethodPost, path, map[string]string{"signal": name}, nil); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.SendSignalResponse{}), nil
}

// Update resizes a process's terminal through /v1 (POST .../resize).
func (s processService) Update(ctx context.Context, req *connect.Request[pb.UpdateRequest]) (*connect.Response[pb.UpdateResponse], error) {
	sel, err := selector(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if req.Msg.Pty == nil {
		return connect.NewResponse(&pb.UpdateResponse{}), nil
	}
	t, p, err := s.processes(ctx, req.Header(), req.Peer())
	if err != nil {
		return nil, err
	}
	if _, err := capability[provider.PTY](s.e, t, "terminals"); err != nil {
		return nil, err
	}
	path, err := processPath(t, sel, "/resize", nil)
	if err != nil {
		return nil, err
	}
	size := req.Msg.GetPty().GetSize()
	if _, err := s.v1Call(ctx, t, p, sel, http.MethodPost, path, v1Size{Rows: int(size.GetRows()), Cols: int(size.GetCols())}, nil); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.UpdateResponse{}), nil
}
