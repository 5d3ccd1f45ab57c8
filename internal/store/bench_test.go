package store_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/store"
	"github.com/tetherhq/tether/internal/store/storetest"
)

// Micro-benchmarks of the hot paths, for benchstat comparisons across
// changes (go test -run '^$' -bench . -count 10 ./internal/store).

func benchStore(b *testing.B) (*store.Store, context.Context) {
	b.Helper()
	st := storetest.New(b)
	ctx := context.Background()
	if _, err := st.RegisterAPIKey(ctx, "acme", "test", "key-acme"); err != nil {
		b.Fatal(err)
	}
	return st, ctx
}

func createParams() domain.CreateParams {
	return domain.CreateParams{Tenant: "acme", Provider: "sim", Labels: map[string]string{"team": "a"},
		TTL: time.Hour, CreateTimeout: time.Minute}
}

func BenchmarkCreateSandbox(b *testing.B) {
	st, ctx := benchStore(b)
	for b.Loop() {
		if _, _, err := st.CreateSandbox(ctx, createParams()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCreateSandboxConcurrent is creates from 16 goroutines at once,
// which share statements and commits: compare its ns/op with
// BenchmarkCreateSandbox's.
func BenchmarkCreateSandboxConcurrent(b *testing.B) {
	st, ctx := benchStore(b)
	b.SetParallelism(16 / max(1, runtime.GOMAXPROCS(0)))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, _, err := st.CreateSandbox(ctx, createParams()); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkClaimAndMarkReady is the executor's two writes per create: the
// claim (requested → creating) and the fenced result (creating → ready),
// as the executor writes it (SetReady); BenchmarkClaimAndMarkReadyWhole
// reads the whole row back (MarkReady), as the executor did before.
func BenchmarkClaimAndMarkReady(b *testing.B) {
	benchClaimAndReady(b, func(ctx context.Context, st *store.Store, c store.Claim) error {
		return st.SetReady(ctx, c.Sandbox.ID, c.Sandbox.Epoch, domain.Resource{ProviderID: "p"})
	})
}

func BenchmarkClaimAndMarkReadyWhole(b *testing.B) {
	benchClaimAndReady(b, func(ctx context.Context, st *store.Store, c store.Claim) error {
		_, err := st.MarkReady(ctx, c.Sandbox.ID, c.Sandbox.Epoch, domain.Resource{ProviderID: "p"})
		return err
	})
}

func benchClaimAndReady(b *testing.B, ready func(context.Context, *store.Store, store.Claim) error) {
	st, ctx := benchStore(b)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		if _, _, err := st.CreateSandbox(ctx, createParams()); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		claims, err := st.ClaimCreates(ctx, "sim", "", "w", 1, time.Minute, store.Share{})
		if err != nil || len(claims) != 1 {
			b.Fatalf("claim: %v", err)
		}
		if err := ready(ctx, st, claims[0]); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGetSandbox(b *testing.B) {
	st, ctx := benchStore(b)
	sb, _, err := st.CreateSandbox(ctx, createParams())
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := st.GetSandbox(ctx, "acme", sb.ID); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAuthenticate(b *testing.B) {
	st, ctx := benchStore(b)
	for b.Loop() {
		if _, err := st.Authenticate(ctx, "key-acme"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRecordActivity is what auditing adds to every exec and file
// transfer: one INSERT, after the operation.
func BenchmarkRecordActivity(b *testing.B) {
	st, ctx := benchStore(b)
	sb, _, err := st.CreateSandbox(ctx, createParams())
	if err != nil {
		b.Fatal(err)
	}
	code, n := 0, int64(5)
	a := domain.Activity{SandboxID: sb.ID, Tenant: "acme", Caller: domain.Caller{KeyID: "key_a", KeyName: "ci"},
		Kind: domain.ActivityExec, Target: "pytest -q tests/", ExitCode: &code, Bytes: &n, Duration: 40 * time.Millisecond}
	for b.Loop() {
		if err := st.RecordActivity(ctx, a); err != nil {
			b.Fatal(err)
		}
	}
}
