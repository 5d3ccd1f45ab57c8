package chaos

import (
	"fmt"
	"net/http"
	"sync"
	"time"
)

// e2bOutcomes counts the storm's E2B calls by call and answer.
type e2bOutcomes struct {
	mu sync.Mutex
	n  map[string]int
}

func (o *e2bOutcomes) add(call string, code int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n == nil {
		o.n = map[string]int{}
	}
	o.n[fmt.Sprintf("%s-%d", call, code)]++
}

// checkE2B logs what the storm's E2B calls got, and fails a storm in which
// none of its E2B creates succeeded: the invariants would not have
// covered the face.
func (h *chaos) checkE2B() {
	h.e2b.mu.Lock()
	defer h.e2b.mu.Unlock()
	h.t.Logf("chaos e2b: %v", h.e2b.n)
	if h.e2b.n["create-201"] == 0 {
		h.t.Error("no E2B create succeeded in the storm")
	}
}

// e2bCall is one call of an E2B SDK program in TestChaos's storm, through
// Tether's E2B face (/e2b, docs/e2b.md): a create of the template base,
// some bound to a live owner (by the metadata key tether.owner or the
// Tether-Owner header), some with a timeout of their own, the rest with
// E2B's 300 s; or a kill, a connect (which resumes a paused sandbox) or a
// pause of a sandbox of the storm's, made through either face. A create
// answers once its sandbox is ready, so the replica kills, the Postgres
// crash and the client's timeout cut some mid-way: the invariants cover
// what they leave, and a 500 from the face fails the run as one from /v1
// does.
func (h *chaos) e2bCall() {
	switch n := h.intn(20); {
	case n < 10:
		h.e2bCreate()
	case n < 15:
		if id := h.randomCreated(); id != "" {
			code, _ := h.call(http.MethodDelete, "/e2b/sandboxes/"+id, nil)
			h.e2b.add("kill", code)
		}
	case n < 18:
		if id := h.randomCreated(); id != "" {
			code, _ := h.call(http.MethodPost, "/e2b/sandboxes/"+id+"/connect", map[string]any{"timeout": 5 + h.intn(15)})
			h.e2b.add("connect", code)
		}
	default:
		if id := h.randomIn("ready"); id != "" {
			code, _ := h.call(http.MethodPost, "/e2b/sandboxes/"+id+"/pause", nil)
			h.e2b.add("pause", code)
			if code == http.StatusNoContent {
				h.transitions.Add(1)
			}
		}
	}
}

// e2bCreate creates a sandbox through the E2B face and records it as the
// storm's /v1 creates are recorded (its owner's lease included).
func (h *chaos) e2bCreate() {
	metadata := map[string]string{"chaos": "yes", "face": "e2b"}
	body := map[string]any{"templateID": "base", "metadata": metadata}
	if h.intn(3) != 0 {
		body["timeout"] = 3 + h.intn(15)
	}
	var header http.Header
	owner := ""
	if h.intn(2) == 0 {
		owner = h.randomOwner()
	}
	if owner != "" {
		if h.intn(2) == 0 {
			metadata["tether.owner"] = owner
		} else {
			header = http.Header{"Tether-Owner": {owner}}
		}
	}
	asV1 := map[string]any{}
	if owner != "" {
		asV1["owner"] = owner
	}
	sent := time.Now()
	code, sb := h.callWith(http.MethodPost, "/e2b/v2/sandboxes", body, header)
	h.e2b.add("create", code)
	if code != http.StatusCreated {
		// It may have made a sandbox (answered once ready, it may have
		// ended meanwhile): that create may have started a lease.
		h.leases.unanswered(owner, sent, time.Now())
		return
	}
	id, _ := sb["sandboxID"].(string)
	if id == "" {
		h.t.Errorf("an E2B create answered 201 without a sandboxID: %v", sb)
		return
	}
	h.accept(id, asV1, sent)
}
