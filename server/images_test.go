package server

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/provider/local"
	"github.com/tetherhq/tether/internal/store/storetest"
	"github.com/tetherhq/tether/test/harness"
)

// TestLocalImages: LOCAL_IMAGES reaches the local provider: GET
// /v1/providers lists the image, a create naming an unknown one is 400
// naming the known ones, and a sandbox of the image runs commands in it.
func TestLocalImages(t *testing.T) {
	t.Parallel()
	state := harness.ReachableTempDir(t)
	s := start(t, map[string]string{
		"DATABASE_URL": storetest.NewURL(t), "BOOTSTRAP_API_KEY": "k",
		"PROVIDERS": "local", "LOCAL_STATE_DIR": state, "LOCAL_WORKSPACE_MB": "0",
		"LOCAL_IMAGES": "tiny=" + harness.BuildImage(t),
	})
	code, body := s.do(t, http.MethodGet, "/v1/providers", "k", "")
	items, _ := body["items"].([]any)
	if code != http.StatusOK || len(items) != 1 {
		t.Fatalf("/v1/providers = %d %v", code, body)
	}
	p, _ := items[0].(map[string]any)
	if want := []any{map[string]any{"name": "tiny", "source": "folder"}}; p["available"] != true || !reflect.DeepEqual(p["images"], want) {
		t.Fatalf("local provider = %v, want available with images %v", p, want)
	}

	code, body = s.do(t, http.MethodPost, "/v1/sandboxes", "k", `{"params":{"image":"bookworm"}}`)
	if code != http.StatusBadRequest || body["code"] != "INVALID_REQUEST" || !strings.Contains(fmt.Sprint(body["detail"]), "known: tiny") {
		t.Errorf("create with an unknown image = %d %v, want 400 INVALID_REQUEST naming tiny", code, body)
	}
	if code, body = s.do(t, http.MethodGet, "/v1/sandboxes", "k", ""); code != http.StatusOK || len(body["items"].([]any)) != 0 {
		t.Errorf("sandboxes after a refused create = %d %v, want none", code, body)
	}

	code, sb := s.do(t, http.MethodPost, "/v1/sandboxes", "k", `{"params":{"image":"tiny"}}`)
	if code != http.StatusAccepted {
		t.Fatalf("create = %d %v", code, sb)
	}
	id, _ := sb["id"].(string)
	t.Cleanup(func() { // whatever the test's end, the sandbox goes
		if p, err := local.New(state); err == nil {
			_ = p.Destroy(context.Background(), id)
		}
	})
	if code, sb = s.do(t, http.MethodGet, "/v1/sandboxes/"+id+"?wait=30s", "k", ""); code != http.StatusOK || sb["state"] != "ready" {
		t.Fatalf("wait for ready = %d %v", code, sb)
	}
	code, res := s.do(t, http.MethodPost, "/v1/sandboxes/"+id+"/exec", "k", `{"command":"read -r m </etc/image-marker; echo \"$m\"; [ -e /usr ] || echo no-usr"}`)
	if code != http.StatusOK || res["output"] != harness.ImageMarker+"\nno-usr\n" {
		t.Errorf("exec = %d %v, want the image's marker and no /usr", code, res)
	}
	if code, sb = s.do(t, http.MethodDelete, "/v1/sandboxes/"+id, "k", ""); code != http.StatusAccepted {
		t.Fatalf("delete = %d %v", code, sb)
	}
	for deadline := time.Now().Add(30 * time.Second); sb["released"] != true; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the sandbox was not released: %v", sb)
		}
		_, sb = s.do(t, http.MethodGet, "/v1/sandboxes/"+id, "k", "")
	}
}
