package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// api is a small client of the Tether under test.
type api struct {
	wire *wire
}

func newAPI(base, key string, conns int) *api {
	return &api{wire: newWire(strings.TrimPrefix(base, "http://"), key, conns)}
}

type sandboxView struct {
	ID       string `json:"id"`
	State    string `json:"state"`
	Released bool   `json:"released"`
}

// do sends a request and decodes a JSON response into out (if not nil).
func (a *api) do(ctx context.Context, method, path string, body []byte, out any) (int, error) {
	var code int
	err := a.wire.do(ctx, method, path, body, func(status int, payload []byte) error {
		code = status
		if out != nil && status < 300 {
			return json.Unmarshal(payload, out)
		}
		return nil
	})
	return code, err
}

var createBody = []byte(`{"provider":"sim"}`)

func (a *api) create(ctx context.Context) (sandboxView, error) {
	return a.createWith(ctx, createBody)
}

// createWith requests a sandbox with the given create body.
func (a *api) createWith(ctx context.Context, body []byte) (sandboxView, error) {
	var sb sandboxView
	code, err := a.do(ctx, http.MethodPost, "/v1/sandboxes", body, &sb)
	if err == nil && code != http.StatusAccepted {
		err = fmt.Errorf("create: status %d", code)
	}
	return sb, err
}

func (a *api) waitReady(ctx context.Context, id string) error {
	var sb sandboxView
	code, err := a.do(ctx, http.MethodGet, "/v1/sandboxes/"+id+"?wait=30s", nil, &sb)
	if err == nil && (code != http.StatusOK || sb.State != "ready") {
		err = fmt.Errorf("wait: status %d state %s", code, sb.State)
	}
	return err
}

// closedLoop runs workers that each call fn back to back for d, and returns
// the completed calls per second and their number. Failed calls are
// counted apart.
func closedLoop(ctx context.Context, workers int, d time.Duration, fn func(ctx context.Context) error) (rate float64, done, failures int64) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				if err := fn(ctx); err != nil {
					if ctx.Err() == nil {
						failed.Add(1)
					}
					continue
				}
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	return float64(ok.Load()) / time.Since(start).Seconds(), ok.Load(), failed.Load()
}

// latencies is a sample of durations.
type latencies []time.Duration

func (l latencies) percentile(p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	i := int(p / 100 * float64(len(s)-1))
	return s[i]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// requestToReady measures, one request at a time, the time from sending the
// create to seeing the sandbox ready.
func (a *api) requestToReady(ctx context.Context, n int) (latencies, error) {
	out := make(latencies, 0, n)
	for range n {
		start := time.Now()
		sb, err := a.create(ctx)
		if err != nil {
			return out, err
		}
		if err := a.waitReady(ctx, sb.ID); err != nil {
			return out, err
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}

// openLoop sends creates at a fixed rate for d, whatever the responses do,
// and measures each request's time to ready.
func (a *api) openLoop(ctx context.Context, rate float64, d time.Duration) (latencies, int64) {
	interval := time.Duration(float64(time.Second) / rate)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	var (
		mu     sync.Mutex
		out    latencies
		failed atomic.Int64
		wg     sync.WaitGroup
	)
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		<-ticker.C
		wg.Go(func() {
			start := time.Now()
			sb, err := a.create(ctx)
			if err == nil {
				err = a.waitReady(ctx, sb.ID)
			}
			if err != nil {
				failed.Add(1)
				return
			}
			mu.Lock()
			out = append(out, time.Since(start))
			mu.Unlock()
		})
	}
	wg.Wait()
	return out, failed.Load()
}

// lifecycle runs one full lifecycle: create, ready, delete, released.
func (a *api) lifecycle(ctx context.Context) error {
	sb, err := a.create(ctx)
	if err != nil {
		return err
	}
	if err := a.waitReady(ctx, sb.ID); err != nil {
		return err
	}
	return a.end(ctx, sb.ID)
}

// end deletes the sandbox and waits until its provider released it.
func (a *api) end(ctx context.Context, id string) error {
	var ended sandboxView
	if _, err := a.do(ctx, http.MethodDelete, "/v1/sandboxes/"+id, nil, &ended); err != nil {
		return err
	}
	if ended.Released {
		return nil
	}
	return a.waitReleased(ctx, id)
}

// waitReleased waits (up to 30 s) until the ended sandbox id is released.
func (a *api) waitReleased(ctx context.Context, id string) error {
	var sb sandboxView
	if _, err := a.do(ctx, http.MethodGet, "/v1/sandboxes/"+id+"?wait=30s&until=released", nil, &sb); err != nil {
		return err
	}
	if !sb.Released {
		return fmt.Errorf("sandbox %s not released", id)
	}
	return nil
}

var execPrintfBody = []byte(`{"command":"printf ok","timeout_seconds":60}`)

// execPrintf runs `printf ok` in the sandbox through Tether.
func (a *api) execPrintf(ctx context.Context, id string) error {
	var res struct {
		ExitCode int    `json:"exit_code"`
		Output   string `json:"output"`
	}
	code, err := a.do(ctx, http.MethodPost, "/v1/sandboxes/"+id+"/exec", execPrintfBody, &res)
	if err == nil && (code != http.StatusOK || res.ExitCode != 0 || res.Output != "ok") {
		err = fmt.Errorf("status %d, exit code %d, output %q", code, res.ExitCode, res.Output)
	}
	if err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	return nil
}
