package service

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/topology"
)

// Bodies above the fetcher's inline threshold are objects in topology.BodiesBucket. The
// parser reads them, and they are removed once no consumer of crawl.pages can still ask
// for them: at once after parsing when the parser is the stream's only consumer, else by
// the sweeper once the page is gone from the stream (every tap acked it). Which page
// names which body is not needed: a body's page is published within a window after the
// body is stored, so a body is free once no page that arrived within its window is kept.
// One lagging tap then pins only the bodies stored shortly before the pages it holds, not
// every later body (which would fill the store while the crawl goes on). A page given up
// (parked in CRAWL_DEAD) leaves the stream but may be replayed: the objects its dead
// letter names are kept until it is replayed or dropped.

const (
	// bodySweepInterval is how often leftover bodies are looked for.
	bodySweepInterval = 30 * time.Second
	// publishSlack covers the fetcher's publish floor (it may retry its page up to 5 s
	// past the lease deadline) and clock skew between the NATS server and this process.
	publishSlack = 15 * time.Second
	// storeSkew covers clock differences between the NATS servers that lead the bodies
	// store and the pages stream: a page arrives after its body was stored, by their clocks.
	storeSkew = time.Second
)

// errParsedBefore is resolveBody's answer for a page delivered again after its body was
// released: an earlier delivery was parsed and acked (the ack was lost or came late), so
// this one is acked with nothing to do.
var errParsedBefore = errors.New("parser: page parsed before: its body was released after its ack")

// resolveBody reads a page body stored by reference. A missing object cannot come back
// (the page was published after its body was stored, so it was removed), nor can one of
// another size become the page's: the page is terminated and counted rather than retried.
// A body is released only after its page's ack (releaseAcked), and the sweeper leaves the
// bodies of pages still in the stream, so one missing at a later delivery of m was
// released by this consumer: errParsedBefore.
func (s *Service) resolveBody(ctx context.Context, url string, ref *crawlmsg.BodyRef, m jetstream.Msg) ([]byte, error) {
	if ref.Bucket != topology.BodiesBucket || ref.Name == "" {
		return nil, natsx.Permanent(fmt.Errorf("parser: %s: body reference %+v outside bucket %s", url, *ref, topology.BodiesBucket))
	}
	if s.bodies == nil {
		return nil, fmt.Errorf("parser: %s: body %s sent by reference, and no body store to read it from (an Offline parser without NATS)", url, ref.Name)
	}
	gctx, cancel := context.WithTimeout(ctx, s.cfg.Common.AckWait)
	defer cancel()
	body, err := s.bodies.GetBytes(gctx, ref.Name)
	switch {
	case errors.Is(err, jetstream.ErrObjectNotFound) && redelivered(m):
		s.m.bodies.WithLabelValues("parsed_before").Inc()
		s.log.Warn("page delivered again after its ack released its body: acked, not parsed again", "url", url, "object", ref.Name)
		return nil, errParsedBefore
	case errors.Is(err, jetstream.ErrObjectNotFound):
		s.m.bodies.WithLabelValues("missing").Inc()
		s.log.Error("page body gone before it was parsed", "url", url, "object", ref.Name)
		return nil, natsx.Permanent(fmt.Errorf("parser: %s: body %s: %w", url, ref.Name, err))
	case err != nil:
		return nil, fmt.Errorf("parser: %s: body %s: %w", url, ref.Name, err)
	case int64(len(body)) != ref.Size:
		// Not the body the page was published with, and no retry reads another.
		return nil, natsx.Permanent(fmt.Errorf("parser: %s: body %s has %d octets, the page says %d", url, ref.Name, len(body), ref.Size))
	}
	s.m.bodies.WithLabelValues("read").Inc()
	return body, nil
}

// redelivered says whether m was delivered before (false for Offline's pages).
func redelivered(m jetstream.Msg) bool {
	if m == nil {
		return false
	}
	md, err := m.Metadata()
	return err == nil && md.NumDelivered > 1
}

// releaseAcked is the consume loop's Acked: it deletes the bodies of the acked pages sent
// by reference when the parser is the only consumer of crawl.pages, so that no tap can ask
// for them. Not before the ack: a page handed back instead (a store out of reach since it
// was handled), or whose handler is killed before its ack, is parsed again from its body.
// With taps, the sweeper waits for the pages to leave the stream. A failed delete is left
// to the sweeper too.
func (s *Service) releaseAcked(ctx context.Context, msgs []jetstream.Msg) {
	var names []string
	for _, m := range msgs {
		ref, err := crawlmsg.PageBodyRef(m.Headers())
		if err == nil && ref != nil {
			names = append(names, ref.Name)
		}
	}
	if len(names) == 0 {
		return
	}
	dctx, cancel := context.WithTimeout(ctx, s.cfg.Common.AckWait)
	defer cancel()
	st, err := s.js.Stream(dctx, topology.StreamPages)
	if err != nil {
		s.log.Warn("bodies left to the sweeper", "err", err)
		return
	}
	if n := st.CachedInfo().State.Consumers; n != 1 {
		return
	}
	for _, name := range names {
		if err := s.deleteBody(dctx, name); err != nil {
			s.log.Warn("delete parsed body; left to the sweeper", "object", name, "err", err)
		}
	}
}

