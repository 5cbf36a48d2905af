package natsx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/semaphore"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/ctxsleep"
	"github.com/trawl/trawl/shared/errclass"
	"github.com/trawl/trawl/shared/topology"
)

// ErrPermanent marks a handler error that redelivery cannot fix; the message is
// terminated at once. crawlmsg.ErrMalformed and crawlmsg.ErrVersion count as permanent too,
// and so does every NATS or Redis error that shared/errclass calls permanent (a message over
// a size limit, a wrong expected sequence, WRONGTYPE, a script error): redelivered, it would
// fail the same way for ever.
//
// Every other error is temporary (Redis at maxmemory, LOADING or READONLY, a connection
// error, a full stream, a NATS timeout): a message whose URLs are already marked seen has
// no other way into the crawl. It is nak'ed with backoff, the loop holds off pulling while
// its batches keep failing, a message still failing after ErrorAfter deliveries is
// reported at error level on every further failure, and one still failing after
// Dead.After is parked in CRAWL_DEAD (DeadLetter), never dropped.
var ErrPermanent = errors.New("permanent failure")

// Permanent wraps err so that IsPermanent reports true.
func Permanent(err error) error { return fmt.Errorf("%w: %w", ErrPermanent, err) }

// IsPermanent tells a poison message from a passing failure.
func IsPermanent(err error) bool {
	return errors.Is(err, ErrPermanent) || errors.Is(err, crawlmsg.ErrMalformed) || errors.Is(err, crawlmsg.ErrVersion) ||
		errclass.IsPermanent(err)
}

// ConsumeOptions configure a consume loop. Zero fields take the defaults in the comments.
type ConsumeOptions struct {
	// Batch is the most messages handed to one BatchHandler call (default 256), a bundle's
	// pages each one (crawlmsg.Bundle: ConsumeBatches hands them over as messages of their
	// own), or for Each the number of concurrent handlers (default 16). ConsumeEach does not
	// open bundles.
	Batch int
	// Linger is how long a batch waits for more messages after its first (default 2ms).
	Linger time.Duration
	// InFlight is how many batches ConsumeBatches hands to the handler at once (default 1:
	// one after the other). A stage whose handler mostly waits — on Redis, on JetStream
	// storing its outputs — takes the next batch while the last one waits; messages of
	// different batches are then settled in any order, so only a stage that does not need
	// its input's order may set it. Up to Batch × InFlight messages are in hand at once.
	InFlight int
	// ErrorAfter is the delivery count from which a message that keeps failing with a
	// temporary error is logged at error level (default 20). Only the loop gives a message
	// up (Dead), so the consumer's own MaxDeliver, which drops it unseen, is unlimited (-1;
	// envconfig.Common.Timings).
	ErrorAfter int
	// Backoff gives the nak delay for a message delivered n times (default 250ms·2^(n-1),
	// capped at 30s).
	Backoff func(n uint64) time.Duration
	// Ready, if set, is called before pulling more messages; while it fails the loop waits
	// instead of taking messages it would only nak (e.g. Redis is down or refuses writes).
	// Deliveries are then not spent on an outage.
	Ready func(ctx context.Context) error
	// DrainTimeout bounds how long messages already pulled are still handled after ctx
	// ends (default 10s); what is not handled by then is redelivered after AckWait.
	DrainTimeout time.Duration
	// Weight, for ConsumeEach, is how many units of work (of its Batch slots) a message
	// holds — the fetch tasks of a batch; nil means one. See ConsumeEach.
	Weight func(jetstream.Msg) int
	// Dead, if set, parks every message the loop gives up on (DeadLetter): a permanent
	// error, or a temporary one still failing after Dead.After deliveries. nil: a
	// permanent error terminates the message, logged, and a temporary one never does.
	Dead *DeadLetter
	// OnTerm is called for every terminated message (metrics) with its reason,
	// DeadPermanent or DeadExhausted.
	OnTerm func(reason string)
	// SettleAfter, for ConsumeBatches, is how long a handled message's ack waits after its
	// handler returned (durability.Level.Window, 0 = ack at once). Until then what the
	// handler stored for the message (its outputs in JetStream, its writes to Redis) may
	// still be lost to an OS crash while the ack survives it, and the message, never
	// delivered again, would be lost with them. A failed message is nak'ed or terminated at
	// once. The consumer's MaxAckPending must hold what arrives in that time.
	SettleAfter time.Duration
	// Kept, with SettleAfter, is asked before the settled acks of messages whose handler
	// ran from start to end are sent: whether the stores it wrote to stayed in reach all
	// along (and, once SettleAfter has passed, have the writes on disk). A store that was
	// out of reach may be back from an OS crash without them, and its ack would then
	// outlive them; so when Kept says no, the messages are nak'ed instead, to be handled
	// again, and their count goes to OnHandBack. nil: every settled message is acked.
	Kept       func(ctx context.Context, start, end time.Time) bool
	OnHandBack func(n int)
	// Acked, for ConsumeBatches, is called with the handled messages once their acks are
	// sent, at once or SettleAfter later (a bundle's pages once the bundle's ack is sent):
	// what a stage may undo only when its message cannot come back to need it (the
	// parser's page bodies) waits for this. A message handed back instead (Kept) is not
	// passed. A lost ack still brings a message back, so what Acked removes must be missed
	// gracefully by a later delivery.
	Acked func(ctx context.Context, msgs []jetstream.Msg)
	Log   *slog.Logger
}

