package service

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/services/archiver/internal/warc"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/digestindex"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/topology"
)

// item is one page of a batch on its way to the file.
type item struct {
	x   *warc.Exchange
	key string // the message's id
	cap string // its capture record's id
	// rendered holds a rendered page's records (the DOM and the browser's exchanges); x is
	// then nil.
	rendered []*warc.Built
	// For revisits: the payload digest of a 200 (set by revisits), the payload octets a
	// revisit saves, and the previous fetch of the URL (unix ms, 0 if unknown).
	digest    string
	saved     int64
	prevFetch int64
}

// HandleBatch writes every page of the batch, fsyncs the file once, and returns one result
// per message for natsx to settle: nil (ack: the records are durable, or were already), a
// permanent error (terminate: malformed page, body gone), or a retryable one (nak: the
// digest lookup, a body read or the file failed; nothing of that page is in the file as
// a whole record, or it is and the retry finds it by id).
func (s *Service) HandleBatch(ctx context.Context, msgs []jetstream.Msg) []error {
	start := time.Now()
	errs := make([]error, len(msgs))
	items := make([]*item, len(msgs))
	for i, m := range msgs {
		key := natsx.MsgID(m)
		capID := warc.RecordID(key + "/response")
		if s.written.has(capID) {
			s.m.skipped.Inc()
			continue
		}
		page, err := crawlmsg.DecodePage(m.Headers(), m.Data())
		if err != nil {
			errs[i] = fmt.Errorf("archiver: decode page: %w", err)
			continue
		}
		if page.Meta.Rendered != nil {
			built, err := s.rendering(ctx, page, key)
			if err != nil || built == nil {
				errs[i] = err // nil: nothing to archive (a failed rendering that made no request)
				continue
			}
			// A rendering's capture is its last record (the DOM, or a failed rendering's
			// last response), which the check above cannot name before the page is read.
			last := built[len(built)-1].CaptureID
			if s.written.has(last) {
				s.m.skipped.Inc()
				continue
			}
			items[i] = &item{key: key, cap: last, rendered: built}
			continue
		}
		x, err := s.exchange(ctx, page, key)
		if err != nil {
			errs[i] = err
			continue
		}
		items[i] = &item{x: x, key: key, cap: capID}
		if page.Meta.Recrawl != nil {
			items[i].prevFetch = page.Meta.Recrawl.LastFetch
		}
	}
	if err := s.revisits(ctx, items); err != nil {
		s.m.failures.WithLabelValues("lookup").Inc()
		s.log.Warn("digest lookup failed; pages will be redelivered", "pages", len(msgs), "err", err)
		for i, it := range items {
			if it != nil {
				errs[i] = err
			}
		}
		return errs
	}

	var built []*warc.Built
	var written []int
	for i, it := range items {
		switch {
		case it == nil:
			continue
		case it.rendered != nil:
			built = append(built, it.rendered...)
		default:
			built = append(built, warc.Build(it.x))
		}
		written = append(written, i)
	}
	_, n, err := s.w.WriteBatch(built)
	if err != nil {
		s.fail("write", err, items, errs)
		return errs
	}
	s.m.bytes.Add(float64(n))
	for _, b := range built {
		for _, r := range b.Records {
			s.m.records.WithLabelValues(recordType(r)).Inc()
		}
	}
	if err := s.w.Sync(); err != nil {
		s.fail("sync", err, items, errs)
		return errs
	}
	for _, i := range written {
		s.written.add(items[i].cap)
	}
	s.m.batch.Observe(time.Since(start).Seconds())
	if s.index != nil {
		s.remember(ctx, items)
	}
	return errs
}

// fail marks every page still to be acked of a failed batch for redelivery. The file it
// was written to is abandoned by the writer (it may end inside a record): the next write
// opens a new file, and the next start cuts and seals the abandoned one.
func (s *Service) fail(stage string, err error, items []*item, errs []error) {
	s.m.failures.WithLabelValues(stage).Inc()
	s.log.Error("archive write failed; pages will be redelivered", "stage", stage, "err", err)
	for i, it := range items {
		if it != nil {
			errs[i] = err
		}
	}
}

