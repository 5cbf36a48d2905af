package service

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/trawl/trawl/services/parser/internal/contentdup"
	"github.com/trawl/trawl/services/parser/internal/scope"
	"github.com/trawl/trawl/services/parser/internal/simhash"
	"github.com/trawl/trawl/shared/crawlmsg"
)

// fakeIndex records the pages it is asked about and answers with canned verdicts. It
// stands in for the service's own interface, to test what the service sends and how it
// uses the answer; the index's behaviour in Redis is tested in the itest module.
type fakeIndex struct {
	got      []contentdup.Page
	verdicts []contentdup.Verdict
	full     int
	err      error
}

func (f *fakeIndex) Check(_ context.Context, pages []contentdup.Page) (contentdup.Result, error) {
	f.got = append(f.got, pages...)
	if f.err != nil {
		return contentdup.Result{}, f.err
	}
	return contentdup.Result{Verdicts: f.verdicts, FullBuckets: f.full}, nil
}

func htmlPage(url, body string) *crawlmsg.Page {
	return &crawlmsg.Page{Meta: crawlmsg.PageMeta{V: 1, URL: url, Host: "example.com", Status: 200, ContentType: "text/html"}, Body: []byte(body)}
}

func words(n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = "word" + string(rune('a'+i%26)) + string(rune('a'+i/26%26))
	}
	return strings.Join(w, " ")
}

