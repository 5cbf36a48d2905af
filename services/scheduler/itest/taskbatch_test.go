package itest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// The tasks of one dispatch go out in messages of at most TRAWL_TASK_BATCH, each saying in
// its header how many it holds, every task once.
func TestDispatchPacksTasks(t *testing.T) {
	t.Parallel()
	s := startStack(t, redisproc.Options{}, map[string]string{"TRAWL_TASK_BATCH": "3"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var batch crawlmsg.FrontierBatch
	for h := range 7 {
		batch.URLs = append(batch.URLs, crawlmsg.Discovered{URL: fmt.Sprintf("http://h%d.example/", h)})
	}
	s.publish(topology.FrontierSubject(0), &batch)
	cons, err := s.js.Consumer(ctx, topology.StreamFetch, topology.ConsumerFetcher)
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int
	var urls []string
	testwait.Eventually(t, 30*time.Second, "7 tasks dispatched", func() bool {
		mb, err := cons.Fetch(10, jetstream.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			return false
		}
		for m := range mb.Messages() {
			tasks, err := crawlmsg.DecodeTasks(m.Data())
			if err != nil {
				t.Fatal(err)
			}
			if n := taskCount(m); n != len(tasks) {
				t.Errorf("header says %d tasks, the message holds %d", n, len(tasks))
			}
			sizes = append(sizes, len(tasks))
			for _, tk := range tasks {
				urls = append(urls, tk.URL)
			}
			_ = m.Ack()
		}
		return len(urls) >= 7
	})
	slices.Sort(urls)
	if len(urls) != 7 || len(slices.Compact(urls)) != 7 {
		t.Errorf("tasks %v, want each of the 7 hosts once", urls)
	}
	for _, n := range sizes {
		if n > 3 {
			t.Errorf("a message of %d tasks, want at most 3 (sizes %v)", n, sizes)
		}
	}
	if len(sizes) >= 7 {
		t.Errorf("message sizes %v: the tasks were not packed", sizes)
	}
}
