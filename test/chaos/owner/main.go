// Command owner is a chaos run's owner process: a real client that makes
// one sandbox naming itself as its owner and then heartbeats its lease
// until it is killed, the way an agent process holds its sandboxes.
//
//	owner -urls http://a,http://b -key KEY -name NAME -ttl 4s
//
// It prints a line of what it sent and what came of it, for the harness
// to judge the owner bound from every lapse (times in RFC 3339 with
// nanoseconds):
//
//	created SANDBOX_ID SENT ANSWERED    a create accepted
//	create-unanswered SENT GAVE_UP      a create no replica answered
//	granted SENT ANSWERED EXPIRES       a heartbeat's answer
//	unanswered SENT GAVE_UP             a heartbeat no replica answered
//
// Each
// heartbeat (every sixth of the lease) tries the replicas in turn,
// starting from a random one, each with a short timeout, as a client
// behind a load balancer does: a replica that cannot reach Postgres, or
// hangs, costs it a moment, not its lease. It never exits by itself.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	urls := flag.String("urls", "", "comma-separated replica base URLs")
	key := flag.String("key", "", "API key")
	name := flag.String("name", "", "owner name")
	ttl := flag.Duration("ttl", 4*time.Second, "lease length")
	flag.Parse()
	if err := run(strings.Split(*urls, ","), *key, *name, *ttl); err != nil {
		fmt.Fprintln(os.Stderr, "owner:", err)
		os.Exit(1)
	}
}

func run(urls []string, key, name string, ttl time.Duration) error {
	c := &http.Client{Timeout: ttl / 15}
	send := func(method, path string, body any) (int, map[string]any) {
		b, _ := json.Marshal(body)
		start := rand.IntN(len(urls))
		for i := range urls {
			u := urls[(start+i)%len(urls)]
			req, err := http.NewRequestWithContext(context.Background(), method, u+path, bytes.NewReader(b))
			if err != nil {
				continue
			}
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", "application/json")
			resp, err := c.Do(req)
			if err != nil {
				continue
			}
			var out map[string]any
			_ = json.NewDecoder(resp.Body).Decode(&out)
			_ = resp.Body.Close()
			if resp.StatusCode < 500 {
				return resp.StatusCode, out
			}
		}
		return 0, nil
	}
	secs := int(ttl / time.Second)
	body := map[string]any{"owner": name, "provider": "sim", "ttl_seconds": 600}
	stamp := func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
	for {
		sent := time.Now()
		code, out := send(http.MethodPost, "/v1/sandboxes", body)
		if code == http.StatusAccepted || code == http.StatusOK {
			fmt.Printf("created %v %s %s\n", out["id"], stamp(sent), stamp(time.Now()))
			break
		}
		if code == 0 {
			fmt.Printf("create-unanswered %s %s\n", stamp(sent), stamp(time.Now()))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// A create retried after a timeout may have made a second sandbox of
	// this owner: it is the owner's all the same, and checked alike.
	for {
		time.Sleep(ttl / 6)
		sent := time.Now()
		code, out := send(http.MethodPut, "/v1/owners/"+name+"/lease", map[string]any{"ttl_seconds": secs})
		switch code {
		case http.StatusOK:
			fmt.Printf("granted %s %s %v\n", stamp(sent), stamp(time.Now()), out["expires_at"])
		case 0:
			fmt.Printf("unanswered %s %s\n", stamp(sent), stamp(time.Now()))
		}
	}
}
