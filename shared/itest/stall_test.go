package itest

import (
	"context"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/redisx"
)

// A Redis that stops answering (its process stopped: connections are still accepted by the
// kernel, nothing replies) holds a service's command no longer than the client's own
// timeouts allow, given no deadline of the caller's: on a connection the client already
// has, and on one it opens then, whose handshake (HELLO, RESP3) is the read that once hung
// past its deadline. The services build their clients with redisx.Open; its timeouts and
// retries are the outer limit of every command, so a stalled server cannot hang a loop.
func TestStalledRedisBoundsEveryCommand(t *testing.T) {
	t.Parallel()
	srv := redisproc.StartT(t, redisproc.Options{})
	tm := redisx.Timeouts{Dial: time.Second, Read: time.Second, Write: time.Second, Retries: 1}
	// Two attempts of a write and a read each, and go-redis's backoff between them.
	bound := 2*(tm.Write+tm.Read) + 2*time.Second
	pooled, err := redisx.Open(srv.URL(), tm)
	if err != nil {
		t.Fatal(err)
	}
	defer pooled.Close()
	if err := pooled.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	defer srv.Resume()
	fresh, err := redisx.Open(srv.URL(), tm)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	for name, c := range map[string]func(context.Context) error{
		"pooled connection":              func(ctx context.Context) error { return pooled.Ping(ctx).Err() },
		"new connection (its handshake)": func(ctx context.Context) error { return fresh.Ping(ctx).Err() },
	} {
		t.Run(name, func(t *testing.T) {
			done := make(chan error, 1)
			start := time.Now()
			go func() { done <- c(context.Background()) }()
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("a stopped Redis answered PING")
				}
				t.Logf("failed after %s: %v", time.Since(start).Round(time.Millisecond), err)
			case <-time.After(bound):
				t.Fatalf("PING to a stopped Redis still waiting after %s: no limit on the command", bound)
			}
		})
	}
}
