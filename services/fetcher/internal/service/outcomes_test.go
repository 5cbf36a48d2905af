package service

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/testwait"
)

// recorder stands in for the NATS publish: the publish itself is tested against a real
// server in the itest package; here only the batcher's decisions are under test.
type recorder struct {
	mu    sync.Mutex
	sizes []int
}

func (r *recorder) publish(_ time.Time, _ string, msg *nats.Msg) error {
	outs, _, err := crawlmsg.DecodeOutcomes(msg.Data)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.sizes = append(r.sizes, len(outs))
	r.mu.Unlock()
	return nil
}

func (r *recorder) published() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.sizes...)
}

// A batch goes out when it is full, or when every task in hand has its outcome (no other
// outcome can join it before one of them is acked), not only when its linger runs out.
func TestOutcomeBatcherFlushes(t *testing.T) {
	out := func(lease string) *crawlmsg.Outcome {
		return &crawlmsg.Outcome{Host: "a", Lease: lease, Kind: crawlmsg.OutcomeFetched}
	}
	later := time.Now().Add(time.Minute)
	tests := []struct {
		name string
		max  int
		// tasks in hand, of which the first `add` report an outcome; the rest end
		// without one (a malformed task, say) only after the check that nothing went out.
		tasks, add int
		want       []int // batch sizes published
	}{
		{"full batch", 3, 5, 3, []int{3}},
		{"every task in hand parked", 64, 4, 4, []int{4}},
		{"the last task ends without an outcome", 64, 4, 3, []int{3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var rec recorder
			b := newOutcomeBatcher(tc.max, time.Hour, rec.publish, nil)
			for range tc.tasks {
				b.begin()
			}
			var wg sync.WaitGroup
			for i := range tc.add {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := b.add(out(string(rune('a'+i))), nil, later); err != nil {
						t.Error(err)
					}
					b.end()
				}()
			}
			if tc.add < tc.tasks && tc.add < tc.max {
				testwait.Eventually(t, 10*time.Second, "outcomes gathered", func() bool { return b.waiting() == tc.add })
				if got := rec.published(); len(got) != 0 {
					t.Fatalf("published %v while a task in hand had no outcome yet", got)
				}
				for range tc.tasks - tc.add {
					b.end()
				}
			}
			all := make(chan struct{})
			go func() { wg.Wait(); close(all) }()
			select {
			case <-all:
			case <-time.After(10 * time.Second):
				t.Fatalf("outcomes still waiting (published %v): the batch waits for its linger", rec.published())
			}
			if got := rec.published(); len(got) != len(tc.want) || got[0] != tc.want[0] {
				t.Fatalf("published batches %v, want %v", got, tc.want)
			}
		})
	}
}

// Closing publishes what is waiting at once, and every later outcome alone.
func TestOutcomeBatcherClose(t *testing.T) {
	var rec recorder
	b := newOutcomeBatcher(64, time.Hour, rec.publish, nil)
	b.begin()
	b.begin() // a second task in hand, still at its request
	done := make(chan error, 1)
	go func() {
		done <- b.add(&crawlmsg.Outcome{Host: "a", Lease: "l1", Kind: crawlmsg.OutcomeFetched}, nil, time.Now().Add(time.Minute))
	}()
	testwait.Eventually(t, 10*time.Second, "outcome gathered", func() bool { return b.waiting() == 1 })
	b.close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := b.add(&crawlmsg.Outcome{Host: "a", Lease: "l2", Kind: crawlmsg.OutcomeFetched}, nil, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got := rec.published(); len(got) != 2 || got[0] != 1 || got[1] != 1 {
		t.Fatalf("published batches %v, want [1 1]", got)
	}
}

// A batch's pages are stored before its outcomes, in the same flush, and each outcome
// carries what its page's fate says; a failure to store the pages fails the batch, whose
// outcomes then never go.
func TestOutcomeBatcherStoresPagesFirst(t *testing.T) {
	for _, tc := range []struct {
		name     string
		pagesErr error
		want     []string
	}{
		{"stored", nil, []string{"pages [a c]", "outcomes [a:7 b:0 c:7]"}},
		{"not stored", errors.New("nats: timeout"), []string{"pages [a c]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu    sync.Mutex
				order []string
			)
			publish := func(_ time.Time, _ string, msg *nats.Msg) error {
				outs, _, err := crawlmsg.DecodeOutcomes(msg.Data)
				if err != nil {
					return err
				}
				var got []string
				for _, o := range outs {
					got = append(got, fmt.Sprintf("%s:%d", o.Lease, o.PageSeq))
				}
				mu.Lock()
				order = append(order, fmt.Sprintf("outcomes %v", got))
				mu.Unlock()
				return nil
			}
			pages := func(_ time.Time, outs []crawlmsg.Outcome, pages []*pageDelivery) error {
				var got []string
				for i, p := range pages {
					if p != nil {
						got = append(got, outs[i].Lease)
						outs[i].PageSeq = 7
					}
				}
				mu.Lock()
				order = append(order, fmt.Sprintf("pages %v", got))
				mu.Unlock()
				return tc.pagesErr
			}
			b := newOutcomeBatcher(3, time.Hour, publish, pages)
			for range 3 {
				b.begin() // three tasks in hand: the batch goes when it is full
			}
			var wg sync.WaitGroup
			errs := make([]error, 3)
			for i, lease := range []string{"a", "b", "c"} {
				var pd *pageDelivery
				if lease != "b" {
					pd = &pageDelivery{msg: nats.NewMsg("crawl.pages")}
				}
				wg.Go(func() {
					errs[i] = b.add(&crawlmsg.Outcome{Host: "h", Lease: lease, Kind: crawlmsg.OutcomeFetched}, pd, time.Now().Add(time.Minute))
				})
				// In order, so that the batch's order is known.
				testwait.Eventually(t, 10*time.Second, "outcome gathered", func() bool { return b.waiting() == i+1 || i == 2 })
			}
			wg.Wait()
			for _, err := range errs {
				if !errors.Is(err, tc.pagesErr) {
					t.Errorf("add: %v, want %v", err, tc.pagesErr)
				}
			}
			if fmt.Sprint(order) != fmt.Sprint(tc.want) {
				t.Errorf("published %v, want %v", order, tc.want)
			}
		})
	}
}
