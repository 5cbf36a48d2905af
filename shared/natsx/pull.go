package natsx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/shared/ctxsleep"
)

// ErrConsumerGone: a loop's durable consumer was deleted, or its pulls are refused as
// malformed, which no wait changes. The loop ends with it, and so does the service: every
// service declares its consumers when it starts (Ensure), so a restart makes it again.
var ErrConsumerGone = errors.New("natsx: the consumer is gone (deleted or refusing pulls); a service declares its consumers when it starts")

// PullError is what a pull (jetstream.Consumer.Fetch) ended with, or nil when it ended as
// pulls do: its time ran out, its context ended, or there was nothing to take.
func PullError(mb jetstream.MessageBatch) error {
	err := mb.Error()
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, jetstream.ErrNoMessages) {
		return nil
	}
	return err
}

// PullMaxWait is how long a pull waits at the server for messages. A pull is given it as
// its expiry (jetstream.FetchMaxWait), not a context deadline: the client then ends the
// pull when the server does, and a second later by itself. With a context's deadline the
// client gave up 10% before the expiry counted from its own send, while the server counted
// from the request's arrival: a request delayed past that margin left the server
// delivering into a pull the client had closed, and each such message came back only after
// AckWait (measured over a link delaying the client by 300 ms: two messages a second).
const PullMaxWait = time.Second

const (
	// pullPause is the wait after a failed pull: a pull the server refuses at once (no
	// responders while a consumer has no leader, or none at all) would otherwise be sent
	// again at network speed.
	pullPause = 250 * time.Millisecond
	// pullWarnEvery spaces the warnings of a loop whose pulls keep failing.
	pullWarnEvery = 5 * time.Second
	// goneAfter is how many looks in a row must find the consumer missing before a loop
	// takes it for deleted: a cluster may answer so for a moment while its assignments
	// settle.
	goneAfter = 3
	// goneLookTimeout bounds one look.
	goneLookTimeout = 5 * time.Second
)

// PullPacer paces a pull loop whose pulls fail: a warning naming the consumer and the
// error, at most every pullWarnEvery, a pause before the next pull, and the end of the loop
// once the consumer is gone (ErrConsumerGone). The zero value logs to slog.Default.
type PullPacer struct {
	Log      *slog.Logger
	failures int // in a row
	missing  int // looks in a row that found no consumer
	warned   time.Time
}

// OK records a pull that succeeded.
func (p *PullPacer) OK() {
	if p.failures > 0 {
		p.log().Info("consume: pulling again", "after_failures", p.failures)
	}
	p.failures, p.missing, p.warned = 0, 0, time.Time{}
}

// Failed records a pull of cons that failed with err: it returns an error wrapping
// ErrConsumerGone when the loop should end, and otherwise warns (rate-limited) and pauses
// until the next pull may go, or ctx ends.
func (p *PullPacer) Failed(ctx context.Context, cons jetstream.Consumer, err error) error {
	p.failures++
	stream, name := consumerName(cons)
	switch {
	case errors.Is(err, jetstream.ErrBadRequest):
		// nats.go's own consume iterator ends on it too: the pull itself is refused.
		return fmt.Errorf("%w: %s/%s: %w", ErrConsumerGone, stream, name, err)
	case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConsumerNotFound),
		errors.Is(err, nats.ErrNoResponders):
		// What a deleted consumer answers, and one without a leader: ask which.
		if consumerMissing(ctx, cons) {
			p.missing++
		} else {
			p.missing = 0
		}
		if p.missing >= goneAfter {
			return fmt.Errorf("%w: %s/%s: %w", ErrConsumerGone, stream, name, err)
		}
	default:
		p.missing = 0
	}
	if ctx.Err() == nil && time.Since(p.warned) >= pullWarnEvery {
		p.log().Warn("consume: pull failed; pausing before the next", "stream", stream, "consumer", name,
			"failures", p.failures, "err", err)
		p.warned = time.Now()
	}
	ctxsleep.Sleep(ctx, pullPause)
	return nil
}

func (p *PullPacer) log() *slog.Logger {
	if p.Log == nil {
		return slog.Default()
	}
	return p.Log
}

// consumerMissing reports whether the server says cons, or its stream, does not exist.
func consumerMissing(ctx context.Context, cons jetstream.Consumer) bool {
	ctx, cancel := context.WithTimeout(ctx, goneLookTimeout)
	defer cancel()
	_, err := cons.Info(ctx)
	return errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound)
}

func consumerName(cons jetstream.Consumer) (stream, name string) {
	if ci := cons.CachedInfo(); ci != nil {
		return ci.Stream, ci.Name
	}
	return "?", "?"
}

// WaitReady calls ready until it succeeds or ctx ends (ctx's error), every 250ms, saying
// what it waits on every 10 s: a loop holding off while a dependency cannot take its work.
func WaitReady(ctx context.Context, ready func(context.Context) error, log *slog.Logger) error {
	for i := 0; ; i++ {
		err := ready(ctx)
		if err == nil {
			return nil
		}
		if i%40 == 0 && ctx.Err() == nil {
			log.Warn("consume: dependency not ready; not pulling", "err", err)
		}
		if !ctxsleep.Sleep(ctx, 250*time.Millisecond) {
			return ctx.Err()
		}
	}
}
