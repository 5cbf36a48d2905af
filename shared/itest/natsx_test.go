// Package itest tests shared's NATS and Redis plumbing against a real embedded NATS
// JetStream server and a real redis-server.
package itest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/redisx"
	"github.com/trawl/trawl/shared/topology"
)

func connect(t *testing.T) jetstream.JetStream {
	t.Helper()
	srv := natsembed.StartT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, js, err := natsx.Connect(ctx, srv.URL(), "test", slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return js
}

func workStream(t *testing.T, js jetstream.JetStream, name string, maxDeliver int) jetstream.Consumer {
	t.Helper()
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Retention: jetstream.WorkQueuePolicy, Duplicates: time.Minute}); err != nil {
		t.Fatal(err)
	}
	c, err := js.CreateOrUpdateConsumer(ctx, name, jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 5 * time.Second, MaxDeliver: maxDeliver})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func streamMsgs(t *testing.T, js jetstream.JetStream, name string) uint64 {
	s, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func TestEnsureIsIdempotent(t *testing.T) {
	js := connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o := topology.DefaultOptions(2)
	tm := topology.StageTimings{AckWait: 30 * time.Second, FetchAckWait: 150 * time.Second, MaxDeliver: 20}
	for range 2 {
		if err := natsx.Ensure(ctx, js, o, tm, slog.Default()); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range topology.Consumers(o, tm) {
		if _, err := js.Consumer(ctx, c.Stream, c.Config.Durable); err != nil {
			t.Fatalf("consumer %s/%s: %v", c.Stream, c.Config.Durable, err)
		}
	}
	// A fetched outcome is kept for the scheduler even though nobody is pulling yet.
	if _, err := js.Publish(ctx, topology.FetchedSubject(1), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if n := streamMsgs(t, js, topology.StreamFetched); n != 1 {
		t.Fatalf("fetched stream holds %d messages, want 1", n)
	}
}

func TestPublishBatchDropsDuplicateIDs(t *testing.T) {
	js := connect(t)
	workStream(t, js, "PB", 5)
	ctx := context.Background()
	msgs := []*nats.Msg{
		natsx.NewMsg("PB.a", "id-1", []byte("1")),
		natsx.NewMsg("PB.a", "id-2", []byte("2")),
	}
	if err := natsx.PublishBatch(ctx, js, msgs); err != nil {
		t.Fatal(err)
	}
	// A republish after a crash carries the same ids and must not double the work.
	again := []*nats.Msg{natsx.NewMsg("PB.a", "id-1", []byte("1")), natsx.NewMsg("PB.a", "id-2", []byte("2"))}
	if err := natsx.PublishBatch(ctx, js, again); err != nil {
		t.Fatal(err)
	}
	if n := streamMsgs(t, js, "PB"); n != 2 {
		t.Fatalf("stream holds %d messages, want 2", n)
	}
	if err := natsx.PublishBatch(ctx, js, []*nats.Msg{natsx.NewMsg("nowhere", "", nil)}); err == nil {
		t.Fatal("publish to a subject without a stream succeeded")
	}
}

// ConsumeBatches acks successes, terminates poison at once, retries passing failures and
// terminates them after MaxDeliver, so the work queue always drains.
func TestConsumeBatchesSettles(t *testing.T) {
	js := connect(t)
	cons := workStream(t, js, "CB", 50)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, body := range []string{"ok", "poison", "flaky", "hopeless", "ok"} {
		if _, err := js.Publish(ctx, "CB."+body, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	calls := map[string]int{}
	var terms []string
	opts := natsx.ConsumeOptions{
		Batch:      8,
		MaxDeliver: 3,
		Backoff:    func(uint64) time.Duration { return 20 * time.Millisecond },
		OnTerm:     func(r string) { mu.Lock(); terms = append(terms, r); mu.Unlock() },
	}
	done := make(chan error, 1)
	go func() {
		done <- natsx.ConsumeBatches(ctx, cons, opts, func(_ context.Context, msgs []jetstream.Msg) []error {
			mu.Lock()
			defer mu.Unlock()
			errs := make([]error, len(msgs))
			for i, m := range msgs {
				b := string(m.Data())
				calls[b]++
				switch {
				case b == "poison":
					errs[i] = natsx.Permanent(errors.New("cannot parse"))
				case b == "flaky" && calls[b] < 2:
					errs[i] = errors.New("redis timeout")
				case b == "hopeless":
					errs[i] = errors.New("always fails")
				}
			}
			return errs
		})
	}()
	waitFor(t, "the work queue to drain", func() bool { return streamMsgs(t, js, "CB") == 0 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls["poison"] != 1 {
		t.Errorf("poison handled %d times, want 1", calls["poison"])
	}
	if calls["flaky"] != 2 {
		t.Errorf("flaky handled %d times, want 2", calls["flaky"])
	}
	if calls["hopeless"] != 3 {
		t.Errorf("hopeless handled %d times, want MaxDeliver=3", calls["hopeless"])
	}
	if fmt.Sprint(len(terms)) != "2" {
		t.Errorf("terminations %v, want one permanent and one max-deliver", terms)
	}
}

// While the gate fails (Redis down) nothing is pulled, so no delivery is spent.
func TestConsumeGateHoldsMessages(t *testing.T) {
	js := connect(t)
	cons := workStream(t, js, "GT", 3)
	rs := redisproc.StartT(t, redisproc.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rdb, err := redisx.Connect(ctx, rs.URL(), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	if err := rs.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "GT.x", []byte("x")); err != nil {
		t.Fatal(err)
	}
	var handled atomic.Int32
	go natsx.ConsumeBatches(ctx, cons, natsx.ConsumeOptions{Gate: func(ctx context.Context) error { return redisx.Ping(ctx, rdb) }},
		func(_ context.Context, msgs []jetstream.Msg) []error {
			handled.Add(int32(len(msgs)))
			return nil
		})
	// Give the loop time to (wrongly) pull; the gate is polled every 250ms.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if handled.Load() != 0 {
			t.Fatal("message handled while the gate was closed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Delivered.Consumer != 0 {
		t.Fatalf("%d deliveries spent while the gate was closed", info.Delivered.Consumer)
	}
	if err := rs.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the message to be handled after redis came back", func() bool { return handled.Load() == 1 })
}

// ConsumeEach never holds more messages than it has idle handlers.
func TestConsumeEachBoundsInFlight(t *testing.T) {
	js := connect(t)
	cons := workStream(t, js, "CE", 5)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 40 {
		if _, err := js.Publish(ctx, "CE.x", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	var cur, peak, total atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- natsx.ConsumeEach(ctx, cons, natsx.ConsumeOptions{Batch: 4}, func(context.Context, jetstream.Msg) error {
			n := cur.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			time.Sleep(5 * time.Millisecond) // simulated fetch
			cur.Add(-1)
			total.Add(1)
			return nil
		})
	}()
	waitFor(t, "all messages handled", func() bool { return total.Load() == 40 })
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending > 4 {
		t.Fatalf("%d messages pending ack with 4 handlers", info.NumAckPending)
	}
	cancel()
	<-done
	if peak.Load() > 4 || peak.Load() < 2 {
		t.Fatalf("peak concurrency %d, want 2..4", peak.Load())
	}
}
