package cluster

import (
	"context"
	"fmt"
	"time"
)

// maxNonces bounds the nonces remembered in this process; past it
// forwarded calls are refused until old ones expire, rather than
// remembered without bound.
const maxNonces = 1 << 20

// remember records a forwarded call's nonce, refusing one seen before. A
// nonce is kept for twice the skew: past that its call is stale anyway.
// With Nonces set it is kept in Postgres (forward_nonces), where every
// replica of the node sees it; else in this process.
func (c *Cluster) remember(ctx context.Context, nonce string, now time.Time) error {
	if len(nonce) < 16 || len(nonce) > 128 {
		return errSig
	}
	if c.Nonces != nil {
		fresh, err := c.Nonces.RememberNonce(ctx, nonce, now.Add(2*skew))
		switch {
		case err != nil:
			return fmt.Errorf("remember the nonce: %w", err)
		case !fresh:
			return errSeen
		}
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, dup := c.seen[nonce]; dup {
		return errSeen
	}
	if len(c.seen) >= maxNonces || len(c.seen)%1024 == 1023 {
		for n, until := range c.seen {
			if now.After(until) {
				delete(c.seen, n)
			}
		}
	}
	if len(c.seen) >= maxNonces {
		return errBusy
	}
	c.seen[nonce] = now.Add(2 * skew)
	return nil
}
