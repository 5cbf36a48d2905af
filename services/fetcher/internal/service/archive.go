package service

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/services/fetcher/internal/fetch"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/topology"
)

// attachCapture puts on the page what an archive needs beside the decoded body: the
// request and response heads, the remote address, and the body as received when it is
// not the decoded body (a gzip body). It does so only while an archive is written (the
// archiver's consumer of crawl.pages exists; s.archive), the one reader of them, and never
// for a decoded body whose octets as received were not kept (the archiver appeared while
// it was fetched): a page without a capture is archived with heads rebuilt from its
// fields, which describe the decoded body, not with a decoded body under the heads of a
// gzip one. c is where the capture is kept (the caller's allocation).
func (s *Service) attachCapture(page *crawlmsg.Page, c *crawlmsg.Capture, resp *fetch.Response) {
	if !s.archive.Exists() || (resp.Decoded && resp.Raw == nil) {
		return
	}
	*c = crawlmsg.Capture{
		Request:  resp.RequestHead,
		Response: resp.ResponseHead,
		Verbatim: resp.Verbatim,
		IP:       resp.RemoteIP,
	}
	page.Meta.Capture = c
	if resp.Raw != nil {
		page.Meta.Capture.RawSize = int64(len(resp.Raw))
		page.Raw = resp.Raw
	}
}

// keepRaw tells the HTTP client whether to keep a gzip body's octets as received.
func (s *Service) keepRaw() bool { return s.archive.Exists() }

// rawObject names the object holding a page's body as received when it goes by reference.
func rawObject(lease string) string { return topology.RawObject(lease) }

// headsLen is what a page's capture adds to its payload besides the body and the body as
// received: the heads, which always travel in the payload (bounded by
// TRAWL_MAX_HEADER_BYTES), so they count with the metadata against the message size and
// not against the inline threshold.
func headsLen(page *crawlmsg.Page) int {
	if c := page.Meta.Capture; c != nil {
		return len(c.Request) + len(c.Response)
	}
	return 0
}

// storeRaw decides how the page's body as received travels: in the payload after the
// body and the heads when it fits the inline threshold together with the body (the body
// counted only when it goes inline itself, see storePage), otherwise as an object in the
// bodies store named by the capture, so a large body never makes a message too large.
// The parser's sweeper removes it with the page's other objects.
func (s *Service) storeRaw(deadline time.Time, task *crawlmsg.FetchTask, page *crawlmsg.Page) error {
	c := page.Meta.Capture
	if c == nil || len(page.Raw) == 0 {
		return nil
	}
	meta, err := crawlmsg.Marshal(&page.Meta)
	if err != nil {
		return fmt.Errorf("encode page %s: %w", task.URL, err)
	}
	limit := s.inlineMax(len(meta) + headsLen(page))
	body := int64(len(page.Body))
	if body > limit {
		body = 0 // goes by reference
	}
	if body+int64(len(page.Raw)) <= limit {
		return nil
	}
	ref := &crawlmsg.BodyRef{Bucket: topology.BodiesBucket, Name: rawObject(task.Lease), Size: int64(len(page.Raw))}
	wait := publishTimeout + time.Duration(ref.Size/(8<<20))*time.Second
	if err := s.retry(deadline, task.URL, "raw body", wait, func(ctx context.Context) error {
		_, err := s.bodies.Put(ctx, jetstream.ObjectMeta{Name: ref.Name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: s.chunkSize()}}, bytes.NewReader(page.Raw))
		return err
	}); err != nil {
		return fmt.Errorf("store raw body of %s: %w", task.URL, err)
	}
	s.m.bodiesByRef.Inc()
	cc := *c
	cc.RawRef = ref
	page.Meta.Capture = &cc
	page.Raw = nil
	return nil
}

// dropRaw deletes a page's stored raw body when the page itself can never be stored.
func (s *Service) dropRaw(page *crawlmsg.Page) {
	c := page.Meta.Capture
	if c == nil || c.RawRef == nil {
		return
	}
	dctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
	defer cancel()
	if err := s.bodies.Delete(dctx, c.RawRef.Name); err != nil {
		s.log.Warn("delete unreferenced raw body", "name", c.RawRef.Name, "err", err)
	}
}