func (o *ConsumeOptions) defaults(batch int) {
	if o.Batch <= 0 {
		o.Batch = batch
	}
	if o.Linger <= 0 {
		o.Linger = 2 * time.Millisecond
	}
	if o.InFlight <= 0 {
		o.InFlight = 1
	}
	if o.ErrorAfter <= 0 {
		o.ErrorAfter = 20
	}
	if o.Backoff == nil {
		o.Backoff = DefaultBackoff
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = 10 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.OnTerm == nil {
		o.OnTerm = func(string) {}
	}
	if o.OnHandBack == nil {
		o.OnHandBack = func(int) {}
	}

}

// DefaultBackoff is 250ms doubling per delivery, capped at 30s.
func DefaultBackoff(n uint64) time.Duration {
	d := 250 * time.Millisecond
	for i := uint64(1); i < n && d < 30*time.Second; i++ {
		d *= 2
	}
	return min(d, 30*time.Second)
}

// BatchHandler handles a batch and returns one error per message (nil = done, ack).
// A shorter result slice is treated as nil for the rest.
type BatchHandler func(ctx context.Context, msgs []jetstream.Msg) []error

// ConsumeBatches pulls from a durable consumer and hands messages to h in batches, so a
// stage can do one Redis round trip and one publish wave per batch instead of per message.
// It returns when ctx ends, after handling what was already pulled (bounded by
// DrainTimeout), or on an error it cannot recover from (ErrConsumerGone: its consumer was
// deleted).
func ConsumeBatches(ctx context.Context, cons jetstream.Consumer, o ConsumeOptions, h BatchHandler) error {
	o.defaults(256)
	o.bindDead(cons)
	_, self := consumerName(cons)
	// The client buffers what the batches in flight and the next one can take.
	it, err := cons.Messages(jetstream.PullMaxMessages(o.Batch * (o.InFlight + 1)))
	if err != nil {
		return fmt.Errorf("natsx: consume: %w", err)
	}
	defer it.Stop()
	defer o.Dead.wait()
	// Handlers keep a context that outlives ctx by DrainTimeout, so messages already pulled
	// are finished and acked on shutdown instead of waiting out AckWait.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	stopOnDone := context.AfterFunc(ctx, func() {
		it.Drain()
		time.AfterFunc(o.DrainTimeout, cancelWork)
	})
	defer stopOnDone()

	var (
		hold  holdOff
		wg    sync.WaitGroup
		slots = make(chan struct{}, o.InFlight)
		acks  *laterAcks
	)
	if o.SettleAfter > 0 {
		acks = startLaterAcks(o)
		// After the batches in flight (deferred below, so it runs first) and before the
		// iterator stops: a stop waits out the acks it still owes, at most SettleAfter.
		defer acks.close()
	}
	// Batches still in flight are finished before the iterator stops (defers run last
	// first), so their messages are settled on a live subscription.
	defer wg.Wait()
	run := func(batch []jetstream.Msg) {
		start := time.Now()
		var partsAcked func([]jetstream.Msg)
		if o.Acked != nil {
			partsAcked = func(parts []jetstream.Msg) { o.Acked(work, parts) }
		}
		batch, bad, badErrs := unbundle(batch, partsAcked)
		for i, m := range bad {
			act(m, badErrs[i], judge(work, m, badErrs[i], o), o)
		}
		var results []error
		// A bundle's parts can make a batch larger than the handler takes.
		for chunk := range slices.Chunk(batch, o.Batch) {
			res := h(work, chunk)
			results = append(results, res...)
			for range len(chunk) - len(res) {
				results = append(results, nil)
			}
		}
		failed := 0
		var done, acked []jetstream.Msg
		for i, m := range batch {
			var herr error
			if i < len(results) {
				herr = results[i]
			}
			f := judge(work, m, herr, o)
			switch {
			case acks != nil && f == fateAck:
				done = append(done, m)
			case f == fateAck:
				if ack(m, o) {
					acked = append(acked, m)
				}
			case act(m, herr, f, o):
				failed++
			}
		}
		if acked = whole(acked); len(acked) > 0 && o.Acked != nil {
			o.Acked(work, acked)
		}
		if len(done) > 0 {
			acks.add(work, start, done)
		}
		hold.record(failed == len(batch) && len(batch) > 0)
	}
	// carry is a bundle taken that would have made the last batch larger than Batch: it
	// starts the next one.
	var carry jetstream.Msg
	for {
		// After ctx ends the loop goes on draining what was already pulled.
		hold.wait(ctx)
		if err := waitReady(ctx, o); err != nil && ctx.Err() == nil {
			return err
		}
		first, err := carry, error(nil)
		if carry == nil {
			first, err = it.Next()
		}
		carry = nil
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			if (errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrBadRequest)) && ctx.Err() == nil {
				// The iterator has ended for good (nats.go stops it on these).
				stream, name := consumerName(cons)
				return fmt.Errorf("%w: %s/%s: %w", ErrConsumerGone, stream, name, err)
			}
			o.Log.Warn("consume: next", "err", err)
			continue
		}
		batch := make([]jetstream.Msg, 0, o.Batch)
		var inBatch map[uint64]int
		weight := 0 // the messages the batch holds, a bundle's parts each
		for m := first; m != nil; {
			if !replayForOther(m, self, o) {
				w := max(1, crawlmsg.BundleParts(m.Headers()))
				if weight > 0 && weight+w > o.Batch {
					carry = m
					break
				}
				batch, inBatch = addDelivery(batch, inBatch, m)
				weight += w
			}
			if weight >= o.Batch {
				break
			}
			if m, err = it.Next(jetstream.NextMaxWait(o.Linger)); err != nil {
				break
			}
		}
		if len(batch) == 0 {
			continue
		}
		if o.InFlight == 1 {
			run(batch)
			continue
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			run(batch)
		})
	}
}

