package itest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/devstack/warccheck"
	"github.com/trawl/trawl/shared/topology"
)

// capturesByURL groups the archive's response and revisit records by target URI.
func capturesByURL(a *warccheck.Archive) map[string][]*warccheck.Record {
	out := map[string][]*warccheck.Record{}
	for _, r := range a.Captures() {
		out[r.Get("WARC-Target-URI")] = append(out[r.Get("WARC-Target-URI")], r)
	}
	return out
}

func payload(t *testing.T, r *warccheck.Record) []byte {
	t.Helper()
	_, p, err := r.HTTP()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestArchive(t *testing.T) {
	s := newStack(t, map[string]string{"TRAWL_ARCHIVE_OPERATOR": "ops@example.org"})
	stop := s.start()

	html := []byte("<html><body>plain</body></html>")
	text := []byte(strings.Repeat("compressible text ", 200))
	big := bytes.Repeat([]byte("B"), 3000)
	// Each page its own payload: an identical one would be a revisit of the first.
	textRef := []byte(strings.Repeat("text by reference ", 200))
	textV1 := []byte(strings.Repeat("text of a version 1 page ", 200))

	s.publish(exchange("http://a.example/plain", 200, "Content-Type: text/html\r\nX-Case: KeptAsSent\r\n", html, false), "l1")
	s.publish(exchange("http://a.example/gz", 200, "content-type: text/plain\r\n", text, true), "l2")
	byRef := exchange("http://a.example/big", 200, "Content-Type: application/octet-stream\r\n", big, false)
	byRef.Meta.BodyRef, byRef.Body = s.putObject("page:l3", big), nil
	s.publish(byRef, "l3")
	rawRef := exchange("http://a.example/bigz", 200, "Content-Type: text/plain\r\n", textRef, true)
	rawRef.Meta.Capture.RawRef = s.putObject("raw:l4", rawRef.Raw)
	rawRef.Meta.BodyRef, rawRef.Body, rawRef.Raw = s.putObject("page:l4", textRef), nil, nil
	s.publish(rawRef, "l4")
	// Another payload than /plain's, which would make /same's first capture a revisit.
	same := []byte("<html><body>fetched twice</body></html>")
	first := exchange("http://a.example/same", 200, "Content-Type: text/html\r\n", same, false)
	first.Meta.FetchedAt = time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC).UnixMilli()
	s.publish(first, "l5")
	s.publish(exchange("http://a.example/same", 200, "Content-Type: text/html\r\n", same, false), "l6")
	s.publish(exchange("http://a.example/nm", 304, "ETag: \"x\"\r\n", nil, false), "l7")
	cut := exchange("http://a.example/cut", 200, "Content-Type: text/html\r\n", html[:10], false)
	cut.Meta.Truncated = true
	s.publish(cut, "l8")
	// A gzip body of 300 KB as received travels in the payload (version 2) …
	noise := make([]byte, 300_000)
	rand.Read(noise)
	large := []byte(base64.StdEncoding.EncodeToString(noise))
	s.publish(exchange("http://a.example/gzlarge", 200, "Content-Type: text/plain\r\n", large, true), "l9")
	// … and a version 1 page, from a fetcher of the earlier release, is still read: the
	// heads in the metadata, the raw body in the Trawl-Raw-Body header.
	s.publishV1(exchange("http://a.example/v1gz", 200, "Content-Type: text/plain\r\n", textV1, true), "l10")
	bad := nats.NewMsg(topology.SubjectPages)
	bad.Data = []byte("no metadata")
	if _, err := s.js.PublishMsg(context.Background(), bad); err != nil {
		t.Fatal(err)
	}
	s.waitArchived()
	stop()

	a, err := warccheck.Check(s.dir)
	if err != nil {
		t.Fatalf("the archive does not read back:\n%v", err)
	}
	if len(a.Files) != 1 {
		t.Fatalf("files %v, want one", a.Files)
	}
	if info := a.Records[0]; info.Get("WARC-Type") != "warcinfo" || !bytes.Contains(info.Block, []byte("operator: ops@example.org\r\n")) ||
		!bytes.Contains(info.Block, []byte("robots: obey\r\n")) || !bytes.Contains(info.Block, []byte("software: trawl-archiver/")) {
		t.Errorf("warcinfo %q", info.Block)
	}
	caps := capturesByURL(a)
	one := func(url, typ string) *warccheck.Record {
		t.Helper()
		if len(caps[url]) != 1 || caps[url][0].Get("WARC-Type") != typ {
			t.Fatalf("%s: captures %d, want one %s", url, len(caps[url]), typ)
		}
		return caps[url][0]
	}
	cases := []struct {
		name, url string
		want      []byte
	}{
		{"inline body", "http://a.example/plain", html},
		{"gzip body as received", "http://a.example/gz", rawOf(t, s, "http://a.example/gz", text)},
		{"body by reference", "http://a.example/big", big},
		{"gzip body of 300 KB as received", "http://a.example/gzlarge", rawOf(t, s, "http://a.example/gzlarge", large)},
		{"version 1 page", "http://a.example/v1gz", rawOf(t, s, "http://a.example/v1gz", textV1)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := one(c.url, "response")
			if got := payload(t, r); !bytes.Equal(got, c.want) {
				t.Errorf("payload %d octets %q…, want %d", len(got), got[:min(len(got), 20)], len(c.want))
			}
			if r.Get("WARC-IP-Address") != "192.0.2.7" {
				t.Errorf("WARC-IP-Address %q", r.Get("WARC-IP-Address"))
			}
		})
	}
	t.Run("raw body by reference", func(t *testing.T) {
		r := one("http://a.example/bigz", "response")
		if got := payload(t, r); bytes.Equal(got, textRef) || !bytes.HasPrefix(got, []byte{0x1f, 0x8b}) {
			t.Errorf("payload is not the gzip octets as received")
		}
	})
	t.Run("head verbatim", func(t *testing.T) {
		head, _, _ := one("http://a.example/plain", "response").HTTP()
		if !bytes.Contains(head, []byte("X-Case: KeptAsSent\r\n")) || !bytes.HasPrefix(head, []byte("HTTP/1.1 200 Whatever\r\n")) {
			t.Errorf("head %q", head)
		}
	})
	t.Run("identical payload is a revisit", func(t *testing.T) {
		rs := caps["http://a.example/same"]
		if len(rs) != 2 || rs[0].Get("WARC-Type") != "response" || rs[1].Get("WARC-Type") != "revisit" {
			t.Fatalf("captures of /same: %d", len(rs))
		}
		rv := rs[1]
		if rv.Get("WARC-Profile") != "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest" ||
			rv.Get("WARC-Refers-To-Target-URI") != "http://a.example/same" ||
			rv.Get("WARC-Refers-To-Date") != rs[0].Get("WARC-Date") ||
			rv.Get("WARC-Payload-Digest") != rs[0].Get("WARC-Payload-Digest") {
			t.Errorf("revisit fields %+v", rv.Fields)
		}
		if _, p, _ := rv.HTTP(); len(p) != 0 {
			t.Errorf("revisit block carries %d payload octets", len(p))
		}
	})
	t.Run("304 is server-not-modified", func(t *testing.T) {
		if r := one("http://a.example/nm", "revisit"); r.Get("WARC-Profile") != "http://netpreserve.org/warc/1.1/revisit/server-not-modified" {
			t.Errorf("profile %q", r.Get("WARC-Profile"))
		}
	})
	t.Run("truncated body is marked", func(t *testing.T) {
		if r := one("http://a.example/cut", "response"); r.Get("WARC-Truncated") != "length" {
			t.Errorf("WARC-Truncated %q", r.Get("WARC-Truncated"))
		}
	})
	t.Run("index", func(t *testing.T) {
		if len(a.Index) != len(a.Captures()) {
			t.Errorf("%d index lines for %d captures", len(a.Index), len(a.Captures()))
		}
		for _, l := range a.Index {
			if l.URL == "http://a.example/plain" && (l.SURT != "example,a)/plain" || l.Mime != "text/html" || l.Status != "200") {
				t.Errorf("index line %+v", l)
			}
		}
	})
}

