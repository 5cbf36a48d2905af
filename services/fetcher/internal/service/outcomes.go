package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/topology"
)

// outcomeBatcher gathers the outcomes of the tasks this process finished, per shard, with
// their pages, and publishes each shard's outcomes as one message after its pages, a few
// to a message: every stored message costs NATS a publish, a pub-ack, a delivery, an ack
// and a file-store write and delete, so one message for many tasks is most of that cost
// saved. A batch is published when it holds max outcomes or linger after its first
// outcome, whichever comes first, and at once while the fetcher shuts down. Each task's
// worker waits for its batch to be stored before the task is acked, so nothing is acked
// before its outcome is stored; a crash loses only outcomes not yet stored, whose tasks
// are unacked and whose leases expire.
type outcomeBatcher struct {
	max    int
	linger time.Duration
	// publish stores one batch message, retrying until deadline.
	publish func(deadline time.Time, subject string, msg *nats.Msg) error
	// pages stores the pages of a batch's tasks (pages[i] is outs[i]'s, nil for none)
	// before their outcomes go, and fills in each outcome what its page's fate says.
	pages func(deadline time.Time, outs []crawlmsg.Outcome, pages []*pageDelivery) error

	mu      sync.Mutex
	pending map[int]*outBatch // by shard
	closing bool              // shutting down: no lingering
	// active counts the tasks in hand (begin..end) and parked those of them whose outcome
	// is added and not yet stored. When every task in hand is parked no other outcome can
	// come before one of them is acked (the consume loop starts a task only in a free
	// slot), so lingering would only idle the workers: the batches go out at once.
	active, parked int

	idPrefix string // per process, so batch ids never repeat across fetchers or restarts
	seq      atomic.Uint64
}

// pageDelivery is a page a task hands the batcher with its outcome: its page is stored
// in the batch's flush, before the outcomes, with the batch's other pages, a few to a
// message (TRAWL_PAGES_PER_MESSAGE). So a task waits once, and a page's outcome never goes
// before the page.
type pageDelivery struct {
	msg *nats.Msg
	res *pageResult // told the page's stream sequence and whether its body's buffer is free
	// refused, when the page can never be stored (too large for a message), makes the
	// outcome too-large and drops what the page referenced.
	refused func(out *crawlmsg.Outcome, err error)
}

// outBatch is one shard's batch being gathered, then published.
type outBatch struct {
	shard    int
	outcomes []crawlmsg.Outcome
	pages    []*pageDelivery // outcomes[i]'s page, or nil; nil when no task has one
	deadline time.Time       // the earliest retry limit of its tasks
	timer    *time.Timer
	done     chan struct{} // closed once published or given up
	err      error
}

func newOutcomeBatcher(max int, linger time.Duration, publish func(time.Time, string, *nats.Msg) error,
	pages func(time.Time, []crawlmsg.Outcome, []*pageDelivery) error) *outcomeBatcher {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &outcomeBatcher{
		max:      max,
		linger:   linger,
		publish:  publish,
		pages:    pages,
		pending:  map[int]*outBatch{},
		idPrefix: topology.OutcomesPrefix(hex.EncodeToString(b[:])),
	}
}

// add queues out, with page when the task has one to store, and waits until its batch is
// stored (nil) or given up. deadline is how long the task's results may be retried. It
// does not return early on a context: the task's ack waits on it, and the batch's own
// retries are bounded by the deadline.
func (b *outcomeBatcher) add(out *crawlmsg.Outcome, page *pageDelivery, deadline time.Time) error {
	b.mu.Lock()
	bt := b.pending[out.Shard]
	if bt == nil {
		bt = &outBatch{shard: out.Shard, deadline: deadline, done: make(chan struct{}), outcomes: make([]crawlmsg.Outcome, 0, min(b.max, 64))}
		b.pending[out.Shard] = bt
		if b.max > 1 && b.linger > 0 && !b.closing {
			bt.timer = time.AfterFunc(b.linger, func() { b.flushIf(bt) })
		}
	}
	if page != nil && bt.pages == nil {
		bt.pages = make([]*pageDelivery, len(bt.outcomes), cap(bt.outcomes))
	}
	if bt.pages != nil {
		bt.pages = append(bt.pages, page)
	}
	bt.outcomes = append(bt.outcomes, *out)
	if deadline.Before(bt.deadline) {
		bt.deadline = deadline
	}
	b.parked++
	var now []*outBatch
	if len(bt.outcomes) >= b.max || bt.timer == nil {
		b.take(bt)
		now = append(now, bt)
	}
	now = append(now, b.idleLocked()...)
	b.mu.Unlock()
	for _, o := range now {
		if o != bt {
			go b.flush(o)
		}
	}
	for _, o := range now {
		if o == bt {
			b.flush(bt)
		}
	}
	<-bt.done
	b.mu.Lock()
	b.parked--
	b.mu.Unlock()
	return bt.err
}

