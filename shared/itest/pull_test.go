package itest

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// pullLoop is a consume loop under test, on a connection of its own so that its requests
// can be counted.
type pullLoop struct {
	nc   *nats.Conn
	cons jetstream.Consumer
	logs *testwait.Buffer
	done chan error
}

// startPullLoop makes stream name with a consumer configured by cfg, and runs run on it.
func startPullLoop(t *testing.T, name string, cfg jetstream.ConsumerConfig,
	run func(ctx context.Context, cons jetstream.Consumer, o natsx.ConsumeOptions) error) (*pullLoop, jetstream.JetStream) {
	t.Helper()
	srv, err := natsembed.Start(natsembed.Options{StoreDir: t.TempDir(), MaxStore: natsembed.TestMaxStore})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	ctx := testwait.Context(t)
	admin, adminJS, err := natsx.Connect(ctx, srv.URL(), "admin", slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	if _, err := adminJS.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}}); err != nil {
		t.Fatal(err)
	}
	cfg.Durable, cfg.AckPolicy = "w", jetstream.AckExplicitPolicy
	if _, err := adminJS.CreateConsumer(ctx, name, cfg); err != nil {
		t.Fatal(err)
	}
	nc, js, err := natsx.Connect(ctx, srv.URL(), "loop", slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	cons, err := js.Consumer(ctx, name, "w")
	if err != nil {
		t.Fatal(err)
	}
	l := &pullLoop{nc: nc, cons: cons, logs: &testwait.Buffer{}, done: make(chan error, 1)}
	lctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	o := natsx.ConsumeOptions{Batch: 8, DrainTimeout: time.Second, Log: slog.New(slog.NewTextHandler(l.logs, nil))}
	go func() { l.done <- run(lctx, cons, o) }()
	return l, adminJS
}

// requests is how many messages the loop's connection has sent: its pulls, and its looks
// at the consumer.
func (l *pullLoop) requests() uint64 { return l.nc.Stats().OutMsgs }

func consumeEach(ctx context.Context, cons jetstream.Consumer, o natsx.ConsumeOptions) error {
	return natsx.ConsumeEach(ctx, cons, o, func(context.Context, jetstream.Msg) error { return nil })
}

func consumeBatches(ctx context.Context, cons jetstream.Consumer, o natsx.ConsumeOptions) error {
	return natsx.ConsumeBatches(ctx, cons, o, func(_ context.Context, msgs []jetstream.Msg) []error { return nil })
}

// A pull the server refuses at once is sent again only after a pause, with a warning that
// names the consumer and the error: not at network speed, and not silently.
func TestConsumeEachPacesRefusedPulls(t *testing.T) {
	t.Parallel()
	// Pulls of up to 8 (the loop's idle slots) against a limit of 1: each one is answered
	// "409 Exceeded MaxRequestBatch" at once.
	l, _ := startPullLoop(t, "PACED", jetstream.ConsumerConfig{MaxRequestBatch: 1}, consumeEach)
	base := l.requests()
	start := time.Now()
	const pulls = 5
	testwait.Eventually(t, 15*time.Second, "a few refused pulls", func() bool { return l.requests()-base >= pulls })
	// A pause of 250ms between pulls; the first may go out at once.
	if took := time.Since(start); took < (pulls-1)*200*time.Millisecond {
		t.Errorf("%d pulls in %s: refused pulls are sent again without a pause", l.requests()-base, took)
	}
	logs := l.logs.String()
	if !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "consumer=w") || !strings.Contains(logs, "MaxRequestBatch") {
		t.Errorf("no warning naming the consumer and the error:\n%s", logs)
	}
	if n := strings.Count(logs, "pull failed"); n > 1 {
		t.Errorf("%d warnings within a second, want them spaced:\n%s", n, logs)
	}
	select {
	case err := <-l.done:
		t.Fatalf("the loop ended on a refused pull: %v", err)
	default:
	}
}

// A consumer deleted under a running loop ends it with ErrConsumerGone, so that the service
// stops (and declares it again when started), without a burst of pulls meanwhile.
func TestConsumeLoopsEndWhenTheConsumerIsDeleted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		run  func(context.Context, jetstream.Consumer, natsx.ConsumeOptions) error
	}{
		{"ConsumeEach", consumeEach},
		{"ConsumeBatches", consumeBatches},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l, js := startPullLoop(t, "GONE", jetstream.ConsumerConfig{}, tc.run)
			ctx := testwait.Context(t)
			testwait.Eventually(t, 15*time.Second, "the loop to pull", func() bool {
				c, err := js.Consumer(ctx, "GONE", "w")
				return err == nil && c.CachedInfo().NumWaiting > 0
			})
			if err := js.DeleteConsumer(ctx, "GONE", "w"); err != nil {
				t.Fatal(err)
			}
			base := l.requests()
			select {
			case err := <-l.done:
				if !errors.Is(err, natsx.ErrConsumerGone) || !strings.Contains(err.Error(), "GONE/w") {
					t.Fatalf("the loop ended with %v, want ErrConsumerGone naming GONE/w", err)
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("the loop still runs 15s after its consumer was deleted (%d requests since)", l.requests()-base)
			}
			if n := l.requests() - base; n > 20 {
				t.Errorf("%d requests between the deletion and the end of the loop", n)
			}
		})
	}
}

// A consumer setting above the server's limit is refused however long Ensure waits: it
// stops at once, naming the consumer and the limit, instead of waiting for ctx.
func TestEnsureStopsOnARefusedConfig(t *testing.T) {
	t.Parallel()
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir(), JetStreamMaxStore: natsembed.TestMaxStore,
		// Below the pipeline consumers' MaxAckPending (topology.SettlingMaxAckPending).
		JetStreamLimits: server.JSLimitOpts{MaxAckPending: 1000},
	})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	ctx, cancel := context.WithTimeout(testwait.Context(t), 30*time.Second)
	defer cancel()
	nc, js, err := natsx.Connect(ctx, srv.ClientURL(), "test", slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	tm := topology.StageTimings{AckWait: 30 * time.Second, FetchAckWait: 150 * time.Second, MaxDeliver: 20}
	start := time.Now()
	err = natsx.Ensure(ctx, js, topology.DefaultOptions(1), tm, slog.Default())
	if !errors.Is(err, natsx.ErrConfigRefused) || !strings.Contains(err.Error(), "max ack pending") {
		t.Fatalf("Ensure = %v, want ErrConfigRefused naming the max ack pending", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Ensure took %s to give up on a refused configuration", took)
	}
}