func TestProcessFingerprint(t *testing.T) {
	p := newProcessor(t, scope.Config{})
	text := words(40)
	o, err := p.process(htmlPage("http://example.com/a", "<title>T</title><nav>\n"+text+"\n</nav><script>var x</script>"))
	if err != nil {
		t.Fatal(err)
	}
	want := simhash.Of(text)
	if o.fp != want || o.document.TextDigest != want.Digest || o.document.SimHash != simhash.Format(want.SimHash) || want.Tokens != 40 {
		t.Errorf("fingerprint %+v, document digest %q simhash %q; want %+v", o.fp, o.document.TextDigest, o.document.SimHash, want)
	}

	// The fingerprint covers the whole text even when the document must shed it to fit.
	p.maxDoc = 600
	long := words(400)
	o, err = p.process(htmlPage("http://example.com/long", "<p>"+long+"</p>"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.encode(o); err != nil {
		t.Fatal(err)
	}
	var doc crawlmsg.Document
	if err := crawlmsg.Unmarshal(o.doc, &doc); err != nil {
		t.Fatal(err)
	}
	if !o.trimmed || len(doc.Text) >= len(long) || doc.TextDigest != simhash.Of(long).Digest {
		t.Errorf("trimmed %v, text %d bytes, digest %q: want the full text's digest on a trimmed document", o.trimmed, len(doc.Text), doc.TextDigest)
	}

	// No visible text: nothing to fingerprint.
	o, err = p.process(htmlPage("http://example.com/empty", "<title>Only a title</title><script>x()</script>"))
	if err != nil {
		t.Fatal(err)
	}
	if o.document.TextDigest != "" || o.document.SimHash != "" {
		t.Errorf("blank page: digest %q simhash %q, want none", o.document.TextDigest, o.document.SimHash)
	}
	if _, ok := p.dupPage(o); ok {
		t.Error("a blank page takes part in the duplicate check")
	}
}

func TestMarkDuplicates(t *testing.T) {
	p := newProcessor(t, scope.Config{})
	mk := func(url, body string) *outcome {
		t.Helper()
		o, err := p.process(htmlPage(url, body))
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	long, short := words(30), words(5)
	skipped := &outcome{skipped: true}
	outs := []*outcome{
		mk("http://example.com/orig", "<p>"+long+"</p>"),
		nil, // a message that failed to decode
		mk("http://example.com/copy", "<div>"+long+"</div>"),
		skipped,
		mk("http://example.com/blank", "<title>x</title>"),
		mk("http://example.com/near", "<p>"+long+" extra</p>"),
		mk("http://example.com/short", "<p>"+short+"</p>"),
		mk("http://example.com/private", `<meta name="robots" content="noindex"><p>`+long+` private</p>`),
	}
	idx := &fakeIndex{
		verdicts: []contentdup.Verdict{
			{Kind: contentdup.Original},
			{Kind: contentdup.Exact, Of: "http://example.com/orig"},
			{Kind: contentdup.Near, Of: "http://example.com/orig", Distance: 2},
			{Kind: contentdup.Exact, Of: "http://other.test/short"},
			{Kind: contentdup.Original},
		},
		full: 3,
	}
	full, err := p.markDuplicates(context.Background(), idx, outs)
	if err != nil || full != 3 {
		t.Fatalf("markDuplicates = %d, %v", full, err)
	}
	// Batch order, blank and skipped pages left out, near lookup only with enough words,
	// a noindex page checked but not stored.
	var urls []string
	for _, pg := range idx.got {
		urls = append(urls, pg.URL)
	}
	wantURLs := []string{"http://example.com/orig", "http://example.com/copy", "http://example.com/near", "http://example.com/short", "http://example.com/private"}
	if !reflect.DeepEqual(urls, wantURLs) {
		t.Fatalf("pages checked = %v, want %v", urls, wantURLs)
	}
	fp := simhash.Of(long)
	if g := idx.got[0]; g.Digest != fp.Digest || g.SimHash != fp.SimHash || !g.Near || !g.Store {
		t.Errorf("first page sent as %+v, want digest %s simhash %x near store", g, fp.Digest, fp.SimHash)
	}
	if idx.got[3].Near || !idx.got[3].Store || idx.got[4].Store || !idx.got[4].Near {
		t.Errorf("short page %+v, noindex page %+v", idx.got[3], idx.got[4])
	}

	docs := map[string]*outcome{}
	for _, o := range outs {
		if o != nil && o.document != nil {
			docs[o.document.URL] = o
		}
	}
	for url, want := range map[string]struct {
		dup, near string
		dist      int
		kind      contentdup.Kind
		short     bool
	}{
		"http://example.com/orig":    {},
		"http://example.com/copy":    {dup: "http://example.com/orig", kind: contentdup.Exact},
		"http://example.com/near":    {near: "http://example.com/orig", dist: 2, kind: contentdup.Near},
		"http://example.com/short":   {dup: "http://other.test/short", kind: contentdup.Exact, short: true},
		"http://example.com/private": {},
		"http://example.com/blank":   {},
	} {
		o := docs[url]
		d := o.document
		if d.DuplicateOf != want.dup || d.NearDuplicateOf != want.near || d.Distance != want.dist || o.dup != want.kind || o.short != want.short {
			t.Errorf("%s: duplicate_of %q near %q distance %d kind %v short %v; want %+v", url, d.DuplicateOf, d.NearDuplicateOf, d.Distance, o.dup, o.short, want)
		}
	}
	if skipped.dup != contentdup.Original {
		t.Error("a skipped page got a verdict")
	}
}

func TestMarkDuplicatesFailures(t *testing.T) {
	p := newProcessor(t, scope.Config{})
	fresh := func() []*outcome {
		o, err := p.process(htmlPage("http://example.com/a", "<p>"+words(30)+"</p>"))
		if err != nil {
			t.Fatal(err)
		}
		return []*outcome{o}
	}
	down := errors.New("connection refused")
	outs := fresh()
	if _, err := p.markDuplicates(context.Background(), &fakeIndex{err: down}, outs); !errors.Is(err, down) {
		t.Errorf("index failure: err = %v", err)
	}
	if outs[0].dup != contentdup.Original || outs[0].document.DuplicateOf != "" {
		t.Error("a failed check left a verdict")
	}
	if _, err := p.markDuplicates(context.Background(), &fakeIndex{}, fresh()); err == nil {
		t.Error("a reply without verdicts was accepted")
	}
	// Nothing to check: the index is not called at all.
	idx := &fakeIndex{err: down}
	if _, err := p.markDuplicates(context.Background(), idx, []*outcome{{skipped: true}, nil}); err != nil || idx.got != nil {
		t.Errorf("empty batch: err %v, pages sent %v", err, idx.got)
	}
}