// deleteBody removes an object and its deletion marker, so the bucket does not keep a
// marker per page ever sent by reference.
func (s *Service) deleteBody(ctx context.Context, name string) error {
	err := s.bodies.Delete(ctx, name)
	gone := errors.Is(err, jetstream.ErrObjectNotFound) // its marker may still be there
	if err != nil && !gone {
		return err
	}
	st, err := s.js.Stream(ctx, topology.BodiesStream)
	if err != nil {
		return err
	}
	// The marker's subject is fixed by the object store: $O.<bucket>.M.<base64url(name)>.
	err = st.Purge(ctx, jetstream.WithPurgeSubject(fmt.Sprintf("$O.%s.M.%s", topology.BodiesBucket, encodeObjectName(name))))
	if err != nil {
		return err
	}
	if !gone {
		s.m.bodies.WithLabelValues("deleted").Inc()
	}
	return nil
}

// sweepLoop runs SweepBodies every bodySweepInterval until ctx ends.
func (s *Service) sweepLoop(ctx context.Context) {
	t := time.NewTicker(bodySweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n, err := s.SweepBodies(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("body sweep", "err", err)
		} else if n > 0 {
			s.log.Info("bodies swept", "deleted", n)
		}
	}
}

// SweepBodies deletes every body whose page can no longer be read from crawl.pages nor
// from CRAWL_DEAD, and returns how many it deleted.
func (s *Service) SweepBodies(ctx context.Context) (int, error) {
	objs, err := s.bodies.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("list bodies: %w", err)
	}
	st, err := s.js.Stream(ctx, topology.StreamPages)
	if err != nil {
		return 0, fmt.Errorf("pages stream: %w", err)
	}
	state := st.CachedInfo().State
	// The scheduler's lease TTL, not this parser's own TRAWL_LEASE_TTL, bounds when a page
	// is published after its body.
	fetch, err := s.js.Consumer(ctx, topology.StreamFetch, topology.ConsumerFetcher)
	if err != nil {
		return 0, fmt.Errorf("fetch consumer: %w", err)
	}
	window := topology.LeaseTTL(fetch.CachedInfo().Config) + publishSlack
	now := time.Now()
	var free, maybe []*jetstream.ObjectInfo
	for _, o := range objs {
		switch {
		case crawlmsg.IsRenderTaskBody(o.Name):
			// A render task may wait in CRAWL_RENDER longer than any window; its renderer
			// removes the body once the task is done.
		case !now.After(o.ModTime.Add(window)):
			// Its page may still come.
		case bodyUnreferenced(o.ModTime, window, state, now):
			free = append(free, o)
		default:
			maybe = append(maybe, o)
		}
	}
	var keptErr error
	if len(maybe) > 0 {
		// Pages older than these bodies are kept (a tap lags): look at when the kept pages
		// arrived, over the span of these bodies' windows.
		from, to := maybe[0].ModTime, maybe[0].ModTime
		for _, o := range maybe {
			from, to = minTime(from, o.ModTime), maxTime(to, o.ModTime)
		}
		kept, err := s.keptPageTimes(ctx, state, from.Add(-storeSkew), to.Add(window))
		if err != nil {
			// The bodies already known free still go.
			keptErr = err
		} else {
			for _, o := range maybe {
				if !bodyPinned(o.ModTime, window, kept) {
					free = append(free, o)
				}
			}
		}
	}
	if len(free) == 0 {
		return 0, keptErr
	}
	// Read after crawl.pages: a page leaves that stream only once parked (or done), so one
	// neither read saw was not given up, or was replayed or dropped since.
	parked, err := s.parkedPageObjects(ctx)
	if err != nil {
		return 0, errors.Join(err, keptErr)
	}
	n := 0
	for _, o := range free {
		if parked[o.Name] {
			continue
		}
		if err := s.deleteBody(ctx, o.Name); err != nil {
			return n, fmt.Errorf("delete body %s: %w", o.Name, err)
		}
		n++
	}
	return n, keptErr
}

// deadScanBatch bounds how many dead letters, each up to a page message, one fetch of
// parkedPageObjects holds.
const deadScanBatch = 16

