package itest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// When an OS crash at TRAWL_FSYNC=1s brings NATS back older than Redis, a frontier message
// the scheduler applied may be gone from NATS while Redis kept its URLs; dedup's memo
// recovery then publishes it again under its first Nats-Msg-Id. The scheduler knows the
// copy for one it applied, so its URLs are queued, and requested, once.
func TestFrontierRepublishedAfterNATSLostItIsAppliedOnce(t *testing.T) {
	t.Parallel()
	// File streams, as a deployed NATS keeps them: the roll back restores what was stored.
	s := startStack(t, redisproc.Options{}, map[string]string{"TRAWL_STREAM_MEMORY": "false"})
	ctx, cancel := context.WithCancel(testwait.Context(t))
	defer cancel()
	fx := s.runFetcher(ctx, fetched200)
	shard0 := map[string]string{"shard": "0"}

	var b crawlmsg.FrontierBatch
	for i := range 3 {
		b.URLs = append(b.URLs, crawlmsg.Discovered{URL: fmt.Sprintf("http://r%d.example/", i)})
	}
	data, err := crawlmsg.Marshal(&b)
	if err != nil {
		t.Fatal(err)
	}
	id := topology.FrontierID("CRAWL_DISCOVERED:7:abc", 0) // as dedup names it
	publish := func() (bool, string) {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		defer pcancel()
		if _, err := s.js.Publish(pctx, topology.FrontierSubject(0), data, jetstream.WithMsgID(id)); err != nil {
			return false, err.Error()
		}
		return true, "published"
	}
	requests := func() (map[string]int, int) {
		got, most := map[string]int{}, 0
		for _, tk := range fx.snapshot() {
			got[tk.URL]++
			most = max(most, got[tk.URL])
		}
		return got, most
	}

	// NATS as it was before the message: the roll back takes its copy and its id.
	rollBack := s.ns.SnapshotT(t)
	testwait.EventuallyState(t, 30*time.Second, "the frontier message published", publish)
	testwait.EventuallyState(t, 30*time.Second, "its URLs fetched once", func() (bool, string) {
		got, _ := requests()
		st := s.stats()
		return len(got) == 3 && st.Fetched == 3, fmt.Sprintf("requests %v; frontier %+v", got, st)
	})
	// Applied and acknowledged, the ack in NATS's store: nothing of it is in flight.
	natsembed.WaitSettled(t, s.js, topology.StreamFrontier, topology.SchedulerFrontierConsumer(0), 30*time.Second)
	natsembed.WaitSettled(t, s.js, topology.StreamFetch, topology.ConsumerFetcher, 30*time.Second)
	natsembed.WaitSettled(t, s.js, topology.StreamFetched, topology.SchedulerFetchedConsumer(0), 30*time.Second)

	rollBack()
	testwait.EventuallyState(t, 30*time.Second, "the copy published again, as dedup's recovery does", publish)
	testwait.EventuallyState(t, 30*time.Second, "the copy skipped as applied, or its URLs queued again", func() (bool, string) {
		dups := s.metric("trawl_scheduler_frontier_duplicates_total", shard0)
		got, most := requests()
		st := s.stats()
		return dups == 1 || most > 1 || st.Queued > 0, fmt.Sprintf("%v duplicates; requests %v; frontier %+v", dups, got, st)
	})
	natsembed.WaitSettled(t, s.js, topology.StreamFrontier, topology.SchedulerFrontierConsumer(0), 30*time.Second)
	if got, most := requests(); most > 1 {
		t.Fatalf("requests %v: the copy's URLs were queued again", got)
	}
	if st := s.stats(); st.Queued != 0 || st.InFlight != 0 || st.Fetched != 3 {
		t.Fatalf("frontier %+v after the copy, want nothing queued or in flight and 3 fetched", st)
	}
	if dups := s.metric("trawl_scheduler_frontier_duplicates_total", shard0); dups != 1 {
		t.Fatalf("%v frontier duplicates counted, want 1 (the copy)", dups)
	}
}
