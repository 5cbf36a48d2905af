package itest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// deadPages counts the dead letters of crawl.pages.
func (s *stack) deadPages() uint64 {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	st, err := s.js.Stream(ctx, topology.StreamDead)
	if err != nil {
		s.t.Fatal(err)
	}
	subject := topology.DeadSubject(topology.StreamPages)
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		s.t.Fatal(err)
	}
	return info.State.Subjects[subject]
}

// A page a tap gave up on is parked in CRAWL_DEAD and leaves crawl.pages once every
// consumer settled it; its body must outlive the sweep window, or replaying the letter
// would find it gone. A body of the same age whose page every consumer acked is swept.
func TestSweepKeepsBodiesOfParkedPages(t *testing.T) {
	t.Parallel()
	s := newStack(t, map[string]string{"TRAWL_CONTENT_DEDUP": "false", "TRAWL_LEASE_TTL": "2s"})
	s.run()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A tap, so that the parser leaves the bodies to the sweeper; it gives up on one page
	// through the consume loop's own dead letters.
	tapCons, err := s.js.CreateConsumer(ctx, topology.StreamPages, jetstream.ConsumerConfig{
		Durable: "archiver", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 5 * time.Second, MaxDeliver: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	const parked, acked = "page:http://site.test/parked", "page:http://site.test/acked"
	obs, err := s.js.ObjectStore(ctx, topology.BodiesBucket)
	if err != nil {
		t.Fatal(err)
	}
	// The replay goes to the tap (the consumer that gave the page up), which reads the body.
	replayed := make(chan error, 1)
	tapCtx, stopTap := context.WithCancel(ctx)
	tapDone := make(chan error, 1)
	go func() {
		tapDone <- natsx.ConsumeEach(tapCtx, tapCons, natsx.ConsumeOptions{Dead: &natsx.DeadLetter{JS: s.js, After: 100}},
			func(ctx context.Context, m jetstream.Msg) error {
				switch {
				case m.Headers().Get(nats.MsgIdHdr) != parked:
				case m.Headers().Get(natsx.ReplayOfHdr) == "":
					return natsx.Permanent(errors.New("archiver: cannot write this page"))
				default:
					_, err := obs.GetInfo(ctx, parked)
					select {
					case replayed <- err:
					default: // a redelivery of the replay
					}
				}
				return nil
			})
	}()
	defer func() {
		stopTap()
		if err := <-tapDone; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("tap: %v", err)
		}
	}()

	tail := strings.Repeat("<p>padding</p>", 1000)
	s.publishByRef("http://site.test/parked", "<title>Parked</title>"+tail, true)
	s.publishByRef("http://site.test/acked", "<title>Acked</title>"+tail, true)
	s.waitSettled()
	testwait.EventuallyState(t, waitFor, "the parked page out of crawl.pages and in CRAWL_DEAD", func() (bool, string) {
		pages, dead := s.streamMsgs(topology.StreamPages), s.deadPages()
		return pages == 0 && dead == 1, fmt.Sprintf("%d pages kept, %d dead pages", pages, dead)
	})
	dead, err := s.js.Stream(ctx, topology.StreamDead)
	if err != nil {
		t.Fatal(err)
	}
	letter, err := dead.GetLastMsgForSubject(ctx, topology.DeadSubject(topology.StreamPages))
	if err != nil {
		t.Fatal(err)
	}
	// A letter that is no page pins nothing and does not stop the sweep.
	junk := nats.NewMsg(topology.DeadSubject(topology.StreamPages))
	junk.Header.Set(natsx.DeadStreamHdr, topology.StreamPages)
	junk.Data = []byte("not a page")
	s.publish(junk)

	testwait.EventuallyState(t, 90*time.Second, "the acked page's body swept", func() (bool, string) {
		n, err := s.svc.SweepBodies(ctx)
		if err != nil {
			return false, err.Error()
		}
		return !s.bodyStored(acked), fmt.Sprintf("still stored (swept %d)", n)
	})
	if !s.bodyStored(parked) {
		t.Fatal("the body of a page parked in CRAWL_DEAD was swept")
	}

	// Replayed, the page is read again with its body.
	if err := natsx.Replay(ctx, s.js, letter.Sequence); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-replayed:
		if err != nil {
			t.Errorf("the replayed page's body: %v", err)
		}
	case <-time.After(waitFor):
		t.Error("the tap was not sent the replayed page")
	}
}
