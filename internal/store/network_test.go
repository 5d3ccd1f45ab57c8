package store_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/store"
)

// TestSecretsAreTheTenants: a secret is stored sealed, replaced under its
// name, listed by name, and neither seen nor deleted by another tenant.
func TestSecretsAreTheTenants(t *testing.T) {
	t.Parallel()
	b := setup(t)
	by := domain.Caller{KeyID: "key_a"}
	sec, created, err := b.st.PutSecret(b.ctx, "acme", "gh", []byte("sealed-1"), by)
	if err != nil || !created || sec.Name != "gh" || sec.UpdatedBy != "key_a" {
		t.Fatalf("PutSecret = %+v, %v, %v", sec, created, err)
	}
	if _, created, err = b.st.PutSecret(b.ctx, "acme", "gh", []byte("sealed-2"), by); err != nil || created {
		t.Fatalf("PutSecret again = created %v, %v; want a replacement", created, err)
	}
	if got, _ := b.st.SealedSecrets(b.ctx, "acme", []string{"gh", "none"}); string(got["gh"]) != "sealed-2" || len(got) != 1 {
		t.Fatalf("SealedSecrets = %q", got)
	}
	if got, _ := b.st.SealedSecrets(b.ctx, "other", []string{"gh"}); len(got) != 0 {
		t.Fatalf("another tenant's SealedSecrets = %q", got)
	}
	if list, _ := b.st.Secrets(b.ctx, "other"); len(list) != 0 {
		t.Fatalf("another tenant lists %v", list)
	}
	if err := b.st.DeleteSecret(b.ctx, "other", "gh"); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("another tenant's delete: %v", err)
	}
	if list, _ := b.st.Secrets(b.ctx, "acme"); len(list) != 1 || list[0].Name != "gh" {
		t.Fatalf("Secrets = %+v", list)
	}
	if err := b.st.DeleteSecret(b.ctx, "acme", "gh"); err != nil {
		t.Fatal(err)
	}
	if err := b.st.DeleteSecret(b.ctx, "acme", "gh"); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("a second delete: %v", err)
	}
}

func allowlistParams(t *testing.T) func(*domain.CreateParams) {
	t.Helper()
	params, err := json.Marshal(map[string]any{"network": "allowlist", "allow": []string{"a.test"}, "policies": []string{"py"},
		"credentials": []map[string]string{{"host": "api.test", "header": "Authorization", "secret": "gh"}}})
	if err != nil {
		t.Fatal(err)
	}
	return func(p *domain.CreateParams) { p.Params = params }
}

// TestSandboxNetworkEdits: a sandbox's rules are its create's until an
// edit replaces them; an edit keeps what it does not name, is in the
// activity, is announced, and is refused for an ended sandbox or another
// tenant's.
func TestSandboxNetworkEdits(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	b := setup(t, store.WithAnnouncer(rec))
	sb := b.create(t, allowlistParams(t))
	n, err := b.st.SandboxNetwork(b.ctx, "acme", sb.ID)
	if err != nil || n.Mode != "allowlist" || !slices.Equal(n.Allow, []string{"a.test"}) || n.Edited ||
		len(n.Credentials) != 1 || !slices.Equal(n.Policies, []string{"py"}) || len(n.Attached) != 0 {
		t.Fatalf("SandboxNetwork = %+v, %v", n, err)
	}
	if _, _, err := b.st.PutNetworkPolicy(b.ctx, domain.NetworkPolicy{Tenant: "acme", Name: "py", Allow: []string{"pypi.org"}}, domain.Caller{}); err != nil {
		t.Fatal(err)
	}
	if n, _ = b.st.SandboxNetwork(b.ctx, "acme", sb.ID); len(n.Attached) != 1 || !slices.Equal(n.Attached[0].Allow, []string{"pypi.org"}) {
		t.Fatalf("attached = %+v", n.Attached)
	}
	if !slices.ContainsFunc(rec.all(), func(c domain.Change) bool { return c.ID == sb.ID && c.State == domain.NetworkChanged }) {
		t.Error("the policy's creation was not announced to the sandbox it is attached to")
	}

	n, err = b.st.SetSandboxNetwork(b.ctx, domain.NetworkEdit{Tenant: "acme", SandboxID: sb.ID, Allow: []string{"b.test"}, By: domain.Caller{KeyID: "key_a"}})
	if err != nil || !n.Edited || !slices.Equal(n.Allow, []string{"b.test"}) || len(n.Credentials) != 1 || !slices.Equal(n.Policies, []string{"py"}) {
		t.Fatalf("an allow-only edit = %+v, %v; want the credentials and policies kept", n, err)
	}
	n, err = b.st.SetSandboxNetwork(b.ctx, domain.NetworkEdit{Tenant: "acme", SandboxID: sb.ID, Allow: []string{},
		Credentials: []domain.NetworkCredential{}, Policies: []string{}})
	if err != nil || len(n.Allow) != 0 || len(n.Credentials) != 0 || len(n.Policies) != 0 || len(n.Attached) != 0 {
		t.Fatalf("an edit clearing all = %+v, %v", n, err)
	}
	acts, err := b.st.SandboxActivity(b.ctx, sb.ID, 0, 10)
	if err == nil && len(acts) == 2 && acts[1].Target != `{"allow":[],"credentials":[],"policies":[]}` {
		t.Errorf("the clearing edit's record = %s", acts[1].Target)
	}
	if err != nil || len(acts) != 2 || acts[0].Kind != domain.ActivityNetworkUpdate || acts[0].Target != `{"allow":["b.test"]}` || acts[0].Caller.KeyID != "key_a" {
		t.Fatalf("activity = %+v, %v", acts, err)
	}
	if _, err := b.st.SetSandboxNetwork(b.ctx, domain.NetworkEdit{Tenant: "other", SandboxID: sb.ID, Allow: []string{"x.test"}}); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("another tenant's edit: %v", err)
	}
	if _, _, err := b.st.EndSandbox(b.ctx, "acme", sb.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.SetSandboxNetwork(b.ctx, domain.NetworkEdit{Tenant: "acme", SandboxID: sb.ID, Allow: []string{"x.test"}}); domain.ErrorCode(err) != domain.CodeStateConflict {
		t.Errorf("an edit of an ended sandbox: %v; want STATE_CONFLICT", err)
	}
}

// TestConcurrentEditsKeepTheLatestCredentials: an edit that keeps the
// credentials, racing one that replaces them, never brings back the ones
// replaced.
func TestConcurrentEditsKeepTheLatestCredentials(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sb := b.create(t, allowlistParams(t))
	for i := range 20 {
		want := []domain.NetworkCredential{{Host: "api.test", Header: "Authorization", Secret: fmt.Sprintf("gh-%d", i)}}
		var wg sync.WaitGroup
		wg.Go(func() {
			if _, err := b.st.SetSandboxNetwork(b.ctx, domain.NetworkEdit{Tenant: "acme", SandboxID: sb.ID, Allow: []string{"a.test"}, Credentials: want}); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() {
			if _, err := b.st.SetSandboxNetwork(b.ctx, domain.NetworkEdit{Tenant: "acme", SandboxID: sb.ID, Allow: []string{"b.test"}}); err != nil {
				t.Error(err)
			}
		})
		wg.Wait()
		n, err := b.st.SandboxNetwork(b.ctx, "acme", sb.ID)
		if err != nil || !slices.Equal(n.Credentials, want) {
			t.Fatalf("round %d: credentials %+v, %v; want %+v", i, n.Credentials, err, want)
		}
	}
}
