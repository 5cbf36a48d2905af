package natsembed

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A rollback brings back the stream, its sequence and its consumer's acknowledgements as
// they were at the snapshot, and clients that reconnect find the server at the same URL.
func TestSnapshotRollBack(t *testing.T) {
	s := StartT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, js := connectJS(t, s.URL())
	defer nc.Close()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "S", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "s", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	ackNext := func() string {
		t.Helper()
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
		return string(m.Data())
	}
	if got := ackNext(); got != "kept" {
		t.Fatalf("first message %q", got)
	}

	rollBack := s.SnapshotT(t)
	if _, err := js.Publish(ctx, "s", []byte("lost")); err != nil {
		t.Fatalf("publish after the snapshot (the client reconnects): %v", err)
	}
	if got := ackNext(); got != "lost" {
		t.Fatalf("second message %q", got)
	}

	rollBack()
	info, err := js.Stream(ctx, "S")
	if err != nil {
		t.Fatalf("stream after the rollback: %v", err)
	}
	if st := info.CachedInfo().State; st.Msgs != 1 || st.LastSeq != 1 {
		t.Fatalf("after the rollback the stream holds %d messages up to %d, want 1 up to 1", st.Msgs, st.LastSeq)
	}
	ci, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ci.AckFloor.Stream != 1 {
		t.Fatalf("consumer's ack floor %d after the rollback, want 1 (the snapshot's)", ci.AckFloor.Stream)
	}
	// The sequence the server lost is given again.
	ack, err := js.Publish(ctx, "s", []byte("new"))
	if err != nil {
		t.Fatal(err)
	}
	if ack.Sequence != 2 {
		t.Fatalf("next message stored at %d, want 2", ack.Sequence)
	}
}
