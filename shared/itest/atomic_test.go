package itest

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/shared/durability"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/topology"
)

// batchIDHeader is the header JetStream keeps on each message of an atomic batch.
const batchIDHeader = "Nats-Batch-Id"

// storedBatches reads every message of stream and returns, by Nats-Msg-Id, the atomic
// batch each was stored in ("" if none), failing on an id stored twice.
func storedBatches(t *testing.T, js jetstream.JetStream, stream string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("%s message %d: %v", stream, seq, err)
		}
		id := m.Header.Get(nats.MsgIdHdr)
		if _, dup := got[id]; dup {
			t.Fatalf("%s holds message %q twice", stream, id)
		}
		got[id] = m.Header.Get(batchIDHeader)
	}
	return got
}

// atomicStream makes a stream as topology.Streams does (atomic publish allowed) on a
// server that syncs every write, and connects as the services do at TRAWL_FSYNC=always.
func atomicStream(t *testing.T, cfg jetstream.StreamConfig) jetstream.JetStream {
	t.Helper()
	js := connectTo(t, natsembed.Options{StoreDir: t.TempDir(), MaxStore: natsembed.TestMaxStore, Durability: durability.Always})
	cfg.AllowAtomicPublish, cfg.Duplicates = true, time.Minute
	if _, err := js.CreateStream(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	return natsx.AtomicBatches(js)
}

// PublishBatch sends the messages of one stream as one atomic batch (one fsync at
// TRAWL_FSYNC=always) when they are natsx.AtomicMin or more, and fewer one at a time, and a
// republish whose batch holds ids already stored — which the server refuses whole — still
// ends with every message stored exactly once.
func TestPublishBatchIsAtomicAndRepublishable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		n      int
		atomic bool
	}{
		{"fewer than AtomicMin, one at a time", natsx.AtomicMin - 1, false},
		{"AtomicMin, one batch", natsx.AtomicMin, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			js := atomicStream(t, jetstream.StreamConfig{Name: "AB", Subjects: []string{topology.SubjectDocs}})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			batch := func(from, to int) []*nats.Msg {
				var msgs []*nats.Msg
				for i := from; i < to; i++ {
					msgs = append(msgs, natsx.NewMsg(topology.SubjectDocs, fmt.Sprintf("doc-%d", i), []byte("d")))
				}
				return msgs
			}
			if err := natsx.PublishBatch(ctx, js, batch(0, tc.n)); err != nil {
				t.Fatal(err)
			}
			got := storedBatches(t, js, "AB")
			if len(got) != tc.n {
				t.Fatalf("stored %d messages, want %d", len(got), tc.n)
			}
			switch {
			case tc.atomic && got["doc-0"] == "":
				t.Fatalf("doc-0 was not stored in an atomic batch (no %s header)", batchIDHeader)
			case !tc.atomic && got["doc-0"] != "":
				t.Fatalf("doc-0 of %d messages was stored in atomic batch %q, want them one at a time", tc.n, got["doc-0"])
			}
			for id, b := range got {
				if b != got["doc-0"] {
					t.Fatalf("%s in batch %q, doc-0 in %q: one PublishBatch call made several batches", id, b, got["doc-0"])
				}
			}

			// A retry after a lost ack: half the ids are stored already.
			half := tc.n / 2
			if err := natsx.PublishBatch(ctx, js, batch(half, half+tc.n)); err != nil {
				t.Fatalf("republish of a batch holding stored ids: %v", err)
			}
			got = storedBatches(t, js, "AB")
			for i := range half + tc.n {
				if _, ok := got[fmt.Sprintf("doc-%d", i)]; !ok {
					t.Errorf("doc-%d not stored", i)
				}
			}
			if len(got) != half+tc.n {
				t.Fatalf("stored %d messages, want %d", len(got), half+tc.n)
			}
		})
	}
}

// Streams made by an older release, without atomic publish, get it at the next start.
func TestEnsureAllowsAtomicPublishOnOlderStreams(t *testing.T) {
	t.Parallel()
	js := connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	o := topology.DefaultOptions(2)
	for _, sc := range topology.Streams(o) {
		sc.AllowAtomicPublish = false
		if _, err := js.CreateStream(ctx, sc); err != nil {
			t.Fatalf("stream %s as an older release made it: %v", sc.Name, err)
		}
	}
	tm := topology.StageTimings{AckWait: 30 * time.Second, FetchAckWait: 150 * time.Second, MaxDeliver: 20}
	if err := natsx.Ensure(ctx, js, o, tm, slog.Default()); err != nil {
		t.Fatal(err)
	}
	for _, sc := range topology.Streams(o) {
		s, err := js.Stream(ctx, sc.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !s.CachedInfo().Config.AllowAtomicPublish {
			t.Errorf("stream %s takes no atomic batches after Ensure", sc.Name)
		}
	}
}
