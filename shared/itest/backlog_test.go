package itest

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/shared/backlog"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// TestBacklogRead: each stage's backlog read from a real JetStream, before the topology
// exists (every stream and consumer named missing, nothing counted as 0) and after
// messages wait in it: a work queue's size, a consumer's undelivered plus unacked
// messages, the outcomes summed over the shards' consumers, and the archiver, which runs
// only when enabled, named missing.
func TestBacklogRead(t *testing.T) {
	t.Parallel()
	js := connect(t)
	ctx := testwait.Context(t)
	const shards = 2
	all := backlog.Request{
		Streams: []string{topology.StreamFetched, topology.StreamPages},
		Stages:  []string{backlog.Dedup, backlog.Scheduler, backlog.Fetch, backlog.Parser, backlog.Archiver, backlog.Outcomes},
		Shards:  shards,
	}
	missing := func(r backlog.Reading) []string {
		var out []string
		for _, m := range r.Missing {
			out = append(out, m.Stream+"/"+m.Consumer)
			if !errors.Is(m.Err, jetstream.ErrStreamNotFound) && !errors.Is(m.Err, jetstream.ErrConsumerNotFound) {
				t.Errorf("missing %s/%s: %v, want a not-found error", m.Stream, m.Consumer, m.Err)
			}
		}
		return out
	}

	t.Run("no topology", func(t *testing.T) {
		r, err := backlog.Read(ctx, js, all)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Backlog) != 0 || len(r.Streams) != 0 {
			t.Errorf("backlog %v, streams %v; want nothing read", r.Backlog, r.Streams)
		}
		want := []string{"CRAWL_FETCHED/", "CRAWL_PAGES/", "CRAWL_DISCOVERED/", "CRAWL_FRONTIER/", "CRAWL_FETCH/",
			"CRAWL_PAGES/parser", "CRAWL_PAGES/archiver", "CRAWL_FETCHED/scheduler-0-outcomes", "CRAWL_FETCHED/scheduler-1-outcomes"}
		if got := missing(r); !reflect.DeepEqual(got, want) {
			t.Errorf("missing %v\nwant    %v", got, want)
		}
		if _, err := backlog.Stage(ctx, js, backlog.Parser, shards); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("Stage(parser) = %v, want stream not found", err)
		}
	})

	o := topology.DefaultOptions(shards)
	o.Storage = jetstream.MemoryStorage
	if err := natsx.Ensure(ctx, js, o, topology.StageTimings{AckWait: 5 * time.Second, FetchAckWait: 10 * time.Second, MaxDeliver: -1}, slog.Default()); err != nil {
		t.Fatal(err)
	}
	publish := func(subject string, n int) {
		t.Helper()
		for i := range n {
			if _, err := js.Publish(ctx, subject, fmt.Appendf(nil, "%d", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(topology.SubjectDiscovered, 3)
	publish(topology.FrontierSubject(1), 2)
	publish(topology.SubjectPages, 5)
	publish(topology.FetchedSubject(0), 4)
	publish(topology.FetchedSubject(1), 1)
	// Two pages delivered to the parser and not acked: still its backlog.
	natsembed.Hold(t, js, topology.StreamPages, topology.ConsumerParser, 2, 10*time.Second)

	t.Run("backlogs", func(t *testing.T) {
		want := backlog.Backlog{backlog.Dedup: 3, backlog.Scheduler: 2, backlog.Fetch: 0, backlog.Parser: 5, backlog.Outcomes: 5}
		var (
			r   backlog.Reading
			err error
		)
		testwait.Eventually(t, 10*time.Second, "the backlogs of every stage", func() bool {
			r, err = backlog.Read(ctx, js, all)
			return err == nil && reflect.DeepEqual(r.Backlog, want)
		})
		if got := missing(r); !reflect.DeepEqual(got, []string{"CRAWL_PAGES/archiver"}) {
			t.Errorf("missing %v, want only the archiver's consumer", got)
		}
		if st := r.Streams[topology.StreamPages]; st.Msgs != 5 || st.LastSeq != 5 {
			t.Errorf("pages stream %+v", st)
		}
		if st := r.Streams[topology.StreamDiscovered]; st.Msgs != 3 {
			t.Errorf("a stage's stream is in Streams too: %+v", st)
		}
	})

	for _, tc := range []struct {
		stage string
		want  uint64
	}{{backlog.Dedup, 3}, {backlog.Scheduler, 2}, {backlog.Parser, 5}, {backlog.Outcomes, 5}} {
		t.Run("stage "+tc.stage, func(t *testing.T) {
			if n, err := backlog.Stage(ctx, js, tc.stage, shards); err != nil || n != tc.want {
				t.Errorf("Stage = %d, %v; want %d", n, err, tc.want)
			}
		})
	}
	t.Run("missing consumer", func(t *testing.T) {
		if _, err := backlog.Stage(ctx, js, backlog.Archiver, shards); !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Errorf("Stage(archiver) = %v, want consumer not found", err)
		}
		if n, err := backlog.Pending(ctx, js, topology.StreamDiscovered, topology.ConsumerDedup); err != nil || n != 3 {
			t.Errorf("Pending(dedup) = %d, %v; want 3", n, err)
		}
	})
	t.Run("unknown stage", func(t *testing.T) {
		if _, err := backlog.Read(ctx, js, backlog.Request{Stages: []string{"indexer"}}); err == nil {
			t.Error("an unknown stage was read")
		}
	})
}
