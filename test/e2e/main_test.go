package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"
)

// The test binary doubles as an owner process (startOwner): with
// ownerURLVar set it heartbeats an owner's lease until it is killed,
// instead of running the tests.
const (
	ownerURLVar  = "TETHER_E2E_OWNER_URL"
	ownerKeyVar  = "TETHER_E2E_OWNER_KEY"
	ownerNameVar = "TETHER_E2E_OWNER_NAME"
	ownerTTLVar  = "TETHER_E2E_OWNER_TTL"
)

func TestMain(m *testing.M) {
	if os.Getenv(ownerURLVar) != "" {
		os.Exit(heartbeat())
	}
	os.Exit(m.Run())
}

// heartbeat renews the owner's lease every sixth of it, for ever, the way
// an agent process holds its sandboxes. It prints "heartbeat" after its
// first renewal that Tether accepted.
func heartbeat() int {
	ttl, err := time.ParseDuration(os.Getenv(ownerTTLVar))
	if err != nil || ttl < time.Second {
		fmt.Fprintln(os.Stderr, "owner: bad", ownerTTLVar, err)
		return 2
	}
	url := os.Getenv(ownerURLVar) + "/v1/owners/" + os.Getenv(ownerNameVar) + "/lease"
	body := fmt.Appendf(nil, `{"ttl_seconds":%d}`, int(ttl/time.Second))
	// A slow answer (a loaded machine) may still land within the lease.
	c := &http.Client{Timeout: ttl / 2}
	announced := false
	for {
		req, err := http.NewRequest(http.MethodPut, url, bytes.NewReader(body))
		if err != nil {
			fmt.Fprintln(os.Stderr, "owner:", err)
			return 1
		}
		req.Header.Set("Authorization", "Bearer "+os.Getenv(ownerKeyVar))
		req.Header.Set("Content-Type", "application/json")
		if resp, err := c.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK && !announced {
				fmt.Println("heartbeat")
				announced = true
			}
		}
		time.Sleep(ttl / 6)
	}
}

// startOwner starts a process (this test binary: TestMain) that
// heartbeats owner's lease until it is killed, and waits for its first
// accepted heartbeat.
func (e *env) startOwner(owner string, ttl time.Duration) *exec.Cmd {
	e.t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = []string{
		ownerURLVar + "=" + e.replica.URL(), ownerKeyVar + "=" + key,
		ownerNameVar + "=" + owner, ownerTTLVar + "=" + ttl.String(),
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	first := make(chan bool, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		first <- err == nil && line == "heartbeat\n"
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case ok := <-first:
		if !ok {
			e.t.Fatal("the owner process ended before its first heartbeat")
		}
	case <-time.After(30 * time.Second):
		e.t.Fatal("no heartbeat from the owner process")
	}
	return cmd
}
