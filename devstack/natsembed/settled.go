package natsembed

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/testwait"
)

// WaitSettled waits up to within until consumer has settled every message of stream
// (natsx.Settled), and fails the test with where it stands otherwise.
func WaitSettled(t testing.TB, js jetstream.JetStream, stream, consumer string, within time.Duration) {
	t.Helper()
	testwait.EventuallyState(t, within, consumer+" to settle every message of "+stream, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		ok, state, err := natsx.Settled(ctx, js, stream, consumer)
		if err != nil {
			return false, err.Error()
		}
		return ok, state
	})
}

// TakeAll hands take each message consumer has not delivered yet and acks it, as the
// stage that consumer stands for would; it fails the test when they do not all come
// within within. It counts them first, from the server, and pulls until it has them all:
// an empty pull does not mean none are left, since a no-wait pull whose reply comes over a
// second late (a loaded machine) ends empty, with no error (nats.go waits its expiry and a
// second, and a no-wait pull has no expiry).
func TakeAll(t testing.TB, js jetstream.JetStream, stream, consumer string, within time.Duration, take func(jetstream.Msg)) {
	t.Helper()
	pull(t, js, stream, consumer, -1, within, func(ctx context.Context, m jetstream.Msg) {
		take(m)
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// Hold takes n messages of consumer and never acks them, as a stage that dies holding them
// would; it fails the test when they do not all come within within. It pulls until it
// has them, as TakeAll does.
func Hold(t testing.TB, js jetstream.JetStream, stream, consumer string, n int, within time.Duration) []jetstream.Msg {
	t.Helper()
	var held []jetstream.Msg
	pull(t, js, stream, consumer, n, within, func(_ context.Context, m jetstream.Msg) { held = append(held, m) })
	return held
}

// pull hands each the next n messages of consumer (n < 0: as many as it has not delivered
// yet, counted first), pulling until it has them all or within has passed.
func pull(t testing.TB, js jetstream.JetStream, stream, consumer string, n int, within time.Duration, each func(context.Context, jetstream.Msg)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	c, err := js.Consumer(ctx, stream, consumer)
	if err != nil {
		t.Fatal(err)
	}
	if n < 0 {
		info, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n = int(info.NumPending)
	}
	for got := 0; got < n; {
		if ctx.Err() != nil {
			t.Fatalf("took %d of the %d messages %s held for %s within %s", got, n, stream, consumer, within)
		}
		batch, err := c.Fetch(min(100, n-got), jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			got++
			each(ctx, m)
		}
	}
}
