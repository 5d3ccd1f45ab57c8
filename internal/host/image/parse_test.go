package image

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// TestParse: LOCAL_IMAGES' name=path pairs, blanks and empty entries
// dropped, each image's source told by its path (a folder, a tarball).
func TestParse(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	folder, tarball := filepath.Join(dir, "bookworm"), filepath.Join(dir, "tools.tar.gz")
	if err := os.Mkdir(folder, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tarball, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Parse(" bookworm=" + folder + " , tools.v2=" + tarball + ",")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := []Image{{Name: "bookworm", Path: folder}, {Name: "tools.v2", Path: tarball}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse = %+v, want %+v", got, want)
	}
	if s := []string{want[0].Source(), want[1].Source()}; s[0] != Folder || s[1] != Tarball {
		t.Errorf("sources = %v, want folder, tarball", s)
	}
	if got, err := Parse(""); err != nil || len(got) != 0 {
		t.Errorf("Parse(\"\") = %v, %v; want none", got, err)
	}
}
