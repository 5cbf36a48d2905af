package natsembed

import (
	"os"
	"testing"

	"github.com/trawl/trawl/devstack/storecopy"
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
	if err := storecopy.Copy(s.opts.StoreDir, snap); err != nil {
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
		if err := storecopy.Copy(snap, s.opts.StoreDir); err != nil {
			t.Fatalf("natsembed: roll back: %v", err)
		}
		if err := s.Restart(); err != nil {
			t.Fatalf("natsembed: roll back: %v", err)
		}
	}
}