func recordType(r *warc.Record) string {
	for _, f := range r.Fields {
		if f.Name == "WARC-Type" {
			return f.Value
		}
	}
	return ""
}

// revisits turns captures into revisit records: a 304 (server-not-modified, referring to
// the URL's previous fetch when the page carries its recrawl state) and a 200 whose
// payload digest is in the digest index, whatever its URL (identical-payload-digest,
// referring to the capture the index holds). Pages of one batch see each other in order.
func (s *Service) revisits(ctx context.Context, items []*item) error {
	if s.index == nil {
		return nil
	}
	var digests []string
	var full []*item
	for _, it := range items {
		if it == nil || it.x == nil {
			continue
		}
		switch status, _ := warc.ParseHead(it.x.ResponseHead); status {
		case http.StatusNotModified:
			it.x.Revisit = &warc.Revisit{Profile: warc.ProfileServerNotModified}
			if it.prevFetch > 0 {
				it.x.Revisit.RefersURI, it.x.Revisit.RefersDate = it.x.URL, time.UnixMilli(it.prevFetch).UTC()
			}
			s.m.revisits.WithLabelValues("server-not-modified").Inc()
		case http.StatusOK:
			if len(it.x.Payload) == 0 {
				continue // a revisit would save nothing and depend on another file
			}
			it.digest = warc.Digest(it.x.Payload)
			digests = append(digests, it.digest)
			full = append(full, it)
		}
	}
	if len(full) == 0 {
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, s.cfg.Common.AckWait)
	defer cancel()
	origs, err := s.index.Lookup(lctx, digests)
	if err != nil {
		return fmt.Errorf("archiver: %w", err)
	}
	seen := map[string]*digestindex.Original{}
	for j, it := range full {
		o := origs[j]
		if o == nil {
			o = seen[it.digest]
		}
		if o == nil {
			seen[it.digest] = &digestindex.Original{URI: it.x.URL, Date: it.x.Date, RecordID: it.cap}
			continue
		}
		it.x.Revisit = &warc.Revisit{Profile: warc.ProfileIdenticalPayload, RefersURI: o.URI, RefersDate: o.Date, RefersID: o.RecordID}
		it.saved = int64(len(it.x.Payload))
		s.m.revisits.WithLabelValues("identical-payload-digest").Inc()
	}
	return nil
}

// remember adds the batch's 200s archived in full to the digest index and counts the
// payload octets its revisits saved, in the crawl's counters. Best effort: the records are
// durable; an original not added only makes the next identical payload a full copy, never
// a wrong revisit.
func (s *Service) remember(ctx context.Context, items []*item) {
	var digests []string
	var origs []digestindex.Original
	var revisits, saved int64
	for _, it := range items {
		switch {
		case it == nil || it.x == nil || it.digest == "":
		case it.x.Revisit == nil:
			digests = append(digests, it.digest)
			origs = append(origs, digestindex.Original{URI: it.x.URL, Date: it.x.Date, RecordID: it.cap})
		default:
			revisits++
			saved += it.saved
		}
	}
	if saved > 0 {
		s.m.saved.Add(float64(saved))
		s.saved.Add(saved)
	}
	dctx, cancel := context.WithTimeout(ctx, s.cfg.Common.AckWait)
	defer cancel()
	if _, err := s.index.Add(dctx, digests, origs); err != nil {
		s.m.failures.WithLabelValues("digests").Inc()
		s.log.Warn("payload digests not added to the index", "err", err)
	}
	if revisits > 0 {
		pipe := s.run.Redis.Pipeline()
		pipe.HIncrBy(dctx, digestindex.Stats(s.cfg.Common.RedisPrefix), digestindex.StatRevisits, revisits)
		pipe.HIncrBy(dctx, digestindex.Stats(s.cfg.Common.RedisPrefix), digestindex.StatSavedBytes, saved)
		if _, err := pipe.Exec(dctx); err != nil {
			s.m.failures.WithLabelValues("digests").Inc()
			s.log.Warn("dedup counters not updated", "revisits", revisits, "saved_bytes", saved, "err", err)
		}
	}
}

