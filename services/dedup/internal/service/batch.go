package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/services/dedup/internal/seen"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/topology"
	"github.com/trawl/trawl/shared/urlnorm"
)

// seenTester is the seen test as the handler uses it; *seen.Cached implements it.
type seenTester interface {
	Check(ctx context.Context, msgs []seen.Message) (seen.Result, error)
	Forget(ctx context.Context, msgIDs []string) error
}

// publishFunc stores a batch of output messages (natsx.PublishBatch in production).
type publishFunc func(ctx context.Context, msgs []*nats.Msg) error

// handler turns batches of DiscoveredBatch messages into FrontierBatch messages.
type handler struct {
	seen seenTester
	// keepMemos leaves the memos of published messages to the trim instead of forgetting
	// them at once (TRAWL_FSYNC=1s): an OS crash can keep a Forget in Redis while NATS loses
	// the outputs it followed and the input's ack, and the input, delivered again, would then
	// find its URLs seen and publish nothing. The trim goes by the ack floor, which moves
	// only with the acks the consume loop settles a window after the outputs were stored.
	keepMemos bool
	entries   func() int // cache entries, for the gauge; nil without a cache
	publish   publishFunc
	norm      urlnorm.Options
	maxDepth  int
	shards    int
	m         *metrics
	log       *slog.Logger
}

// input is what the handler needs of a delivered message.
type input struct {
	id   string // natsx.MsgID
	seq  uint64 // stream sequence (0 = unknown)
	data []byte
	// redelivered is set when the message was delivered before, or its delivery count is
	// unknown: its URLs bypass the cache for its memo (see seen.Cached).
	redelivered bool
	// replayed is set on a message sent back from CRAWL_DEAD (natsx.Replay). Its earlier
	// deliveries may have set its URLs' bits and then failed, and their memo, kept under
	// the identity the message had then, is gone with it: so all its URLs pass. A URL
	// seen before it is queued again; the scheduler fetches it once more at most.
	replayed bool
}

// candidate is a URL that passed validation and goes to the seen test.
type candidate struct {
	index int // position in the input message, counted across its link groups
	group int // the link group it came in
	shard int
	d     crawlmsg.Discovered // normalised URL, depth, via, hops
}

// parsed is one input message after decoding and filtering.
type parsed struct {
	// sources are the pages of the message's link groups; forwarded so the frontier can
	// count backlinks.
	sources []string
	cands   []candidate
	invalid int
	tooDeep int
}

// parse decodes a DiscoveredBatch and filters its URLs. A message that does not decode is
// a permanent error; a bad URL inside a good message is only dropped and counted, so one
// producer bug cannot make a whole page's links retry forever.
func parse(data []byte, maxDepth, shards int, norm urlnorm.Options) (parsed, error) {
	var b crawlmsg.DiscoveredBatch
	if err := crawlmsg.Unmarshal(data, &b); err != nil {
		return parsed{}, err
	}
	groups := b.LinkGroups()
	n := 0
	for _, g := range groups {
		n += len(g.URLs)
	}
	p := parsed{sources: make([]string, len(groups)), cands: make([]candidate, 0, n)}
	i := 0
	for gi, g := range groups {
		p.sources[gi] = g.Source
		for _, d := range g.URLs {
			i++
			// Producers normalise already; doing it again makes the filter's key independent
			// of their versions and rejects what should never have been sent.
			u, err := urlnorm.NormalizeWith(d.URL, norm)
			if err != nil || d.Depth < 0 || d.Hops < 0 {
				p.invalid++
				continue
			}
			host, err := urlnorm.Host(u)
			if err != nil {
				p.invalid++
				continue
			}
			if d.Depth > maxDepth {
				p.tooDeep++
				continue
			}
			d.URL = u
			p.cands = append(p.cands, candidate{index: i - 1, group: gi, shard: topology.ShardOf(host, shards), d: d})
		}
	}
	return p, nil
}

// route groups a message's new URLs by shard into one FrontierBatch each, ascending by
// shard, keeping the message's link groups (with their sources) and URL order within a
// batch. newIdx are message positions as returned by the seen test; one that is not a
// candidate (possible only when a memo from an earlier delivery meets a changed
// configuration) is skipped.
func route(msgID string, sources []string, cands []candidate, newIdx []int) (msgs []*nats.Msg, routed int, err error) {
	type shardOut struct {
		groups []crawlmsg.LinkGroup
		last   int // input group of groups' last entry
	}
	byShard := map[int]*shardOut{}
	for _, idx := range newIdx {
		j, ok := slices.BinarySearchFunc(cands, idx, func(c candidate, idx int) int { return c.index - idx })
		if !ok {
			continue
		}
		c := cands[j]
		o := byShard[c.shard]
		if o == nil {
			o = &shardOut{last: -1}
			byShard[c.shard] = o
		}
		// Candidates come in message order, so a group's URLs are contiguous.
		if c.group != o.last {
			o.groups = append(o.groups, crawlmsg.LinkGroup{Source: sources[c.group]})
			o.last = c.group
		}
		g := &o.groups[len(o.groups)-1]
		g.URLs = append(g.URLs, c.d)
		routed++
	}
	shards := make([]int, 0, len(byShard))
	for s := range byShard {
		shards = append(shards, s)
	}
	slices.Sort(shards)
	out := make([]*nats.Msg, 0, len(shards))
	for _, s := range shards {
		data, err := crawlmsg.Marshal(&crawlmsg.FrontierBatch{Groups: byShard[s].groups})
		if err != nil {
			return nil, 0, fmt.Errorf("dedup: marshal frontier batch: %w", err)
		}
		// Derived from the input's stream sequence: a republish after a redelivery is
		// dropped by the frontier stream's duplicate window.
		out = append(out, natsx.NewMsg(topology.FrontierSubject(s), topology.FrontierID(msgID, s), data))
	}
	return out, routed, nil
}

