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
	var fetched []*warc.Exchange // built[k]'s exchange when a fetch's, else nil
	for i, it := range items {
		switch {
		case it == nil:
			continue
		case it.rendered != nil:
			built = append(built, it.rendered...)
			fetched = append(fetched, make([]*warc.Exchange, len(it.rendered))...)
		default:
			built = append(built, warc.Build(it.x))
			fetched = append(fetched, it.x)
		}
		written = append(written, i)
	}
	_, n, err := s.w.WriteBatch(built)
	if err != nil {
		s.fail("write", err, items, errs)
		return errs
	}
	s.m.bytes.Add(float64(n))
	var stored []string
	var storedCaps []last
	for k, b := range built {
		for _, r := range b.Records {
			s.m.records.WithLabelValues(recordType(r)).Inc()
		}
		x := fetched[k]
		if x != nil && x.Revisit == nil && okStatus(x) && s.cfg.Revisits {
			stored = append(stored, x.URL)
			storedCaps = append(storedCaps, last{Digest: b.PayloadDigest, Date: x.Date})
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
	if s.digs != nil && len(stored) > 0 {
		// Best effort: the records are durable; a digest not stored only makes the next
		// identical payload of the URL a full copy instead of a revisit.
		dctx, cancel := context.WithTimeout(ctx, s.cfg.Common.AckWait)
		if err := s.digs.store(dctx, stored, storedCaps); err != nil {
			s.m.failures.WithLabelValues("digests").Inc()
			s.log.Warn("revisit digests not stored", "err", err)
		}
		cancel()
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

// okStatus: only a 200's payload is a capture an identical payload may refer to.
func okStatus(x *warc.Exchange) bool {
	st, _ := warc.ParseHead(x.ResponseHead)
	return st == http.StatusOK
}

// revisits turns captures into revisit records: a 304 (server-not-modified) and a 200
// whose payload digest equals the last one archived in full for its URL
// (identical-payload-digest). Pages of one batch see each other in order.
func (s *Service) revisits(ctx context.Context, items []*item) error {
	if s.digs == nil {
		return nil
	}
	var urls []string
	for _, it := range items {
		if it != nil && it.x != nil {
			urls = append(urls, it.x.URL)
		}
	}
	if len(urls) == 0 {
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, s.cfg.Common.AckWait)
	defer cancel()
	lasts, err := s.digs.lookup(lctx, urls)
	if err != nil {
		return err
	}
	seen := map[string]*last{}
	j := 0
	for _, it := range items {
		if it == nil || it.x == nil {
			continue
		}
		prev := lasts[j]
		j++
		if p, ok := seen[it.x.URL]; ok {
			prev = p
		}
		status, _ := warc.ParseHead(it.x.ResponseHead)
		switch {
		case status == http.StatusNotModified:
			it.x.Revisit = &warc.Revisit{Profile: warc.ProfileServerNotModified}
			if prev != nil {
				it.x.Revisit.RefersURI, it.x.Revisit.RefersDate = it.x.URL, prev.Date
			}
			s.m.revisits.WithLabelValues("server-not-modified").Inc()
		case status == http.StatusOK && prev != nil && prev.Digest == warc.Digest(it.x.Payload):
			it.x.Revisit = &warc.Revisit{Profile: warc.ProfileIdenticalPayload, RefersURI: it.x.URL, RefersDate: prev.Date}
			s.m.revisits.WithLabelValues("identical-payload-digest").Inc()
		case status == http.StatusOK:
			seen[it.x.URL] = &last{Digest: warc.Digest(it.x.Payload), Date: it.x.Date}
		}
	}
	return nil
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

// object reads a body stored by reference. A missing object cannot come back: the page
// is terminated.
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
		return nil, fmt.Errorf("archiver: %s: body %s has %d octets, the page says %d", pageURL, ref.Name, len(b), ref.Size)
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
