package itest

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/topology"
)

// fetchSettled waits until every task on the fetch stream is acked.
func (st *stack) fetchSettled(t *testing.T) {
	t.Helper()
	cons, err := st.js.Consumer(context.Background(), topology.StreamFetch, topology.ConsumerFetcher)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitFor)
	for {
		info, err := cons.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending == 0 && info.NumPending == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("tasks not all acked: %d unacked, %d pending", info.NumAckPending, info.NumPending)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestOutcomesBatched: a fetcher finishing many tasks stores their outcomes in far fewer
// messages than tasks, every outcome exactly once, each with its page stored, and every
// task acked.
func TestOutcomesBatched(t *testing.T) {
	st := newStack(t)
	s := newSite(t, map[string]http.HandlerFunc{"/robots.txt": text(""), "/p": html(pageHTML)})
	// A linger well above a local request's time, so batching does not hinge on this
	// machine's load; the production default is a few milliseconds.
	in := st.start(st.config(map[string]string{"TRAWL_OUTCOME_LINGER": "50ms"}), "a")
	st.warmRobots(s)
	before := st.streamState(topology.StreamFetched).LastSeq

	const tasks = 256
	var leases []string
	var msgs []*nats.Msg
	for i := range tasks {
		tk := task(s.URL + "/p?n=" + strconv.Itoa(i))
		data, err := crawlmsg.Marshal(&tk)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, natsx.NewMsg(topology.FetchSubject(0), topology.TaskID(tk.Lease), data))
		leases = append(leases, tk.Lease)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := natsx.PublishBatch(ctx, st.js, msgs); err != nil {
		t.Fatal(err)
	}
	for _, lease := range leases {
		if o := st.outcome(lease); o.Kind != crawlmsg.OutcomeFetched || o.Status != 200 {
			t.Fatalf("outcome %+v, want fetched 200", o)
		}
		if p := st.page(lease); p.Meta.Lease != lease {
			t.Fatalf("page %+v for lease %s", p.Meta, lease)
		}
	}
	st.fetchSettled(t)
	stored := st.streamState(topology.StreamFetched).LastSeq - before
	if stored*4 > tasks {
		t.Errorf("%d outcome messages for %d tasks, want at most %d (outcomes batched)", stored, tasks, tasks/4)
	}
	if n := in.metric(t, "trawl_fetcher_outcome_messages_total"); uint64(n) != stored+1 {
		t.Errorf("trawl_fetcher_outcome_messages_total %v, want %d", n, stored+1)
	}
	t.Logf("%d tasks, %d outcome messages", tasks, stored)
}

// TestShutdownFlushesWaitingOutcomes: outcomes gathered for a batch when the fetcher is
// told to stop are published at once, not after their linger, and every task in hand is
// finished and acked before Run returns. A slow request keeps the fast tasks' outcomes
// waiting (a batch goes out early only when every task in hand has its outcome).
func TestShutdownFlushesWaitingOutcomes(t *testing.T) {
	st := newStack(t)
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	s := newSite(t, map[string]http.HandlerFunc{
		"/robots.txt": text(""),
		"/p":          html(pageHTML),
		"/slow": func(w http.ResponseWriter, r *http.Request) {
			started <- struct{}{}
			<-release
			html(pageHTML)(w, r)
		},
	})
	// A failure below must not leave the slow handler blocked: the site's Close would wait
	// for it forever.
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	const linger = time.Second
	in := st.start(st.config(map[string]string{"TRAWL_OUTCOME_LINGER": linger.String()}), "a")
	st.warmRobots(s)

	slow := task(s.URL + "/slow")
	st.publishTask(slow)
	select {
	case <-started:
	case <-time.After(waitFor):
		t.Fatal("slow request never started")
	}
	const tasks = 5
	var leases []string
	for i := range tasks {
		tk := task(fmt.Sprintf("%s/p?n=%d", s.URL, i))
		st.publishTask(tk)
		leases = append(leases, tk.Lease)
	}
	deadline := time.Now().Add(waitFor)
	for in.metric(t, "trawl_fetcher_outcomes_waiting") != tasks {
		if time.Now().After(deadline) {
			t.Fatalf("outcomes waiting %v, want %d", in.metric(t, "trawl_fetcher_outcomes_waiting"), tasks)
		}
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	in.Cancel() // SIGTERM
	for _, lease := range leases {
		if o := st.outcome(lease); o.Kind != crawlmsg.OutcomeFetched {
			t.Errorf("outcome %+v, want fetched", o)
		}
	}
	if took := time.Since(start); took >= linger*3/4 {
		t.Errorf("the waiting outcomes were stored %s after the stop: they waited for their linger (%s)", took, linger)
	}
	unblock()
	in.stop(t)
	if o := st.outcome(slow.Lease); o.Kind != crawlmsg.OutcomeFetched || o.Status != 200 {
		t.Errorf("outcome %+v, want the slow fetch finished", o)
	}
	st.fetchSettled(t)
}