// parkedPageObjects returns the names of the objects named by the pages parked in
// CRAWL_DEAD: given up by a stage, such a page has left crawl.pages but its letter may be
// replayed, and then its objects are read again. Its letters are read whole (a rendered
// page's exchanges are listed in the payload), up to the last one stored when the read
// began: letters parked since were pages still in crawl.pages when the sweep read it. A
// missing CRAWL_DEAD (a stack older than dead letters) parks nothing. A letter that cannot
// be read as a page pins nothing (no replay of it can be parsed either), logged. An error
// means the names are not all known: the caller must delete nothing.
func (s *Service) parkedPageObjects(ctx context.Context) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Common.AckWait)
	defer cancel()
	names := map[string]bool{}
	var bad uint64
	var badErr error
	err := natsx.ScanDead(ctx, s.js, natsx.DeadScan{Stream: topology.StreamPages, Batch: deadScanBatch, Idle: s.cfg.Common.AckWait},
		func(m jetstream.Msg, md *jetstream.MsgMetadata) error {
			objs, err := pageObjects(m.Headers(), m.Data())
			if err != nil {
				if bad++; badErr == nil {
					badErr = fmt.Errorf("dead letter %d: %w", md.Sequence.Stream, err)
				}
			}
			for _, name := range objs {
				names[name] = true
			}
			return nil
		})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("dead pages: %w", err)
	}
	if bad > 0 {
		s.log.Warn("dead letters of crawl.pages unreadable as pages pin no body", "letters", bad, "err", badErr)
	}
	return names, nil
}

// pageObjects returns the names of the CRAWL_BODIES objects a page message (or its dead
// letter, which keeps its headers and data) names (crawlmsg.Page.Objects).
func pageObjects(h nats.Header, data []byte) ([]string, error) {
	p, err := crawlmsg.DecodePage(h, data)
	if err != nil {
		return nil, err
	}
	return p.Objects(topology.BodiesBucket), nil
}

// keptPageTimes returns, in order, when the pages crawl.pages still keeps arrived, for
// those that arrived between from and to. It reads headers only, through an ephemeral
// consumer without acks, deleted when done: on an interest stream any consumer holds what
// it has not been sent, so it must not outlive the scan.
func (s *Service) keptPageTimes(ctx context.Context, pages jetstream.StreamState, from, to time.Time) ([]time.Time, error) {
	if pages.Msgs == 0 || pages.LastTime.Before(from) {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Common.AckWait)
	defer cancel()
	cons, err := s.js.CreateConsumer(ctx, topology.StreamPages, jetstream.ConsumerConfig{
		Description:       "parser body sweep",
		FilterSubject:     topology.SubjectPages,
		DeliverPolicy:     jetstream.DeliverByStartTimePolicy,
		OptStartTime:      &from,
		AckPolicy:         jetstream.AckNonePolicy,
		HeadersOnly:       true,
		InactiveThreshold: 30 * time.Second,
		MemoryStorage:     true,
	})
	if err != nil {
		return nil, fmt.Errorf("scan kept pages: %w", err)
	}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer dcancel()
		_ = s.js.DeleteConsumer(dctx, topology.StreamPages, cons.CachedInfo().Name)
	}()
	var times []time.Time
	for {
		mb, err := cons.Fetch(256, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return nil, fmt.Errorf("scan kept pages: %w", err)
		}
		got, done := 0, false
		for m := range mb.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				return nil, fmt.Errorf("scan kept pages: %w", err)
			}
			// A page arriving during the scan is later than every window.
			if md.Timestamp.After(to) {
				done = true
				continue
			}
			times = append(times, md.Timestamp)
			if md.NumPending == 0 {
				done = true
			}
		}
		if err := mb.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, fmt.Errorf("scan kept pages: %w", err)
		}
		if done {
			return times, nil
		}
		if got == 0 {
			// Nothing came within the wait: the scan is complete only if nothing is
			// pending (the pages left may have been acked meanwhile); a partial list
			// would free bodies still named.
			info, err := cons.Info(ctx)
			if err != nil {
				return nil, fmt.Errorf("scan kept pages: %w", err)
			}
			if info.NumPending == 0 {
				return times, nil
			}
		}
	}
}

// bodyPinned tells whether a kept page (kept: arrival times, in order) arrived within the
// window after a body stored at stored: that page may name it.
func bodyPinned(stored time.Time, window time.Duration, kept []time.Time) bool {
	lo := stored.Add(-storeSkew)
	i := sort.Search(len(kept), func(i int) bool { return !kept[i].Before(lo) })
	return i < len(kept) && !kept[i].After(stored.Add(window))
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// bodyUnreferenced tells whether no message of the pages stream can name a body stored at
// stored. Its page was published within window after it (the fetcher stops retrying at
// the task's lease deadline), and an interest stream keeps its messages in order of
// arrival, so the page is gone once the oldest message still kept arrived later than
// that. An empty stream keeps nothing: then only the window must have passed.
func bodyUnreferenced(stored time.Time, window time.Duration, pages jetstream.StreamState, now time.Time) bool {
	publishedBy := stored.Add(window)
	if pages.Msgs == 0 {
		return now.After(publishedBy)
	}
	return pages.FirstTime.After(publishedBy)
}

// encodeObjectName is the object store's encoding of an object name in its subjects.
func encodeObjectName(name string) string { return base64.URLEncoding.EncodeToString([]byte(name)) }
