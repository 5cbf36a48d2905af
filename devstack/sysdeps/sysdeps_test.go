package sysdeps

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEnsure(t *testing.T) {
	// A directory holding a fake "present" binary and nothing else: apt-get is not on PATH,
	// so a missing program can only be reported, never installed.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "present"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	doc := filepath.Join(dir, "doc.html")
	if err := os.WriteFile(doc, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		progs   []Program
		wantErr []string // substrings; none = success
	}{
		{name: "nothing asked", progs: nil},
		{name: "present", progs: []Program{{Binary: "present", Package: "pkg-present"}}},
		{name: "a file for a package with no program", progs: []Program{{File: doc, Package: "pkg-present"}}},
		{name: "a file where the binary is off PATH", progs: []Program{{Binary: "sbin-only", File: doc, Package: "pkg-present"}}},
		{
			name:    "a missing file names its package once",
			progs:   []Program{{File: filepath.Join(dir, "a"), Package: "pkg-doc"}, {File: filepath.Join(dir, "b"), Package: "pkg-doc"}},
			wantErr: []string{"apt-get install -y pkg-doc`"},
		},
		{
			name:    "missing names every package",
			progs:   []Program{Known["redis-server"], {Binary: "present", Package: "pkg-present"}, Known["chromium"]},
			wantErr: []string{"apt-get install -y redis-server chromium"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Ensure(context.Background(), nil, tc.progs...)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Ensure: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrNotInstalled) {
				t.Fatalf("error %v is not ErrNotInstalled", err)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
			if strings.Contains(err.Error(), "pkg-present") {
				t.Errorf("error %q names a package that is installed", err)
			}
		})
	}
}

func TestLookup(t *testing.T) {
	for _, name := range []string{"redis-server", "chromium", "nginx"} {
		if p, err := Lookup(name); err != nil || p.Binary != name {
			t.Errorf("Lookup(%q) = %+v, %v", name, p, err)
		}
	}
	if _, err := Lookup("no-such-program"); err == nil {
		t.Error("Lookup of an unknown program succeeded")
	}
}
