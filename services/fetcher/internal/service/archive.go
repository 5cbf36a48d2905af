package service

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/services/fetcher/internal/fetch"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/topology"
)

// attachCapture puts on the page what an archive needs beside the decoded body: the
// request and response heads, the remote address, and the body as received when it is
// not the decoded body (a gzip body). c is where the capture is kept (the caller's
// allocation).
func attachCapture(page *crawlmsg.Page, c *crawlmsg.Capture, resp *fetch.Response) {
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

// rawObject names the object holding a page's body as received when it goes by reference.
func rawObject(lease string) string { return "raw:" + lease }

// storeRaw decides how the page's body as received travels. It goes inline (a header)
// only when the decoded body goes inline too and both fit the inline threshold; otherwise
// it is put in the bodies object store and the capture names it, so a large body is never
// inlined twice. The parser's sweeper removes it with the page's other objects.
func (s *Service) storeRaw(deadline time.Time, task *crawlmsg.FetchTask, page *crawlmsg.Page) error {
	c := page.Meta.Capture
	if c == nil || len(page.Raw) == 0 {
		return nil
	}
	meta, err := crawlmsg.Marshal(&page.Meta)
	if err != nil {
		return fmt.Errorf("encode page %s: %w", task.URL, err)
	}
	limit := s.inlineMax(len(meta))
	if inline := int64(len(page.Body) + base64.StdEncoding.EncodedLen(len(page.Raw))); inline <= limit {
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
