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
	"github.com/trawl/trawl/shared/topology"
)

// A crawl.fetch message holding a batch of tasks (several hosts of one dispatch) has its
// tasks fetched at once, each with its own outcome, and is acked once, after all of them:
// nothing is delivered again.
func TestTaskBatchFetchedAtOnce(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	const hosts = 3
	// Each page answers only once every host's page has been asked for: the test ends in
	// time only if the fetcher makes the three requests at once.
	var arrived sync.WaitGroup
	arrived.Add(hosts)
	all := make(chan struct{})
	go func() { arrived.Wait(); close(all) }()
	var tasks []crawlmsg.FetchTask
	var sites []*site
	for i := range hosts {
		s := newSiteOn(t, fmt.Sprintf("127.0.0.%d", i+2), map[string]http.HandlerFunc{
			"/robots.txt": text("User-agent: *\nAllow: /\n"),
			"/page": func(w http.ResponseWriter, r *http.Request) {
				arrived.Done()
				select {
				case <-all:
				case <-time.After(10 * time.Second):
				}
				html(pageHTML)(w, r)
			},
		})
		sites = append(sites, s)
		tasks = append(tasks, task(s.URL+"/page"))
	}
	in := st.start(st.config(nil), "a")

	publishBatch := func(tasks []crawlmsg.FetchTask) {
		t.Helper()
		data, err := crawlmsg.Marshal(&crawlmsg.TaskBatch{Tasks: tasks})
		if err != nil {
			t.Fatal(err)
		}
		m := nats.NewMsg(topology.FetchSubject(0))
		m.Data = data
		m.Header.Set(crawlmsg.TasksHeader, strconv.Itoa(len(tasks)))
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		if _, err := st.js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	// robots.txt first: one task's request each.
	publishBatch(tasks)
	for _, tk := range tasks {
		if o := st.outcome(tk.Lease); o.Kind != crawlmsg.OutcomeRobots {
			t.Fatalf("%s: %+v, want robots first", tk.URL, o)
		}
	}
	var again []crawlmsg.FetchTask
	for _, s := range sites {
		again = append(again, task(s.URL+"/page"))
	}
	start := time.Now()
	publishBatch(again)
	for _, tk := range again {
		if o := st.outcome(tk.Lease); o.Kind != crawlmsg.OutcomeFetched || o.Status != 200 {
			t.Errorf("%s: %+v, want fetched 200", tk.URL, o)
		}
	}
	if took := time.Since(start); took >= 10*time.Second {
		t.Errorf("the batch took %s: its tasks were not fetched at once", took)
	}
	in.waitMetric(t, `trawl_fetcher_outcomes_total{kind="fetched"}`, hosts)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	c, err := st.js.Consumer(ctx, topology.StreamFetch, topology.ConsumerFetcher)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.AckFloor.Stream != 2 || info.NumRedelivered != 0 || info.NumAckPending != 0 {
		t.Errorf("ack floor %d, redelivered %d, pending %d: want both messages acked once", info.AckFloor.Stream, info.NumRedelivered, info.NumAckPending)
	}
	for _, s := range sites {
		if got := s.requests(); len(got) != 2 {
			t.Errorf("%s saw %v, want robots.txt and the page once each", s.URL, got)
		}
	}
}