// addDelivery appends m to batch, unless batch holds an earlier delivery of the same
// message: then m takes its place. Messages wait in the client's buffer while the batch
// before them is handled, and one that waits past AckWait is delivered again into the same
// buffer; handled twice in one batch, it would be written twice by a stage that tells a
// redelivery from what it has already stored (the archiver's records in one file). The
// latest delivery is kept: the server settles the message by any of them, and its
// delivery count is the one judge reads. inBatch maps a stream sequence to its index.
func addDelivery(batch []jetstream.Msg, inBatch map[uint64]int, m jetstream.Msg) ([]jetstream.Msg, map[uint64]int) {
	md, err := m.Metadata()
	if err != nil {
		return append(batch, m), inBatch
	}
	if i, ok := inBatch[md.Sequence.Stream]; ok {
		batch[i] = m
		return batch, inBatch
	}
	if inBatch == nil {
		inBatch = make(map[uint64]int, cap(batch))
	}
	inBatch[md.Sequence.Stream] = len(batch)
	return append(batch, m), inBatch
}

// laterAcks acks handled messages SettleAfter after their handler returned, in the order
// they were handled, once Kept says the stores kept what the handlers wrote.
type laterAcks struct {
	o     ConsumeOptions
	mu    sync.Mutex
	queue []dueAcks
	shut  bool
	wake  chan struct{}
	done  chan struct{}
}

type dueAcks struct {
	ctx        context.Context
	start, end time.Time // when the handler ran
	msgs       []jetstream.Msg
}

// keptEvery spaces the Kept questions of one loop: the acks of the batches handled
// within it go together, so that a check of the stores serves many batches.
const keptEvery = 100 * time.Millisecond

