package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/provider/local"
)

// TestLocalWorkspaceConfig: LOCAL_WORKSPACE_MB takes 0 (no limit) or a size
// from the provider's minimum up to LOCAL_MAX_WORKSPACE_MB; anything else
// is refused at start, naming the variable.
func TestLocalWorkspaceConfig(t *testing.T) {
	t.Parallel()
	cases := []struct {
		env     map[string]string
		def     int // the Local.Limits.WorkspaceMB wanted, if no error
		maxMB   int
		wantErr string
	}{
		{env: map[string]string{}, def: 10240, maxMB: 102400},
		{env: map[string]string{"LOCAL_WORKSPACE_MB": "0"}, def: 0, maxMB: 102400},
		{env: map[string]string{"LOCAL_WORKSPACE_MB": "10240"}, def: 10240, maxMB: 102400},
		{env: map[string]string{"LOCAL_WORKSPACE_MB": "512", "LOCAL_MAX_WORKSPACE_MB": "512"}, def: 512, maxMB: 512},
		{env: map[string]string{"LOCAL_WORKSPACE_MB": "-1"}, wantErr: `LOCAL_WORKSPACE_MB="-1": want 0 or a positive integer`},
		{env: map[string]string{"LOCAL_WORKSPACE_MB": "1G"}, wantErr: `LOCAL_WORKSPACE_MB="1G"`},
		{env: map[string]string{"LOCAL_WORKSPACE_MB": "8"}, wantErr: "LOCAL_WORKSPACE_MB (8) must be 0 (no limit) or at least 16"},
		{env: map[string]string{"LOCAL_WORKSPACE_MB": "2048", "LOCAL_MAX_WORKSPACE_MB": "1024"}, wantErr: "LOCAL_WORKSPACE_MB (2048) must not exceed LOCAL_MAX_WORKSPACE_MB (1024)"},
		{env: map[string]string{"LOCAL_MAX_WORKSPACE_MB": "0"}, wantErr: `LOCAL_MAX_WORKSPACE_MB="0": want a positive integer`},
	}
	for _, tc := range cases {
		cfg, err := loadConfig(func(name string) string {
			if name == "DATABASE_URL" {
				return "postgres://x@127.0.0.1/tether"
			}
			return tc.env[name]
		})
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: loadConfig = %v; want an error saying %q", tc.env, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("%v: loadConfig = %v", tc.env, err)
		case cfg.Local.Limits.WorkspaceMB != tc.def || cfg.Local.MaxLimits.WorkspaceMB != tc.maxMB:
			t.Errorf("%v: workspace limit %d, maximum %d; want %d, %d", tc.env, cfg.Local.Limits.WorkspaceMB, cfg.Local.MaxLimits.WorkspaceMB, tc.def, tc.maxMB)
		}
	}
}

// TestLocalImagesConfig: LOCAL_IMAGES registers name=path pairs, folders
// and tarballs, for the local provider; every bad pair is reported at
// start, all at once, naming the variable.
func TestLocalImagesConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	folder, tarball, other := filepath.Join(dir, "bookworm"), filepath.Join(dir, "tools.tar.gz"), filepath.Join(dir, "notes.txt")
	if err := os.Mkdir(folder, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{tarball, other} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	load := func(spec string) (Config, error) {
		return loadConfig(func(name string) string {
			switch name {
			case "DATABASE_URL":
				return "postgres://x@127.0.0.1/tether"
			case "LOCAL_IMAGES":
				return spec
			}
			return ""
		})
	}
	cfg, err := load(" bookworm=" + folder + " , tools.v2=" + tarball + ",")
	if err != nil {
		t.Fatalf("loadConfig: %v", err)
	}
	want := []local.Image{{Name: "bookworm", Path: folder}, {Name: "tools.v2", Path: tarball}}
	if !reflect.DeepEqual(cfg.Local.Images, want) {
		t.Errorf("Local.Images = %+v, want %+v", cfg.Local.Images, want)
	}
	if got := []string{want[0].Source(), want[1].Source()}; got[0] != local.ImageFolder || got[1] != local.ImageTarball {
		t.Errorf("sources = %v, want folder, tarball", got)
	}

	_, err = load("Bad=" + folder + ",rel=images/x,gone=" + filepath.Join(dir, "missing") + ",txt=" + other +
		",bookworm=" + folder + ",bookworm=" + folder + ",nopath,empty=")
	if err == nil {
		t.Fatal("loadConfig accepted bad LOCAL_IMAGES")
	}
	for _, want := range []string{
		`image name "Bad" must match`,
		`image "rel": path "images/x" must be absolute`,
		`image "gone": stat ` + filepath.Join(dir, "missing"),
		`image "txt": ` + other + ` must be a folder, or a file ending in .tar, .tar.gz or .tgz`,
		`image "bookworm" is named twice`,
		`"nopath": want name=/absolute/path`,
		`"empty=": want name=/absolute/path`,
	} {
		if !strings.Contains(err.Error(), "LOCAL_IMAGES: "+want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
}