// begin counts a task in hand; end, called once the task is settled, uncounts it.
func (b *outcomeBatcher) begin() {
	b.mu.Lock()
	b.active++
	b.mu.Unlock()
}

func (b *outcomeBatcher) end() {
	b.mu.Lock()
	b.active--
	idle := b.idleLocked()
	b.mu.Unlock()
	for _, bt := range idle {
		go b.flush(bt)
	}
}

// idleLocked takes every waiting batch when every task in hand is parked. Call with mu
// held; the caller publishes what it returns.
func (b *outcomeBatcher) idleLocked() []*outBatch {
	if b.parked < b.active || len(b.pending) == 0 {
		return nil
	}
	var taken []*outBatch
	for _, bt := range b.pending {
		b.take(bt)
		taken = append(taken, bt)
	}
	return taken
}

// take removes bt from pending; its caller publishes it. Call with mu held.
func (b *outcomeBatcher) take(bt *outBatch) {
	delete(b.pending, bt.shard)
	if bt.timer != nil {
		bt.timer.Stop()
	}
}

// flushIf publishes bt unless another goroutine already took it.
func (b *outcomeBatcher) flushIf(bt *outBatch) {
	b.mu.Lock()
	if b.pending[bt.shard] != bt {
		b.mu.Unlock()
		return
	}
	b.take(bt)
	b.mu.Unlock()
	b.flush(bt)
}

// close makes the batcher publish what is waiting now, and every later outcome at once,
// so that shutting down does not wait for lingers.
func (b *outcomeBatcher) close() {
	b.mu.Lock()
	b.closing = true
	var waiting []*outBatch
	for _, bt := range b.pending {
		b.take(bt)
		waiting = append(waiting, bt)
	}
	b.mu.Unlock()
	for _, bt := range waiting {
		go b.flush(bt)
	}
}

// waiting is how many outcomes are gathered and not yet handed to a publish.
func (b *outcomeBatcher) waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, bt := range b.pending {
		n += len(bt.outcomes)
	}
	return n
}

// flush publishes bt and releases its waiters. The message id is unique per batch and
// kept across the batch's retries, so a retry after a lost pub-ack is dropped by the
// stream's duplicate window; the lease tokens make any other copy harmless.
func (b *outcomeBatcher) flush(bt *outBatch) {
	defer close(bt.done)
	if bt.pages != nil {
		if bt.err = b.pages(bt.deadline, bt.outcomes, bt.pages); bt.err != nil {
			return
		}
	}
	data, err := crawlmsg.Marshal(&crawlmsg.OutcomeBatch{Outcomes: bt.outcomes})
	if err != nil {
		bt.err = fmt.Errorf("encode outcomes: %w", err)
		return
	}
	id := b.idPrefix + strconv.FormatUint(b.seq.Add(1), 36)
	subject := topology.FetchedSubject(bt.shard)
	bt.err = b.publish(bt.deadline, subject, natsx.NewMsg(subject, id, data))
}

// publishOutcomes is the batcher's publish: one message, retried through a NATS outage
// until the earliest lease deadline of its tasks.
func (s *Service) publishOutcomes(deadline time.Time, subject string, msg *nats.Msg) error {
	err := s.retry(deadline, subject, "outcome", publishTimeout, func(ctx context.Context) error {
		return natsx.PublishBatch(ctx, s.js, []*nats.Msg{msg})
	})
	if err == nil {
		s.m.outcomeBatches.Inc()
	}
	return err
}
