package itest

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

func gzipOf(t *testing.T, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write(data)
	zw.Close()
	return b.Bytes()
}

// archiving declares the archiver's consumer of crawl.pages, as a running archiver does:
// fetchers keep what an archive needs only while it exists.
func (st *stack) archiving() {
	st.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := st.js.CreateOrUpdateConsumer(ctx, topology.StreamPages, topology.ArchiverConsumer(st.common.Timings())); err != nil {
		st.t.Fatal(err)
	}
}

// TestCaptureStored: while an archive is written, every page carries what it needs — the
// request sent, the response head as received, the remote IP — and a gzip body as
// received travels in the payload after the decoded body only when both fit the inline
// threshold together (the body counted when it goes inline itself); otherwise it is an
// object. The decoded body stays what a reader of the page gets as its body.
func TestCaptureStored(t *testing.T) {
	t.Parallel()
	small := []byte(strings.Repeat("<p>small and compressible</p>", 100))
	noise := make([]byte, 40<<10)
	rand.Read(noise)                                                       // gzip cannot shrink it: decoded and raw are both ~40 KiB
	large := []byte(strings.Repeat("<p>large but compressible</p>", 4000)) // ~116 KiB decoded
	served := map[string][]byte{"/small": gzipOf(t, small), "/noise": gzipOf(t, noise), "/large": gzipOf(t, large)}
	gz := func(path string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(served[path])
		}
	}
	st := newStack(t)
	s := newSite(t, map[string]http.HandlerFunc{
		"/robots.txt": text(robotsTxt),
		"/small":      gz("/small"),
		"/noise":      gz("/noise"),
		"/large":      gz("/large"),
	})
	st.archiving()
	st.start(st.config(map[string]string{"TRAWL_BODY_INLINE_MAX": "64KiB"}), "a")
	st.warmRobots(s)

	cases := []struct {
		path     string
		decoded  []byte
		rawByRef bool
		bodyRef  bool
	}{
		{"/small", small, false, false},
		{"/noise", noise, true, false}, // body inline, but body + raw would not fit
		{"/large", large, false, true}, // body by reference, the small raw body inline
	}
	for _, c := range cases {
		t.Run(c.path, func(t *testing.T) {
			tk := task(s.URL + c.path)
			st.publishTask(tk)
			if o := st.outcome(tk.Lease); o.Kind != crawlmsg.OutcomeFetched {
				t.Fatalf("outcome %+v", o)
			}
			p := st.page(tk.Lease)
			cp := p.Meta.Capture
			if cp == nil {
				t.Fatal("page without capture")
			}
			if !cp.Verbatim || !bytes.HasPrefix(cp.Request, []byte("GET "+c.path+" HTTP/1.1\r\n")) || !bytes.HasSuffix(cp.Request, []byte("\r\n\r\n")) {
				t.Errorf("request %q verbatim %v", cp.Request, cp.Verbatim)
			}
			if !bytes.HasPrefix(cp.Response, []byte("HTTP/1.1 200 OK\r\n")) || !bytes.Contains(cp.Response, []byte("Content-Encoding: gzip\r\n")) {
				t.Errorf("response head %q", cp.Response)
			}
			if cp.IP != "127.0.0.1" {
				t.Errorf("ip %q", cp.IP)
			}
			if cp.RawSize != int64(len(served[c.path])) || (cp.RawRef != nil) != c.rawByRef || (p.Meta.BodyRef != nil) != c.bodyRef {
				t.Fatalf("raw size %d ref %v, body ref %v; want %d, by ref %v, body by ref %v", cp.RawSize, cp.RawRef, p.Meta.BodyRef, len(served[c.path]), c.rawByRef, c.bodyRef)
			}
			raw := p.Raw
			if c.rawByRef {
				if len(p.Raw) != 0 {
					t.Error("raw body both inline and by reference")
				}
				raw = st.object(cp.RawRef)
			}
			if !bytes.Equal(raw, served[c.path]) {
				t.Errorf("raw body of %d octets is not the %d served", len(raw), len(served[c.path]))
			}
			body := p.Body
			if c.bodyRef {
				body = st.object(p.Meta.BodyRef)
			}
			if !bytes.Equal(body, c.decoded) {
				t.Errorf("the page's body is not the decoded body")
			}
		})
	}
}

func (st *stack) object(ref *crawlmsg.BodyRef) []byte {
	st.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	obs, err := st.js.ObjectStore(ctx, ref.Bucket)
	if err != nil {
		st.t.Fatal(err)
	}
	b, err := obs.GetBytes(ctx, ref.Name)
	if err != nil {
		st.t.Fatal(err)
	}
	return b
}

// noise is text whose gzip is about n octets: n random octets in base64, which gzip
// brings back to about their own size (decoded, the page is a third larger).
func noise(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	rand.Read(b)
	return []byte(base64.StdEncoding.EncodeToString(b))
}

