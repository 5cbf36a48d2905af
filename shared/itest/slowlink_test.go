package itest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/testwait"
)

// slowLink relays TCP connections to target, holding what a client sends for delay before
// passing it on; what the server sends comes back at once. A pull request then reaches the
// server later than its client timed it from, as on a loaded machine.
func slowLink(t *testing.T, target string, delay time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		conns  sync.WaitGroup
		mu     sync.Mutex
		open   []net.Conn
		closed bool
	)
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		closed = true
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		conns.Wait()
	})
	type chunk struct {
		b  []byte
		at time.Time
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			open = append(open, c, s)
			if closed {
				c.Close()
				s.Close()
			}
			mu.Unlock()
			queue := make(chan chunk, 1024)
			conns.Add(3)
			go func() { // server → client, at once
				defer conns.Done()
				io.Copy(c, s)
				c.Close()
			}()
			go func() { // client → queue
				defer conns.Done()
				defer close(queue)
				for {
					b := make([]byte, 32<<10)
					n, err := c.Read(b)
					if n > 0 {
						queue <- chunk{b[:n], time.Now().Add(delay)}
					}
					if err != nil {
						return
					}
				}
			}()
			go func() { // queue → server, each chunk delay after it was read
				defer conns.Done()
				defer s.Close()
				for ch := range queue {
					time.Sleep(time.Until(ch.at)) // the link's delay, the thing simulated
					if _, err := s.Write(ch.b); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

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
	nc, slow, err := natsx.Connect(ctx, "nats://"+slowLink(t, u.Host, 300*time.Millisecond), "consumer", slog.Default())
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
