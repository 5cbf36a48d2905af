package natsx

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// WatchRecheck is how long a ConsumerWatch trusts its last look. The consumer's creation
// and deletion advisories make a change count at once; looking again covers an advisory
// missed (a reconnect, a server that sends none).
const WatchRecheck = 30 * time.Second

// watchRetry is how soon a look that failed is made again.
const watchRetry = 5 * time.Second

// ConsumerWatch says whether a durable consumer exists, for a service that works for a
// consumer it does not run: the parser finds page requisites and the fetcher keeps what an
// archive needs only while the archiver's consumer of crawl.pages exists. It looks once
// when made, again when the server's advisory for the consumer arrives, and when its last
// look is WatchRecheck old (Refresh, Loop). A failed look keeps the last answer.
type ConsumerWatch struct {
	js               jetstream.JetStream
	stream, consumer string
	log              *slog.Logger
	onChange         func(exists bool)

	exists  atomic.Bool
	mu      sync.Mutex // one look at a time
	checked atomic.Int64
	stale   atomic.Bool // an advisory said the consumer changed
	sub     *nats.Subscription
}

// WatchConsumer subscribes to the consumer's created and deleted advisories (nc may be
// nil: then only the periodic looks see a change) and looks once. onChange, if not nil, is
// called after each change of the answer, the first look included when it finds the
// consumer.
func WatchConsumer(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, stream, consumer string, log *slog.Logger, onChange func(exists bool)) *ConsumerWatch {
	w := &ConsumerWatch{js: js, stream: stream, consumer: consumer, log: log, onChange: onChange}
	if nc != nil {
		// Subscribed before the first look, so a consumer made in between is not missed.
		subj := "$JS.EVENT.ADVISORY.CONSUMER.*." + stream + "." + consumer
		sub, err := nc.Subscribe(subj, func(*nats.Msg) {
			// Looked at here, on the subscription's goroutine, so that the work handled
			// next sees the change.
			w.stale.Store(true)
			w.Refresh(context.Background())
		})
		if err != nil {
			log.Warn("no consumer advisories; a change is seen at the next look", "subject", subj, "err", err)
		}
		w.sub = sub
	}
	w.Refresh(ctx)
	return w
}

// Exists reports the last answer.
func (w *ConsumerWatch) Exists() bool { return w != nil && w.exists.Load() }

// Refresh looks at the consumer again when the last look is older than WatchRecheck or an
// advisory came since.
func (w *ConsumerWatch) Refresh(ctx context.Context) {
	if w == nil || w.fresh() {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fresh() {
		return // another caller looked meanwhile
	}
	w.stale.Store(false)
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := w.js.Consumer(lctx, w.stream, w.consumer)
	var exists bool
	switch {
	case err == nil:
		exists = true
	case errors.Is(err, jetstream.ErrConsumerNotFound):
	default:
		w.log.Warn("cannot look for a consumer; keeping the last answer", "stream", w.stream, "consumer", w.consumer, "exists", w.exists.Load(), "err", err)
		// Looked at again in a few seconds, not by every caller meanwhile.
		w.checked.Store(time.Now().Add(watchRetry - WatchRecheck).UnixNano())
		return
	}
	w.checked.Store(time.Now().UnixNano())
	if w.exists.Swap(exists) != exists && w.onChange != nil {
		w.onChange(exists)
	}
}

func (w *ConsumerWatch) fresh() bool {
	return !w.stale.Load() && time.Since(time.Unix(0, w.checked.Load())) < WatchRecheck
}

// Loop calls Refresh every WatchRecheck until ctx ends, for a service whose work should not
// wait on a look.
func (w *ConsumerWatch) Loop(ctx context.Context) error {
	t := time.NewTicker(WatchRecheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			w.Refresh(ctx)
		}
	}
}

// Close ends the advisory subscription.
func (w *ConsumerWatch) Close() {
	if w != nil && w.sub != nil {
		_ = w.sub.Unsubscribe()
	}
}
