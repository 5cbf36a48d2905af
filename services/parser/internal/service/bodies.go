package service

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/topology"
)

// Bodies above the fetcher's inline threshold are objects in topology.BodiesBucket. The
// parser reads them, and they are removed once no consumer of crawl.pages can still ask
// for them: at once after parsing when the parser is the stream's only consumer, else by
// the sweeper once the page is gone from the stream (every tap acked it).

const (
	// bodySweepInterval is how often leftover bodies are looked for.
	bodySweepInterval = 30 * time.Second
	// publishSlack covers the fetcher's publish floor (it may retry its page up to 5 s
	// past the lease deadline) and clock skew between the NATS server and this process.
	publishSlack = 15 * time.Second
)

// resolveBody reads a page body stored by reference. A missing object cannot come back
// (the page was published after its body was stored, so it was removed): the page is
// terminated and counted rather than retried.
func (s *Service) resolveBody(ctx context.Context, url string, ref *crawlmsg.BodyRef) ([]byte, error) {
	if ref.Bucket != topology.BodiesBucket || ref.Name == "" {
		return nil, natsx.Permanent(fmt.Errorf("parser: %s: body reference %+v outside bucket %s", url, *ref, topology.BodiesBucket))
	}
	gctx, cancel := context.WithTimeout(ctx, s.cfg.Common.AckWait)
	defer cancel()
	body, err := s.bodies.GetBytes(gctx, ref.Name)
	switch {
	case errors.Is(err, jetstream.ErrObjectNotFound):
		s.m.bodies.WithLabelValues("missing").Inc()
		s.log.Error("page body gone before it was parsed", "url", url, "object", ref.Name)
		return nil, natsx.Permanent(fmt.Errorf("parser: %s: body %s: %w", url, ref.Name, err))
	case err != nil:
		return nil, fmt.Errorf("parser: %s: body %s: %w", url, ref.Name, err)
	case int64(len(body)) != ref.Size:
		return nil, fmt.Errorf("parser: %s: body %s has %d octets, the page says %d", url, ref.Name, len(body), ref.Size)
	}
	s.m.bodies.WithLabelValues("read").Inc()
	return body, nil
}

// releaseBodies deletes the bodies of pages just parsed when the parser is the only
// consumer of crawl.pages: no tap can ask for them. With taps, the sweeper waits for
// the pages to leave the stream. A failed delete is left to the sweeper too.
func (s *Service) releaseBodies(ctx context.Context, refs []*crawlmsg.BodyRef, errs []error) {
	var names []string
	for i, ref := range refs {
		if ref != nil && errs[i] == nil {
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
	if err := s.bodies.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return err
	}
	st, err := s.js.Stream(ctx, "OBJ_"+topology.BodiesBucket)
	if err != nil {
		return err
	}
	// The marker's subject is fixed by the object store: $O.<bucket>.M.<base64url(name)>.
	err = st.Purge(ctx, jetstream.WithPurgeSubject(fmt.Sprintf("$O.%s.M.%s", topology.BodiesBucket, encodeObjectName(name))))
	if err != nil {
		return err
	}
	s.m.bodies.WithLabelValues("deleted").Inc()
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

// SweepBodies deletes every body whose page can no longer be read from crawl.pages, and
// returns how many it deleted.
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
	n := 0
	for _, o := range objs {
		if !bodyUnreferenced(o.ModTime, window, state, time.Now()) {
			continue
		}
		if err := s.deleteBody(ctx, o.Name); err != nil {
			return n, fmt.Errorf("delete body %s: %w", o.Name, err)
		}
		n++
	}
	return n, nil
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