// handle is the natsx.BatchHandler of the dedup consumer.
func (h *handler) handle(ctx context.Context, msgs []jetstream.Msg) []error {
	in := make([]input, len(msgs))
	for i, m := range msgs {
		md, err := m.Metadata()
		in[i] = input{id: natsx.MsgID(m), data: m.Data(), redelivered: err != nil || md.NumDelivered > 1,
			replayed: m.Headers().Get(natsx.ReplayOfHdr) != ""}
		if err == nil {
			in[i].seq = md.Sequence.Stream
		}
	}
	return h.process(ctx, in)
}

// process handles one batch: one seen-test call for all messages, one publish wave for all
// outputs. It returns one error per input (nil = ack).
func (h *handler) process(ctx context.Context, in []input) []error {
	h.m.batchSize.Observe(float64(len(in)))
	errs := make([]error, len(in))
	ps := make([]parsed, len(in))
	var tests []seen.Message
	var tested []int // input index of each tests entry
	for i, msg := range in {
		if msg.id == "" {
			errs[i] = natsx.Permanent(errors.New("dedup: message has no stream sequence"))
			continue
		}
		p, err := parse(msg.data, h.maxDepth, h.shards, h.norm)
		if err != nil {
			errs[i] = fmt.Errorf("dedup: %s: %w", msg.id, err)
			continue
		}
		ps[i] = p
		if len(p.cands) == 0 {
			continue
		}
		urls := make([]seen.URL, len(p.cands))
		for j, c := range p.cands {
			urls[j] = seen.URL{Index: c.index, URL: c.d.URL}
		}
		m := seen.Message{ID: msg.id, Seq: msg.seq, URLs: urls, Redelivered: msg.redelivered}
		if h.keepMemos {
			m.Keep = p.kept
		}
		tests = append(tests, m)
		tested = append(tested, i)
	}

	var res seen.Result
	var err error
	if len(tests) > 0 {
		start := time.Now()
		res, err = h.seen.Check(ctx, tests)
		if err != nil || slices.Contains(res.Asked, true) {
			// A batch the cache answered alone made no Redis call to time.
			h.m.redisDur.Observe(time.Since(start).Seconds())
		}
	}
	if h.entries != nil {
		h.m.cacheLookup(res.Lookups, res.Hits, h.entries())
	}
	if err != nil {
		h.m.failures.WithLabelValues(stageRedis).Inc()
		h.log.Warn("seen test failed; batch will be retried", "messages", len(tests), "err", err)
		for _, i := range tested {
			errs[i] = fmt.Errorf("dedup: seen test: %w", err)
		}
		h.count(ps, errs, nil)
		return errs
	}

	newCount := make([]int, len(in))
	var out []*nats.Msg
	var outOwner []int // input index of each output
	for t, i := range tested {
		newIdx := res.New[t]
		if in[i].replayed {
			newIdx = make([]int, len(ps[i].cands))
			for j, c := range ps[i].cands {
				newIdx[j] = c.index
			}
		}
		msgs, routed, err := route(in[i].id, ps[i].sources, ps[i].cands, newIdx)
		if err != nil {
			// Marshalling our own struct cannot fail on input data; treat as retryable.
			errs[i] = err
			continue
		}
		for range msgs {
			outOwner = append(outOwner, i)
		}
		out = append(out, msgs...)
		newCount[i] = routed
	}

	if err := h.publish(ctx, out); err != nil {
		h.m.failures.WithLabelValues(stagePublish).Inc()
		h.log.Warn("publish failed; inputs with outputs will be retried", "outputs", len(out), "err", err)
		// The memos of these inputs stay, so the redelivery republishes the same URLs.
		for _, i := range outOwner {
			errs[i] = fmt.Errorf("dedup: publish frontier: %w", err)
		}
	} else {
		h.m.published.Add(float64(len(out)))
	}

	var done []string
	for t, i := range tested {
		// A message answered by the cache alone has no memo to forget.
		if errs[i] == nil && res.Asked[t] && !h.keepMemos {
			done = append(done, in[i].id)
		}
	}
	if err := h.seen.Forget(ctx, done); err != nil {
		// Harmless: the memos are trimmed once the ack floor passes them.
		h.m.failures.WithLabelValues(stageForget).Inc()
		h.log.Warn("forgetting memos failed", "err", err)
	}
	h.count(ps, errs, newCount)
	return errs
}

// count adds the URL results of the inputs that will be acked, so a retried message is
// counted once, when it finally succeeds.
func (h *handler) count(ps []parsed, errs []error, newCount []int) {
	var n, s, inv, deep int
	for i, p := range ps {
		if errs[i] != nil {
			continue
		}
		inv += p.invalid
		deep += p.tooDeep
		if newCount != nil {
			n += newCount[i]
			s += len(p.cands) - newCount[i]
		}
	}
	h.m.urls.WithLabelValues(resultNew).Add(float64(n))
	h.m.urls.WithLabelValues(resultSeen).Add(float64(s))
	h.m.urls.WithLabelValues(resultInvalid).Add(float64(inv))
	h.m.urls.WithLabelValues(resultTooDeep).Add(float64(deep))
}
