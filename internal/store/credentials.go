package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/internal/credential"
)

// credentials holds the installation's credential.Tagger once read: its
// key comes from the cluster secret, which never changes.
type credentials struct {
	mu     sync.Mutex
	tagger *credential.Tagger
}

// Credentials returns the Tagger that makes and checks this
// installation's API keys and preview tokens (see package credential).
// The first call reads the cluster secret (making it if there is none);
// later calls cost nothing.
func (s *Store) Credentials(ctx context.Context) (*credential.Tagger, error) {
	s.creds.mu.Lock()
	defer s.creds.mu.Unlock()
	if s.creds.tagger != nil {
		return s.creds.tagger, nil
	}
	secret, err := s.ClusterSecret(ctx)
	if err != nil {
		return nil, err
	}
	s.creds.tagger = credential.NewTagger(secret)
	return s.creds.tagger, nil
}

// newSecret makes a tagged secret with the prefix.
func (s *Store) newSecret(ctx context.Context, prefix string) (string, error) {
	t, err := s.Credentials(ctx)
	if err != nil {
		return "", err
	}
	return t.New(prefix), nil
}

// LiveKeyHashes returns the first 8 bytes of the SHA-256 of every API key
// that is not revoked, as big-endian numbers: enough to tell a live key
// from a guess (one chance in 2^64 per live key) without holding the
// hashes. It reads the whole table; the API calls it at most once a
// minute, and only while an address is over its failure budget.
func (s *Store) LiveKeyHashes(ctx context.Context) ([]uint64, error) {
	rows, err := s.pool.Query(ctx, `SELECT substring(key_hash FROM 1 FOR 8) FROM api_keys WHERE revoked_at IS NULL`)
	if err != nil {
		return nil, wrap("live key hashes", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (uint64, error) {
		var b []byte
		if err := r.Scan(&b); err != nil {
			return 0, err
		}
		if len(b) < 8 {
			return 0, fmt.Errorf("a key hash of %d bytes", len(b))
		}
		return binary.BigEndian.Uint64(b), nil
	})
	if err != nil {
		return nil, wrap("live key hashes", err)
	}
	return out, nil
}