// exchange reads a fetched page into what the archive records.
func (s *Service) exchange(ctx context.Context, page *crawlmsg.Page, key string) (*warc.Exchange, error) {
	var err error
	meta := &page.Meta
	x := &warc.Exchange{
		Key:       key,
		URL:       meta.URL,
		Date:      time.UnixMilli(meta.FetchedAt).UTC(),
		Truncated: meta.Truncated,
	}
	c := meta.Capture
	switch {
	case c != nil && c.RawSize > 0 && c.RawRef != nil:
		x.Payload, err = s.object(ctx, meta.URL, c.RawRef)
	case c != nil && c.RawSize > 0:
		if int64(len(page.Raw)) != c.RawSize {
			return nil, natsx.Permanent(fmt.Errorf("archiver: %s: %w: capture says %d raw octets, the message carries %d", meta.URL, crawlmsg.ErrMalformed, c.RawSize, len(page.Raw)))
		}
		x.Payload = page.Raw
	case meta.BodyRef != nil:
		x.Payload, err = s.object(ctx, meta.URL, meta.BodyRef)
	default:
		x.Payload = page.Body
	}
	if err != nil {
		return nil, err
	}
	if c != nil && len(c.Request) > 0 && len(c.Response) > 0 {
		x.RequestHead, x.ResponseHead, x.IP = c.Request, c.Response, c.IP
	} else {
		// A page from a fetcher that kept no capture: the heads are rebuilt from what the
		// page says, in HTTP/1.1 form.
		x.RequestHead, x.ResponseHead = rebuildHeads(meta)
		if c != nil {
			x.IP = c.IP
		}
	}
	return x, nil
}

// object reads a body stored by reference. A missing object cannot come back, nor can one
// of another size become the page's: the page is terminated.
func (s *Service) object(ctx context.Context, pageURL string, ref *crawlmsg.BodyRef) ([]byte, error) {
	if ref.Bucket != topology.BodiesBucket || ref.Name == "" {
		return nil, natsx.Permanent(fmt.Errorf("archiver: %s: body reference %+v outside bucket %s", pageURL, *ref, topology.BodiesBucket))
	}
	gctx, cancel := context.WithTimeout(ctx, s.cfg.Common.AckWait)
	defer cancel()
	b, err := s.bodies.GetBytes(gctx, ref.Name)
	switch {
	case errors.Is(err, jetstream.ErrObjectNotFound):
		s.log.Error("page body gone before it was archived", "url", pageURL, "object", ref.Name)
		return nil, natsx.Permanent(fmt.Errorf("archiver: %s: body %s: %w", pageURL, ref.Name, err))
	case err != nil:
		return nil, fmt.Errorf("archiver: %s: body %s: %w", pageURL, ref.Name, err)
	case int64(len(b)) != ref.Size:
		// Not the body the page was published with, and no retry reads another.
		return nil, natsx.Permanent(fmt.Errorf("archiver: %s: body %s has %d octets, the page says %d", pageURL, ref.Name, len(b), ref.Size))
	}
	return b, nil
}

// rebuildHeads writes a request and response head in HTTP/1.1 form from a page's fields.
func rebuildHeads(meta *crawlmsg.PageMeta) (req, resp []byte) {
	u, err := url.Parse(meta.URL)
	target, host := "/", meta.Host
	if err == nil {
		target, host = u.RequestURI(), u.Host
	}
	req = []byte("GET " + target + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n")
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %03d %s\r\n", meta.Status, http.StatusText(meta.Status))
	names := make([]string, 0, len(meta.Header))
	for k := range meta.Header {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		for _, v := range meta.Header[k] {
			b.WriteString(k + ": " + v + "\r\n")
		}
	}
	b.WriteString("\r\n")
	return req, []byte(b.String())
}
