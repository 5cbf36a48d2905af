package natscluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A stopped node leaves a cluster that still places replicated streams on the other
// two, and started again it rejoins: the cluster is ready with all three.
func TestStopAndStartNode(t *testing.T) {
	t.Parallel()
	c := StartT(t, Options{})
	if got := strings.Count(c.URL(), ","); got != 2 {
		t.Fatalf("URL %q: want three servers", c.URL())
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c.StopNode(1)
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "R2", Subjects: []string{"r2"}, Replicas: 2}); err != nil {
		t.Fatalf("a stream of two replicas with one node down: %v", err)
	}
	if err := c.StartNode(1); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "R3", Subjects: []string{"r3"}, Replicas: 3}); err != nil {
		t.Fatalf("a stream of three replicas once the node is back: %v", err)
	}
}