func startLaterAcks(o ConsumeOptions) *laterAcks {
	a := &laterAcks{o: o, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go a.loop()
	return a
}

// add never blocks a handler: the queue holds what SettleAfter's worth of batches brings.
func (a *laterAcks) add(ctx context.Context, start time.Time, msgs []jetstream.Msg) {
	a.mu.Lock()
	a.queue = append(a.queue, dueAcks{ctx: ctx, start: start, end: time.Now(), msgs: msgs})
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

func (a *laterAcks) loop() {
	defer close(a.done)
	var asked time.Time
	for {
		a.mu.Lock()
		if len(a.queue) == 0 {
			shut := a.shut
			a.mu.Unlock()
			if shut {
				return
			}
			<-a.wake
			continue
		}
		first := a.queue[0].end
		a.mu.Unlock()
		// Entries are due in the order they came, so waiting for the first is enough; the
		// wait is SettleAfter at most.
		due := first.Add(a.o.SettleAfter)
		if next := asked.Add(keptEvery); a.o.Kept != nil && next.After(due) {
			due = next
		}
		time.Sleep(time.Until(due))
		now := time.Now()
		a.mu.Lock()
		n := 0
		for n < len(a.queue) && !a.queue[n].end.Add(a.o.SettleAfter).After(now) {
			n++
		}
		group := slices.Clone(a.queue[:n])
		clear(a.queue[:n])
		a.queue = a.queue[n:]
		a.mu.Unlock()
		a.settleGroup(group)
		asked = now
	}
}

// settleGroup acks the messages of entries that are due, or hands them back when Kept
// says a store they were written to was out of reach since.
func (a *laterAcks) settleGroup(group []dueAcks) {
	kept := true
	if a.o.Kept != nil {
		start, end := group[0].start, group[0].end
		for _, e := range group[1:] {
			if e.start.Before(start) {
				start = e.start
			}
			if e.end.After(end) {
				end = e.end
			}
		}
		kept = a.o.Kept(group[0].ctx, start, end)
	}
	n := 0
	var acked []jetstream.Msg
	for _, e := range group {
		for _, m := range e.msgs {
			if kept {
				if ack(m, a.o) {
					acked = append(acked, m)
				}
				continue
			}
			n++
			_ = m.Nak()
		}
	}
	if acked = whole(acked); len(acked) > 0 && a.o.Acked != nil {
		a.o.Acked(group[0].ctx, acked)
	}
	if n > 0 {
		a.o.Log.Warn("consume: a store was out of reach after these messages were handled, and may be back without what they wrote; handed back to be handled again instead of acked", "messages", n)
		a.o.OnHandBack(n)
	}
}

// close acks what is queued when it is due and returns when all of it is acked.
func (a *laterAcks) close() {
	a.mu.Lock()
	a.shut = true
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
	<-a.done
}

// holdOff slows a loop whose work keeps failing with temporary errors (a dependency that
// is up but refuses work, which Ready may not see): after each wholly failed round it
// waits 250ms doubling to 5s before pulling again; one success resets it.
type holdOff struct {
	mu     sync.Mutex
	streak int
}

// record counts a round that failed wholly, or resets the streak on any success.
func (h *holdOff) record(failed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if failed {
		h.streak++
	} else {
		h.streak = 0
	}
}

// wait waits as long as the current streak asks, without changing it.
func (h *holdOff) wait(ctx context.Context) bool {
	h.mu.Lock()
	n := h.streak
	h.mu.Unlock()
	if n == 0 {
		return true
	}
	return ctxsleep.Sleep(ctx, min(250*time.Millisecond<<min(n-1, 5), 5*time.Second))
}

// Handler handles one message; see BatchHandler for the meaning of the result.
type Handler func(ctx context.Context, msg jetstream.Msg) error

// ConsumeEach runs up to o.Batch units of work concurrently, pulling as many messages as
// there are idle slots. Nothing waits in a client-side buffer beyond that, which matters
// for fetch tasks: their lease deadline runs from dispatch. A message is one unit, or
// o.Weight of them (a batch of fetch tasks; at most Batch): the slots taken for a pull
// serve its messages in turn, and a message that needs more waits in the loop, before it
// is handed over, until running handlers free them. So the work in hand never passes
// Batch, a free slot is used as soon as a message can start, and nothing waits for a slot
// while holding one idle (which could leave every slot held by waiters). It returns when
// ctx ends, once the handlers running are done (bounded by DrainTimeout), or with
// ErrConsumerGone once its consumer is deleted; a pull that fails otherwise is warned about
// and sent again after a pause (PullPacer).
func ConsumeEach(ctx context.Context, cons jetstream.Consumer, o ConsumeOptions, h Handler) error {
	o.defaults(16)
	o.bindDead(cons)
	defer o.Dead.wait()
	_, self := consumerName(cons)
	weight := func(m jetstream.Msg) int64 {
		if o.Weight == nil {
			return 1
		}
		return int64(min(max(o.Weight(m), 1), o.Batch))
	}
	slots := semaphore.NewWeighted(int64(o.Batch))
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	// Deferred after cancelWork so it runs first: handlers finish before work is cancelled.
	var wg sync.WaitGroup
	defer wg.Wait()
	// Handlers keep running after ctx ends so in-flight fetches finish and are acked; they
	// are cancelled only when the drain timeout passes.
	stopDrain := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(o.DrainTimeout, cancelWork)
		context.AfterFunc(work, func() { t.Stop() })
	})
	defer stopDrain()

	var (
		hold  holdOff
		pulls = PullPacer{Log: o.Log}
	)
	// A consumer gone for good ends the loop, and what it pulled gets the drain's time.
	gone := func(err error) error {
		time.AfterFunc(o.DrainTimeout, cancelWork)
		return err
	}
	for ctx.Err() == nil {
		if !hold.wait(ctx) {
			break
		}
		if err := waitReady(ctx, o); err != nil {
			break
		}
		// Wait for one idle slot, then take every idle one.
		if err := slots.Acquire(ctx, 1); err != nil {
			continue
		}
		n := 1
		for n < o.Batch && slots.TryAcquire(1) {
			n++
		}
		// The pull request expires after a second, so that a quiet stream costs one request
		// a second. It ends when the server ends it (PullMaxWait): ctx ending does not cut
		// it, so what the server delivers meanwhile is handled in the drain, not lost.
		mb, err := cons.Fetch(n, jetstream.FetchMaxWait(PullMaxWait))
		if err != nil {
			slots.Release(int64(n))
			if ctx.Err() == nil {
				if err := pulls.Failed(ctx, cons, err); err != nil {
					return gone(err)
				}
			}
			continue
		}
		// The n slots taken serve the messages in turn; a message that needs more than are
		// left waits for them with none held idle, so it only waits for running handlers.
		reserved := int64(n)
		for m := range mb.Messages() {
			if replayForOther(m, self, o) {
				continue
			}
			w := weight(m)
			take := min(w, reserved)
			reserved -= take
			if need := w - take; need > 0 {
				if err := slots.Acquire(work, need); err != nil {
					// The drain ran out on shutdown before the message could start; nothing
					// of it was done, so it goes back at once.
					slots.Release(take)
					_ = m.Nak()
					continue
				}
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer slots.Release(w)
				hold.record(settle(work, m, h(work, m), o))
			}()
		}
		slots.Release(reserved)
		// A pull the server ends at once (no responders while the consumer has no leader,
		// or none at all) must not be sent again at once.
		switch err := PullError(mb); {
		case err == nil:
			pulls.OK()
		case ctx.Err() == nil:
			if err := pulls.Failed(ctx, cons, err); err != nil {
				return gone(err)
			}
		}
	}
	return nil
}

