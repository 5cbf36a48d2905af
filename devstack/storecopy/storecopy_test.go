package storecopy

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCopy(t *testing.T) {
	src := t.TempDir()
	files := map[string]string{"a.dat": "one", "streams/S/msgs/1.blk": "two", "streams/S/obs/c/o.dat": "three"}
	for name, body := range files {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dst := filepath.Join(t.TempDir(), "copy")
	if err := Copy(src, dst); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		got, err := os.ReadFile(filepath.Join(dst, name))
		if err != nil || string(got) != body {
			t.Errorf("%s: %q, %v; want %q", name, got, err, body)
		}
	}
	t.Run("missing store", func(t *testing.T) {
		if err := Copy(filepath.Join(src, "none"), filepath.Join(t.TempDir(), "x")); err == nil {
			t.Error("a store that does not exist copied without error")
		}
	})
}