// TestLargeCompressedPagesPublished: gzip pages whose compressed bodies are far above
// JetStream's 64 KiB header limit — 50 KB, 300 KB (sent chunked, as nginx sends gzip), 600
// KB, 2 MB — are stored with the default inline threshold while an archive is written:
// each page is published, its outcome is fetched, and its body as received comes back
// octet for octet, in the payload or by reference, never in a header.
func TestLargeCompressedPagesPublished(t *testing.T) {
	t.Parallel()
	served, decoded := map[string][]byte{}, map[string][]byte{}
	routes := map[string]http.HandlerFunc{"/robots.txt": text(robotsTxt)}
	for _, c := range []struct {
		path    string
		size    int
		chunked bool
	}{{"/50k", 50_000, false}, {"/300k", 300_000, true}, {"/600k", 600_000, false}, {"/2m", 2_000_000, false}} {
		decoded[c.path] = noise(t, c.size)
		served[c.path] = gzipOf(t, decoded[c.path])
		body := served[c.path]
		routes[c.path] = func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.Header().Set("Content-Encoding", "gzip")
			if !c.chunked {
				w.Header().Set("Content-Length", strconv.Itoa(len(body)))
				w.Write(body)
				return
			}
			for p := body; len(p) > 0; {
				n := min(len(p), 16<<10)
				w.Write(p[:n])
				w.(http.Flusher).Flush()
				p = p[n:]
			}
		}
	}
	st := newStack(t)
	s := newSite(t, routes)
	st.archiving()
	// Reading, decoding and storing megabytes under the race detector on a busy machine
	// takes seconds (under CI a 600 KB page took 2 s, a 5 MB one 20 s): the harness's 5 s
	// fetch timeout would cut what this test is about, the body's way into the stream. The
	// stack's outcome wait follows the longer timeout.
	st.start(st.config(map[string]string{"TRAWL_FETCH_TIMEOUT": "30s"}), "a")
	st.warmRobots(s)
	for _, c := range []struct {
		path              string
		bodyRef, rawByRef bool
	}{
		{"/50k", false, false},
		{"/300k", false, false},
		{"/600k", false, true}, // body inline (800 KB); body and raw together over 1 MiB
		{"/2m", true, true},
	} {
		t.Run(c.path[1:], func(t *testing.T) {
			tk := task(s.URL + c.path)
			st.publishTask(tk)
			if o := st.outcome(tk.Lease); o.Kind != crawlmsg.OutcomeFetched {
				t.Fatalf("outcome %+v", o)
			}
			p := st.page(tk.Lease)
			cp := p.Meta.Capture
			if cp == nil || p.Meta.V != crawlmsg.PageCaptureVersion {
				t.Fatalf("page v=%d, capture %+v", p.Meta.V, cp)
			}
			if (cp.RawRef != nil) != c.rawByRef || (p.Meta.BodyRef != nil) != c.bodyRef {
				t.Errorf("raw by reference %v, body by reference %v; want %v, %v", cp.RawRef != nil, p.Meta.BodyRef != nil, c.rawByRef, c.bodyRef)
			}
			raw, body := p.Raw, p.Body
			if cp.RawRef != nil {
				raw = st.object(cp.RawRef)
			}
			if p.Meta.BodyRef != nil {
				body = st.object(p.Meta.BodyRef)
			}
			if cp.RawSize != int64(len(served[c.path])) || !bytes.Equal(raw, served[c.path]) {
				t.Errorf("raw body of %d octets (capture says %d) is not the %d served", len(raw), cp.RawSize, len(served[c.path]))
			}
			if !bytes.Equal(body, decoded[c.path]) {
				t.Errorf("the page's body (%d octets) is not the decoded body (%d)", len(body), len(decoded[c.path]))
			}
			if !bytes.Contains(cp.Response, []byte("Content-Encoding: gzip\r\n")) {
				t.Errorf("response head %q", cp.Response)
			}
		})
	}
}

// TestNoCaptureWithoutArchive: with no archiver's consumer, nothing is kept that no reader
// asks for — a gzip page carries no capture, its payload is the decoded body alone and no
// raw body is stored — until the consumer is made: its advisory turns the capture on.
func TestNoCaptureWithoutArchive(t *testing.T) {
	t.Parallel()
	page := []byte(strings.Repeat("<p>compressible</p>", 5000))
	served := gzipOf(t, page)
	st := newStack(t)
	s := newSite(t, map[string]http.HandlerFunc{
		"/robots.txt": text(robotsTxt),
		"/p": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(served)
		},
	})
	st.start(st.config(nil), "a")
	st.warmRobots(s)
	tk := task(s.URL + "/p")
	st.publishTask(tk)
	if o := st.outcome(tk.Lease); o.Kind != crawlmsg.OutcomeFetched {
		t.Fatalf("outcome %+v", o)
	}
	p := st.page(tk.Lease)
	if p.Meta.Capture != nil || p.Raw != nil || p.Meta.V != crawlmsg.Version || !bytes.Equal(p.Body, page) {
		t.Fatalf("page without an archive: v=%d capture %+v, raw %d octets, body %d octets", p.Meta.V, p.Meta.Capture, len(p.Raw), len(p.Body))
	}
	st.archiving()
	testwait.Eventually(t, waitFor, "a page with its capture once the archiver's consumer exists", func() bool {
		tk := task(s.URL + "/p")
		st.publishTask(tk)
		st.outcome(tk.Lease)
		p := st.page(tk.Lease)
		return p.Meta.Capture != nil && bytes.Equal(p.Raw, served)
	})
}
