// Package storetest gives each test its own freshly migrated Postgres
// database, cloned from a template so that tests stay parallel and fast.
//
// The server comes from TETHER_TEST_DATABASE_URL, else DATABASE_URL, else
// postgres://postgres@127.0.0.1:5432/postgres; its user is the role Tether
// runs as in the tests. Databases are made through TETHER_TEST_ADMIN_URL
// (a role that may create databases; default: the server URL itself) and
// owned by that role. `make test` starts a throwaway server and sets both:
// Tether's role `tether` is not a superuser, as in production. The template
// is migrated once per set of migrations and owner (its name carries their
// hash) under an advisory lock, so parallel test binaries share it safely.
package storetest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherhq/tether/internal/store"
	"github.com/tetherhq/tether/internal/store/notify"
	"github.com/tetherhq/tether/migrations"
)

// ServerURL returns the URL of the Postgres server tests use.
func ServerURL() string {
	for _, name := range []string{"TETHER_TEST_DATABASE_URL", "DATABASE_URL"} {
		if v := os.Getenv(name); v != "" {
			return v
		}
	}
	return "postgres://postgres@127.0.0.1:5432/postgres"
}

// AdminURL returns the URL of a role that may create databases on the
// server ServerURL names.
func AdminURL() string {
	if v := os.Getenv("TETHER_TEST_ADMIN_URL"); v != "" {
		return v
	}
	return ServerURL()
}

// owner returns the user of serverURL: the role that owns test databases.
func owner(serverURL string) (string, error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", err
	}
	if u.User == nil || u.User.Username() == "" {
		return "", fmt.Errorf("the database URL names no user")
	}
	return u.User.Username(), nil
}

// withDatabase returns serverURL pointing at database name.
func withDatabase(serverURL, name string) (string, error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

func migrationsHash(owner string) (string, error) {
	h := sha256.New()
	_, _ = fmt.Fprintf(h, "owner %s\n", owner)
	err := fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.FS, path)
		if err != nil {
			return err
		}
		_, _ = fmt.Fprintf(h, "%s\n%d\n", path, len(b))
		h.Write(b)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))[:16], err
}

// ensureTemplate creates and migrates the template database once.
func ensureTemplate(ctx context.Context, admin *pgx.Conn, serverURL, owner string) (string, error) {
	hash, err := migrationsHash(owner)
	if err != nil {
		return "", err
	}
	name := "tether_tpl_" + hash
	// Serialise template creation across test processes.
	if _, err := admin.Exec(ctx, `SELECT pg_advisory_lock(74657468)`); err != nil {
		return "", err
	}
	defer func() { _, _ = admin.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(74657468)`) }()
	var exists bool
	if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}
	building := name + "_building"
	if _, err := admin.Exec(ctx, `DROP DATABASE IF EXISTS `+building); err != nil {
		return "", err
	}
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+building+` OWNER `+pgx.Identifier{owner}.Sanitize()); err != nil {
		return "", err
	}
	dbURL, err := withDatabase(serverURL, building)
	if err != nil {
		return "", err
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return "", err
	}
	_, err = store.New(pool).Migrate(ctx)
	pool.Close()
	if err != nil {
		return "", err
	}
	// Renaming last means a template that exists is complete.
	if _, err := admin.Exec(ctx, `ALTER DATABASE `+building+` RENAME TO `+name); err != nil {
		return "", err
	}
	return name, nil
}

// NewURL creates a fresh migrated database for the test, dropped when the
// test ends, and returns its URL.
func NewURL(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	serverURL, adminURL := ServerURL(), AdminURL()
	role, err := owner(serverURL)
	if err != nil {
		t.Fatalf("storetest: %s: %v", redact(serverURL), err)
	}
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatalf("storetest: cannot reach Postgres at %s (run `make test`, or set TETHER_TEST_DATABASE_URL): %v", redact(adminURL), err)
	}
	defer func() { _ = admin.Close(context.Background()) }()
	tpl, err := ensureTemplate(ctx, admin, serverURL, role)
	if err != nil {
		t.Fatalf("storetest: template database: %v", err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "tether_test_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+name+` TEMPLATE `+tpl+` OWNER `+pgx.Identifier{role}.Sanitize()); err != nil {
		t.Fatalf("storetest: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, adminURL)
		if err != nil {
			t.Logf("storetest: drop %s: %v", name, err)
			return
		}
		defer func() { _ = conn.Close(ctx) }()
		if _, err := conn.Exec(ctx, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`); err != nil {
			t.Logf("storetest: drop %s: %v", name, err)
		}
	})
	dbURL, err := withDatabase(serverURL, name)
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	return dbURL
}

// AsAdmin returns dbURL (a database NewURL made) for the admin role, the
// one AdminURL names.
func AsAdmin(t testing.TB, dbURL string) string {
	t.Helper()
	db, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	u, err := withDatabase(AdminURL(), db.Path[1:])
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	return u
}

// NewPool returns a pool on a fresh migrated database, closed when the test
// ends.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), NewURL(t))
	if err != nil {
		t.Fatalf("storetest: connect: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// New returns a Store on a fresh migrated database.
func New(t testing.TB, opts ...store.Option) *store.Store {
	t.Helper()
	return store.New(NewPool(t), opts...)
}

// NewNotified returns a Store on a fresh migrated database that announces
// its changes through a running notify.Notifier, stopped when the test ends.
func NewNotified(t testing.TB, log *slog.Logger, opts ...store.Option) (*store.Store, *notify.Notifier) {
	t.Helper()
	pool := NewPool(t)
	n := notify.New(pool, log)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { n.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	return store.New(pool, append(opts, store.WithAnnouncer(n))...), n
}

// Clock is a manual clock for store.WithClock, safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock stopped at the current wall-clock time.
func NewClock() *Clock { return &Clock{now: time.Now().UTC().Truncate(time.Microsecond)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// Link is a pool on a database whose connection to Postgres a test can cut
// and restore, as a network fault cuts one replica off: while cut, every
// connection it held is closed and every new one is refused, so the
// store's calls fail with sandbox.ErrUnavailable.
type Link struct {
	Pool *pgxpool.Pool
	cut  atomic.Bool
}

// NewLink returns a Link to the database dbURL (see NewURL), closed when
// the test ends.
func NewLink(t testing.TB, dbURL string) *Link {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatalf("storetest: parse %s: %v", redact(dbURL), err)
	}
	l := &Link{}
	var d net.Dialer
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if l.cut.Load() {
			return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
		}
		return d.DialContext(ctx, network, addr)
	}
	if l.Pool, err = pgxpool.NewWithConfig(context.Background(), cfg); err != nil {
		t.Fatalf("storetest: connect: %v", err)
	}
	t.Cleanup(l.Pool.Close)
	return l
}

// Cut cuts the link: connections held are closed, new ones refused.
func (l *Link) Cut() {
	l.cut.Store(true)
	l.Pool.Reset()
}

// Restore lets the link connect again.
func (l *Link) Restore() { l.cut.Store(false) }

// IsCut reports whether the link is cut.
func (l *Link) IsCut() bool { return l.cut.Load() }
