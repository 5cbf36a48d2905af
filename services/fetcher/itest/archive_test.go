package itest

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"net/http"
	"strings"
	"testing"

	"github.com/trawl/trawl/shared/crawlmsg"
)

func gzipOf(t *testing.T, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write(data)
	zw.Close()
	return b.Bytes()
}

// TestCaptureStored: every page carries what an archive needs — the request sent, the
// response head as received, the remote IP — and a gzip body as received travels inline
// beside the decoded body only when both fit the inline threshold together; otherwise it
// is an object, so a large body is never inlined twice. The payload stays the decoded body.
func TestCaptureStored(t *testing.T) {
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
		{"/large", large, true, true},  // body by reference, so raw too
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