// replayForOther acks at once, unhandled, a replay meant for another consumer of the
// stream (ReplayForHdr): this one handled the message the first time.
func replayForOther(m jetstream.Msg, self string, o ConsumeOptions) bool {
	if h := m.Headers(); h == nil || h.Get(ReplayForHdr) == "" || h.Get(ReplayForHdr) == self {
		return false
	}
	ack(m, o)
	return true
}

// fate is what becomes of a handled message.
type fate uint8

const (
	fateAck    fate = iota // handled
	fateRetry              // a temporary error: nak'ed with backoff
	fateTerm               // given up: terminated
	fateParked             // given up and parked in CRAWL_DEAD: terminated
)

// judge decides m's fate and does what must come before it is settled: logging, and
// parking a message given up on (ConsumeOptions.Dead).
func judge(ctx context.Context, m jetstream.Msg, err error, o ConsumeOptions) fate {
	if err == nil {
		return fateAck
	}
	delivered := uint64(1)
	if md, mderr := m.Metadata(); mderr == nil {
		delivered = md.NumDelivered
	}
	if IsPermanent(err) {
		if o.Dead == nil {
			o.Log.Error("terminating poison message", "subject", m.Subject(), "id", MsgID(m), "err", err)
			o.OnTerm(DeadPermanent)
			return fateTerm
		}
		perr := o.Dead.Park(ctx, m, err, DeadPermanent)
		switch {
		case perr == nil:
			o.Log.Error("poison message parked in "+topology.StreamDead+" (trawlctl dead)", "subject", m.Subject(), "id", MsgID(m), "err", err)
			o.OnTerm(DeadPermanent)
			return fateParked
		case errclass.Of(perr).Reason == errclass.ReasonStreamFull:
			o.Log.Error("terminating poison message: "+topology.StreamDead+" is full (TRAWL_DEAD_MAX_BYTES)", "subject", m.Subject(), "id", MsgID(m), "err", err, "park_err", perr)
			o.OnTerm(DeadPermanent)
			return fateTerm
		}
		// Not given up without its letter: it comes back to be parked.
		o.Log.Error("poison message could not be parked; retrying the park", "subject", m.Subject(), "id", MsgID(m), "err", err, "park_err", perr)
		_ = m.NakWithDelay(o.Backoff(delivered))
		return fateRetry
	}
	// A full stream downstream is back-pressure, not a failure of this message: it waits
	// for room, reported, and is not given up for it.
	backPressure := errclass.Of(err).Reason == errclass.ReasonStreamFull
	if o.Dead != nil && delivered >= uint64(o.Dead.After) && !backPressure {
		perr := o.Dead.Park(ctx, m, err, DeadExhausted)
		if perr == nil {
			o.Log.Error("message still failing; parked in "+topology.StreamDead+" (trawlctl dead)",
				"subject", m.Subject(), "id", MsgID(m), "deliveries", delivered, "err", err)
			o.OnTerm(DeadExhausted)
			return fateParked
		}
		o.Log.Error("message still failing and could not be parked; retrying", "subject", m.Subject(), "id", MsgID(m),
			"deliveries", delivered, "err", err, "park_err", perr)
	} else if delivered >= uint64(o.ErrorAfter) {
		msg := "message keeps failing; retrying"
		if backPressure {
			msg = "message waits for room in a full stream; retrying"
		}
		o.Log.Error(msg, "subject", m.Subject(), "id", MsgID(m), "deliveries", delivered, "err", err)
	} else {
		o.Log.Warn("handler failed; will retry", "subject", m.Subject(), "deliveries", delivered, "err", err)
	}
	_ = m.NakWithDelay(o.Backoff(delivered))
	return fateRetry
}

