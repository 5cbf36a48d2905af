package itest

import (
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// A deleted due-recrawl consumer is not pulled from at network speed for ever: the intake
// says why it stops, and the scheduler stops with it, to declare the consumer again when
// started.
func TestRecrawlIntakeStopsWhenItsConsumerIsDeleted(t *testing.T) {
	t.Parallel()
	s := startStack(t, redisproc.Options{}, map[string]string{"TRAWL_RECRAWL": "adaptive"})
	ctx := testwait.Context(t)
	name := topology.SchedulerRecrawlConsumer(0)
	if err := s.js.DeleteConsumer(ctx, topology.RecrawlStreamOf(0, s.cfg.Common.Topology()), name); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.svc.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("the scheduler still runs 15s after its due-recrawl consumer was deleted")
	}
	if err := s.svc.Err(); err == nil || !strings.Contains(err.Error(), "recrawl intake") {
		t.Errorf("scheduler Run = %v, want the recrawl intake named", err)
	}
	if n := s.logs.count("recrawl intake stopped", name); n != 1 {
		t.Errorf("%d log lines saying why the intake stopped, naming %s; want 1", n, name)
	}
}
