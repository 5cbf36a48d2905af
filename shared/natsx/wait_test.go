package natsx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/shared/testwait"
)

// A wrong host in TRAWL_NATS_URL must not hang a service silently: the wait names the
// URL, without its password, and why the dial failed.
func TestConnectSaysWhatItWaitsOn(t *testing.T) {
	t.Parallel()
	// A port nothing listens on: every dial is refused at once.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	var logs testwait.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := Connect(ctx, "nats://trawl:s3cret@"+addr, "test", log)
		done <- err
	}()
	testwait.EventuallyState(t, 15*time.Second, "a warning naming the NATS server waited for", func() (bool, string) {
		s := logs.String()
		return strings.Contains(s, "waiting for nats") && strings.Contains(s, "refused"), s
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Connect after ctx ended = %v, want context.Canceled", err)
	}
	s := logs.String()
	if !strings.Contains(s, addr) {
		t.Errorf("the warning does not name %s:\n%s", addr, s)
	}
	if strings.Contains(s, "s3cret") {
		t.Errorf("the password was logged:\n%s", s)
	}
}

// A bucket whose stream has no leader yet is waited for, and the wait names the bucket.
func TestRetryUnansweredSaysWhatItWaitsOn(t *testing.T) {
	var logs testwait.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })

	ctx, cancel := context.WithTimeout(testwait.Context(t), 15*time.Second)
	defer cancel()
	calls := 0
	_, err := retryUnanswered(ctx, "object store BODIES", func(context.Context) (int, error) {
		calls++
		if !strings.Contains(logs.String(), "waiting for jetstream to answer") {
			return 0, jetstream.ErrNoStreamResponse
		}
		return 1, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if s := logs.String(); !strings.Contains(s, "BODIES") || !strings.Contains(s, "tries=") {
		t.Errorf("the warning does not name the bucket and the tries:\n%s", s)
	}
	if calls > 100 {
		t.Errorf("%d tries in about a second: the wait does not pause", calls)
	}
}

// Ensure stops at once on a configuration JetStream refuses (errclass's permanent 400s),
// and keeps waiting on the 400s a concurrent start or a changing cluster answers for a
// while.
func TestRefusedConfig(t *testing.T) {
	t.Parallel()
	api := func(code int, ec jetstream.ErrorCode) error {
		return fmt.Errorf("consumer CRAWL_PAGES/parser: %w", &jetstream.APIError{Code: code, ErrorCode: ec, Description: "x"})
	}
	for _, tc := range []struct {
		name    string
		err     error
		refused bool
	}{
		{"max ack pending above the limit", api(400, 10121), true},
		{"a bad request", api(400, jetstream.JSErrCodeBadRequest), true},
		{"stream made meanwhile with other settings", api(400, jetstream.JSErrCodeStreamNameInUse), false},
		{"consumer made meanwhile", fmt.Errorf("x: %w", jetstream.ErrConsumerExists), false},
		{"no peers yet", tooFewPeers(api(400, errCodeNoPeers), 3), false},
		{"no peers yet, one replica", api(400, errCodeNoPeers), false},
		{"no leader", api(503, 10008), false},
		{"unanswered", context.DeadlineExceeded, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := refusedConfig(tc.err)
			if got := errors.Is(err, ErrConfigRefused); got != tc.refused {
				t.Fatalf("refusedConfig(%v) = %v, want refused %v", tc.err, err, tc.refused)
			}
			if err != nil && !errors.Is(err, tc.err) {
				t.Errorf("refusedConfig(%v) = %v does not wrap it", tc.err, err)
			}
		})
	}
}