// Prepare readies o for a loop of the caller's own on cons (one that pulls or publishes
// its own way) that settles each message with Settle, as ConsumeBatches and ConsumeEach
// do theirs: o's defaults, and its dead letters named after cons. Before it returns, the
// loop calls o.Wait.
func (o *ConsumeOptions) Prepare(cons jetstream.Consumer) {
	o.defaults(16)
	o.bindDead(cons)
}

// Wait returns once the terminates of the messages Settle parked are sent (at most
// Dead.Settle).
func (o ConsumeOptions) Wait() { o.Dead.wait() }

// Settle acks m (err nil), naks it with backoff, or gives it up (parked in CRAWL_DEAD,
// then terminated), as the consume loops do, and reports whether it failed with a
// temporary error. o must have been prepared (Prepare).
func Settle(ctx context.Context, m jetstream.Msg, err error, o ConsumeOptions) bool {
	return settle(ctx, m, err, o)
}

// settle acks, terminates or naks m as judge says, and reports whether it failed with a
// temporary error.
func settle(ctx context.Context, m jetstream.Msg, err error, o ConsumeOptions) bool {
	return act(m, err, judge(ctx, m, err, o), o)
}

func act(m jetstream.Msg, err error, f fate, o ConsumeOptions) bool {
	switch f {
	case fateAck:
		ack(m, o)
	case fateTerm:
		term(m, err)
	case fateParked:
		o.Dead.settled(m, time.Now())
	case fateRetry:
		return true
	}
	return false
}

// ack acks m and says whether the ack was sent.
func ack(m jetstream.Msg, o ConsumeOptions) bool {
	if aerr := m.Ack(); aerr != nil {
		o.Log.Warn("ack failed; message will be redelivered", "subject", m.Subject(), "err", aerr)
		return false
	}
	return true
}

func term(m jetstream.Msg, err error) {
	reason := "parked in " + topology.StreamDead
	if err != nil {
		reason = truncate(err.Error(), 200)
	}
	_ = m.TermWithReason(reason)
}

func waitReady(ctx context.Context, o ConsumeOptions) error {
	if o.Ready == nil {
		return nil
	}
	return WaitReady(ctx, o.Ready, o.Log)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