// rawOf is the gzip octets a page of the test carried for url.
func rawOf(t *testing.T, s *stack, url string, body []byte) []byte {
	t.Helper()
	// exchange compresses deterministically: the same input gives the same octets.
	return exchange(url, 200, "", body, true).Raw
}

// TestRotation: files are sealed at the size cap, each with its warcinfo and index, and
// their names sort in the order they were written.
func TestRotation(t *testing.T) {
	// One page per batch: a batch never spans two files, so this makes each capture its
	// own rotation point.
	s := newStack(t, map[string]string{"TRAWL_ARCHIVE_MAX_SIZE": "64KiB", "TRAWL_ARCHIVE_REVISITS": "false", "TRAWL_ARCHIVE_BATCH": "1"})
	stop := s.start()
	const pages = 12
	for i := range pages {
		body := make([]byte, 20<<10)
		rand.Read(body) // incompressible: each capture takes its full size in the file
		s.publish(exchange("http://a.example/r/"+string(rune('a'+i)), 200, "Content-Type: application/octet-stream\r\n", body, false), "r"+string(rune('a'+i)))
	}
	s.waitArchived()
	stop()
	a, err := warccheck.Check(s.dir)
	if err != nil {
		t.Fatalf("the archive does not read back:\n%v", err)
	}
	if len(a.Files) < 3 {
		t.Fatalf("files %v, want rotation at 64 KiB", a.Files)
	}
	for _, f := range a.Files {
		st, err := os.Stat(filepath.Join(s.dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > 64<<10+25<<10 {
			t.Errorf("%s has %d octets: rotated late", f, st.Size())
		}
	}
	// Written order is the order of the URLs; sorted names must give the same order.
	var order []string
	names := append([]string(nil), a.Files...)
	sort.Strings(names)
	for _, f := range names {
		for _, r := range a.Captures() {
			if r.File == f {
				order = append(order, r.Get("WARC-Target-URI"))
			}
		}
	}
	if len(order) != pages || !sort.StringsAreSorted(order) {
		t.Errorf("captures in file-name order: %v", order)
	}
}

// TestCrashRecovery: an archiver that wrote and synced a batch but died before acking it,
// mid-way through the next record, leaves an open file ending in a partial record. The
// next start cuts the file after its last whole record and seals it, and the redelivered
// pages, already whole in it, are acked without being written again.
func TestCrashRecovery(t *testing.T) {
	s := newStack(t, nil)
	const pages = 5
	dead := s.newService()
	for i := range pages {
		s.publish(exchange("http://a.example/c/"+string(rune('a'+i)), 200, "Content-Type: text/html\r\n", []byte("<p>page "+string(rune('a'+i))+"</p>"), false), "c"+string(rune('a'+i)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	msgs := natsembed.Hold(t, s.js, topology.StreamPages, topology.ConsumerArchiver, pages, waitFor)
	for i, err := range dead.HandleBatch(ctx, msgs) {
		if err != nil {
			t.Fatalf("page %d: %v", i, err)
		}
	}
	// The process dies here: no ack, and half of a further record on disk.
	dead.Close()
	open, _ := filepath.Glob(filepath.Join(s.dir, "*.warc.gz.open"))
	if len(open) != 1 {
		t.Fatalf("open files %v", open)
	}
	before, err := os.Stat(open[0])
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(open[0], os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff, 0x01, 0x02}) // a gzip member cut short
	f.Close()
	if _, err := warccheck.ReadFile(open[0]); err == nil {
		t.Fatal("the partial record went unnoticed by the reader")
	}

	stop := s.start()
	s.waitArchived()
	stop()
	a, err := warccheck.Check(s.dir)
	if err != nil {
		t.Fatalf("the archive does not read back:\n%v", err)
	}
	recovered := strings.TrimSuffix(filepath.Base(open[0]), ".open")
	st, err := os.Stat(filepath.Join(s.dir, recovered))
	if err != nil {
		t.Fatalf("recovered file not sealed: %v", err)
	}
	if st.Size() != before.Size() {
		t.Errorf("recovered file has %d octets, %d before the partial record", st.Size(), before.Size())
	}
	caps := capturesByURL(a)
	for i := range pages {
		url := "http://a.example/c/" + string(rune('a'+i))
		if n := len(caps[url]); n != 1 {
			t.Errorf("%s archived %d times, want once", url, n)
		}
	}
}
