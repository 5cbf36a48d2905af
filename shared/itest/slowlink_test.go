package itest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/devstack/slowlink"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/testwait"
)

// A pull ends when the server says so. Over a link that delays what the client sends by
// 300 ms, a pull the client gave up on at its own deadline was still open at the server,
// which went on delivering into it: each such message was lost to the client and came back
// only after AckWait (a fetch task after its lease). Every message published one every 70 ms,
// with the pulls never full (64 slots), must be handled within seconds, far inside the 30s
// AckWait.
func TestConsumeEachOnASlowLink(t *testing.T) {
	t.Parallel()
	srv, err := natsembed.Start(natsembed.Options{StoreDir: t.TempDir(), MaxStore: natsembed.TestMaxStore})
	if err != nil {
		t.Fatalf("natsembed: start embedded NATS server: %v", err)
	}
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, direct, err := natsx.Connect(ctx, srv.URL(), "publisher", slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := direct.CreateStream(ctx, jetstream.StreamConfig{Name: "SLOW", Subjects: []string{"SLOW.>"}, Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	if _, err := direct.CreateOrUpdateConsumer(ctx, "SLOW", jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	nc, slow, err := natsx.Connect(ctx, "nats://"+slowlink.Start(t, u.Host, 300*time.Millisecond), "consumer", slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	cons, err := slow.Consumer(ctx, "SLOW", "w")
	if err != nil {
		t.Fatal(err)
	}

	var (
		mu      sync.Mutex
		handled = map[string]int{}
	)
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- natsx.ConsumeEach(cctx, cons, natsx.ConsumeOptions{Batch: 64}, func(_ context.Context, m jetstream.Msg) error {
			mu.Lock()
			handled[string(m.Data())]++
			mu.Unlock()
			return nil
		})
	}()
	const msgs = 60
	for i := range msgs {
		if _, err := direct.Publish(ctx, "SLOW.m", []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
		time.Sleep(70 * time.Millisecond) // the publishing pace, the thing tested against
	}
	testwait.EventuallyState(t, 5*time.Second, "every message handled", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		var missing []int
		for i := range msgs {
			if handled[strconv.Itoa(i)] == 0 {
				missing = append(missing, i)
			}
		}
		return len(missing) == 0, fmt.Sprintf("%d of %d handled; missing %v", msgs-len(missing), msgs, missing)
	})
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, n := range handled {
		if n != 1 {
			t.Errorf("message %s handled %d times", id, n)
		}
	}
}
