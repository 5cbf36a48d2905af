package natsembed

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// SnapshotT stops the server, copies its store aside (into t.TempDir) and starts it again.
// The returned rollBack stops it, puts the copy in place of its store and starts it again:
// the server then holds exactly what it held at the snapshot, its streams, their
// sequences and its consumers' state, as a server whose machine crashed comes back without
// the writes it had not yet synced. Clients that reconnect find it at the same URL both
// times; nothing else is told. Either step fails the test on error.
func (s *Server) SnapshotT(t testing.TB) (rollBack func()) {
	t.Helper()
	snap := t.TempDir()
	s.stop()
	if err := copyStore(s.opts.StoreDir, snap); err != nil {
		t.Fatalf("natsembed: snapshot: %v", err)
	}
	if err := s.Restart(); err != nil {
		t.Fatalf("natsembed: snapshot: %v", err)
	}
	return func() {
		t.Helper()
		s.stop()
		if err := os.RemoveAll(s.opts.StoreDir); err != nil {
			t.Fatalf("natsembed: roll back: %v", err)
		}
		if err := copyStore(snap, s.opts.StoreDir); err != nil {
			t.Fatalf("natsembed: roll back: %v", err)
		}
		if err := s.Restart(); err != nil {
			t.Fatalf("natsembed: roll back: %v", err)
		}
	}
}

// copyStore copies the store directory tree src to dst, which it creates.
func copyStore(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("store file %s is not a regular file", path)
		}
		return copyFile(path, to)
	})
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
