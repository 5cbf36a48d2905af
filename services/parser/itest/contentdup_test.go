package itest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/services/parser/internal/contentdup"
	"github.com/trawl/trawl/services/parser/internal/simhash"
)

// index starts a redis-server and returns an index on it and a client.
func index(t testing.TB, o contentdup.Options) (*contentdup.Index, *redis.Client) {
	t.Helper()
	rs := redisproc.StartT(t, redisproc.Options{})
	opt, err := redis.ParseURL(rs.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	if o == (contentdup.Options{}) {
		o = contentdup.Options{MaxDistance: 3, BucketCap: 64}
	}
	ix, err := contentdup.New(rdb, "trawl", o)
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.Init(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	return ix, rdb
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// check runs one batch and returns its verdicts.
func check(t testing.TB, ix *contentdup.Index, pages ...contentdup.Page) []contentdup.Verdict {
	t.Helper()
	res, err := ix.Check(ctxT(t), pages)
	if err != nil {
		t.Fatal(err)
	}
	return res.Verdicts
}

// textPage is a page as the parser sends it: fingerprinted text, stored, near lookup on.
func textPage(url, text string) contentdup.Page {
	fp := simhash.Of(text)
	return contentdup.Page{URL: url, Digest: fp.Digest, SimHash: fp.SimHash, Near: true, Store: true}
}

// hashPage is a page with a chosen SimHash, to place hashes exactly, and a text digest of
// its own (made from the URL), so it is never an exact duplicate.
func hashPage(url string, h uint64) contentdup.Page {
	sum := sha256.Sum256([]byte(url))
	return contentdup.Page{URL: url, Digest: hex.EncodeToString(sum[:]), SimHash: h, Near: true, Store: true}
}

func fixtureText(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// edited returns the first n words of text with word k replaced.
func edited(text string, n, k int, with string) string {
	w := strings.Fields(text)[:n]
	if k >= 0 {
		w[k] = with
	}
	return strings.Join(w, " ")
}

func TestExactDuplicate(t *testing.T) {
	t.Parallel()
	ix, rdb := index(t, contentdup.Options{})
	text := fixtureText(t, "sourdough.txt")
	// The same words laid out differently: white space does not count.
	relaid := strings.Join(strings.Fields(text), "\n  ")
	got := check(t, ix, textPage("http://a.test/bread", text))
	got = append(got, check(t, ix, textPage("http://b.test/copy", relaid))...)
	got = append(got, check(t, ix, textPage("http://c.test/again", text))...)
	want := []contentdup.Verdict{
		{Kind: contentdup.Original},
		{Kind: contentdup.Exact, Of: "http://a.test/bread"},
		{Kind: contentdup.Exact, Of: "http://a.test/bread"},
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("page %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	key, field := ix.ExactKey(simhash.Of(text).Digest)
	if first, err := rdb.HGet(ctxT(t), key, field).Result(); err != nil || first != "http://a.test/bread" {
		t.Errorf("exact key holds %q, %v", first, err)
	}
}

func TestNearDuplicateText(t *testing.T) {
	t.Parallel()
	ix, _ := index(t, contentdup.Options{})
	light := fixtureText(t, "lighthouse.txt")
	orig := edited(light, 300, -1, "")
	// Word 148 ("thirty") replaced: 3 bits away (pinned by the simhash unit tests).
	near := edited(light, 300, 148, "beacon")
	d := simhash.Distance(simhash.Of(orig).SimHash, simhash.Of(near).SimHash)
	if d != 3 {
		t.Fatalf("fixture edit is %d bits away, want 3", d)
	}
	got := check(t, ix,
		textPage("http://a.test/light", orig),
		textPage("http://b.test/light-edited", near),
		textPage("http://c.test/bread", fixtureText(t, "sourdough.txt")),
	)
	want := []contentdup.Verdict{
		{Kind: contentdup.Original},
		{Kind: contentdup.Near, Of: "http://a.test/light", Distance: 3},
		{Kind: contentdup.Original},
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("page %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// flip returns h with the given bits (0 = most significant) inverted.
func flip(h uint64, bitsAt ...int) uint64 {
	for _, b := range bitsAt {
		h ^= 1 << (63 - b)
	}
	return h
}

func TestNearDistanceLimits(t *testing.T) {
	t.Parallel()
	const base = 0x0123456789abcdef
	tests := []struct {
		name    string
		maxDist int
		flips   []int // bits of the probe that differ from the original
		want    int   // distance reported, or -1 for no match
	}{
		{"identical hash, other text", 3, nil, 0},
		{"1 bit", 3, []int{5}, 1},
		{"3 bits in one band", 3, []int{0, 1, 2}, 3},
		{"3 bits in three bands", 3, []int{1, 17, 33}, 3},
		{"3 bits, last band and first", 3, []int{0, 62, 63}, 3},
		{"4 bits in one band: found, too far", 3, []int{16, 17, 18, 19}, -1},
		{"4 bits in four bands: shares no band", 3, []int{0, 16, 32, 48}, -1},
		{"2 bits within a limit of 2", 2, []int{3, 40}, 2},
		{"3 bits beyond a limit of 2", 2, []int{3, 20, 40}, -1},
		{"identical hash with limit 0", 0, nil, 0},
		{"1 bit beyond limit 0", 0, []int{63}, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ix, _ := index(t, contentdup.Options{MaxDistance: tt.maxDist, BucketCap: 64})
			probe := flip(base, tt.flips...)
			if d := bits.OnesCount64(probe ^ base); d != len(tt.flips) {
				t.Fatalf("test flips %d bits, not %d", d, len(tt.flips))
			}
			got := check(t, ix, hashPage("http://a.test/orig", base), hashPage("http://b.test/probe", probe))
			want := contentdup.Verdict{Kind: contentdup.Original}
			if tt.want >= 0 {
				want = contentdup.Verdict{Kind: contentdup.Near, Of: "http://a.test/orig", Distance: tt.want}
			}
			if got[0].Kind != contentdup.Original || got[1] != want {
				t.Errorf("verdicts %+v, want original then %+v", got, want)
			}
		})
	}
}

func TestClosestThenEarliest(t *testing.T) {
	t.Parallel()
	ix, _ := index(t, contentdup.Options{})
	const p = 0xfedcba9876543210
	far := hashPage("http://a.test/three-bits", flip(p, 0, 1, 2)) // band 0
	close := hashPage("http://b.test/one-bit", flip(p, 20))       // band 1; 4 bits from far
	got := check(t, ix, far, close, hashPage("http://c.test/probe", p))
	if got[0].Kind != contentdup.Original || got[1].Kind != contentdup.Original {
		t.Fatalf("the two originals: %+v", got[:2])
	}
	if want := (contentdup.Verdict{Kind: contentdup.Near, Of: "http://b.test/one-bit", Distance: 1}); got[2] != want {
		t.Errorf("probe: %+v, want the closest %+v", got[2], want)
	}

	// Two originals at the same distance: the one indexed first wins, whichever band
	// finds it. The later one sits in band 0, which is scanned first.
	q := uint64(0x1111222233334444)
	first := hashPage("http://d.test/first", flip(q, 40, 41)) // band 2
	second := hashPage("http://e.test/second", flip(q, 2, 3)) // band 0; 4 bits from first
	got = check(t, ix, first, second, hashPage("http://f.test/probe", q))
	if want := (contentdup.Verdict{Kind: contentdup.Near, Of: "http://d.test/first", Distance: 2}); got[2] != want {
		t.Errorf("tie: %+v, want the earliest %+v", got[2], want)
	}
}

func TestRedeliveryIsNotItsOwnDuplicate(t *testing.T) {
	t.Parallel()
	ix, _ := index(t, contentdup.Options{})
	text := fixtureText(t, "lighthouse.txt")
	page := textPage("http://a.test/light", text)
	for i := range 3 {
		if got := check(t, ix, page); got[0] != (contentdup.Verdict{Kind: contentdup.Original}) {
			t.Fatalf("delivery %d: %+v", i+1, got[0])
		}
	}
	// The same URL twice in one batch, and fetched again with a small edit.
	edit := textPage("http://a.test/light", edited(text, 596, 10, "beacon"))
	for i, v := range check(t, ix, page, page, edit) {
		if v != (contentdup.Verdict{Kind: contentdup.Original}) {
			t.Errorf("page %d of the batch: %+v", i, v)
		}
	}
	// Another URL with that text is still a duplicate of the first.
	if got := check(t, ix, textPage("http://b.test/copy", text)); got[0] != (contentdup.Verdict{Kind: contentdup.Exact, Of: "http://a.test/light"}) {
		t.Errorf("copy: %+v", got[0])
	}
	// A near duplicate redelivered gets the same verdict every time.
	near := textPage("http://c.test/near", edited(text, 596, 300, "beacon"))
	a, b := check(t, ix, near), check(t, ix, near)
	if a[0].Kind != contentdup.Near || a[0] != b[0] {
		t.Errorf("near duplicate: first %+v, redelivered %+v", a[0], b[0])
	}
}

func TestBatchOrderDecides(t *testing.T) {
	t.Parallel()
	ix, _ := index(t, contentdup.Options{})
	light := fixtureText(t, "lighthouse.txt")
	got := check(t, ix,
		textPage("http://z.test/first", light),
		textPage("http://a.test/copy", light),
		textPage("http://m.test/near", edited(light, 596, 148, "beacon")),
	)
	if got[0].Kind != contentdup.Original || got[1] != (contentdup.Verdict{Kind: contentdup.Exact, Of: "http://z.test/first"}) ||
		got[2].Kind != contentdup.Near || got[2].Of != "http://z.test/first" {
		t.Errorf("verdicts %+v", got)
	}
}

func TestUnstoredAndShortPages(t *testing.T) {
	t.Parallel()
	ix, rdb := index(t, contentdup.Options{})
	light := fixtureText(t, "lighthouse.txt")
	// A noindex page is checked, but nothing points at it later.
	hidden := textPage("http://a.test/hidden", light)
	hidden.Store = false
	visible := textPage("http://b.test/visible", light)
	got := check(t, ix, hidden, visible, textPage("http://c.test/copy", light))
	want := []contentdup.Verdict{{Kind: contentdup.Original}, {Kind: contentdup.Original}, {Kind: contentdup.Exact, Of: "http://b.test/visible"}}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("page %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	// ... but it is still found to duplicate an earlier page.
	hidden.URL = "http://d.test/hidden-copy"
	if got := check(t, ix, hidden); got[0] != (contentdup.Verdict{Kind: contentdup.Exact, Of: "http://b.test/visible"}) {
		t.Errorf("unstored copy: %+v", got[0])
	}

	// Short pages: exact only, no bands written.
	short := textPage("http://e.test/404", "Page not found")
	short.Near = false
	short2 := short
	short2.URL = "http://f.test/404"
	got = check(t, ix, short, short2)
	if got[0].Kind != contentdup.Original || got[1] != (contentdup.Verdict{Kind: contentdup.Exact, Of: "http://e.test/404"}) {
		t.Errorf("short pages: %+v", got)
	}
	for i := range simhash.Bands {
		if n, err := rdb.HLen(ctxT(t), ix.BandKey(i, short.SimHash)).Result(); err != nil || n != 0 {
			t.Errorf("band %d of a short page holds %d entries (%v)", i, n, err)
		}
	}
}

func TestBucketCap(t *testing.T) {
	t.Parallel()
	const capacity = 4
	ix, rdb := index(t, contentdup.Options{MaxDistance: 3, BucketCap: capacity})
	// Ten originals with the same band 0 and random other bands (far apart from each
	// other): band 0's bucket keeps the first four.
	rng := rand.New(rand.NewPCG(1, 2))
	var pages []contentdup.Page
	for i := range 10 {
		h := 0xabcd<<48 | rng.Uint64()>>16
		pages = append(pages, hashPage(fmt.Sprintf("http://h%d.test/", i), h))
	}
	res, err := ix.Check(ctxT(t), pages)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range res.Verdicts {
		if v.Kind != contentdup.Original {
			t.Fatalf("page %d: %+v (random hashes should be far apart)", i, v)
		}
	}
	if res.FullBuckets != 10-capacity {
		t.Errorf("full buckets = %d, want %d", res.FullBuckets, 10-capacity)
	}
	ctx := ctxT(t)
	hot := ix.BandKey(0, pages[0].SimHash)
	kept, err := rdb.HKeys(ctx, hot).Result()
	if err != nil || len(kept) != capacity {
		t.Fatalf("hot bucket holds %v (%v), want %d entries", kept, err, capacity)
	}
	for _, f := range kept {
		if h, _ := simhash.Parse(f); h != pages[0].SimHash && h != pages[1].SimHash && h != pages[2].SimHash && h != pages[3].SimHash {
			t.Errorf("hot bucket holds %s, not one of the first four", f)
		}
	}
	// A later original is not in the hot bucket but is in its other three, so a near
	// duplicate of it is still found.
	last := pages[9].SimHash
	for i := 1; i < simhash.Bands; i++ {
		if n, _ := rdb.HLen(ctx, ix.BandKey(i, last)).Result(); n != 1 {
			t.Errorf("band %d bucket of the last page holds %d entries", i, n)
		}
	}
	got := check(t, ix, hashPage("http://x.test/near-last", flip(last, 20, 63)))
	if want := (contentdup.Verdict{Kind: contentdup.Near, Of: "http://h9.test/", Distance: 2}); got[0] != want {
		t.Errorf("near duplicate of a page missing from a full bucket: %+v, want %+v", got[0], want)
	}
	// The cap holds under more inserts.
	more := make([]contentdup.Page, 50)
	for i := range more {
		more[i] = hashPage(fmt.Sprintf("http://m%d.test/", i), 0xabcd<<48|rng.Uint64()>>16)
	}
	if _, err := ix.Check(ctx, more); err != nil {
		t.Fatal(err)
	}
	if n, _ := rdb.HLen(ctx, hot).Result(); n != capacity {
		t.Errorf("hot bucket grew to %d entries", n)
	}
}

func TestInitRefusesAnotherScheme(t *testing.T) {
	t.Parallel()
	ix, rdb := index(t, contentdup.Options{})
	ctx := ctxT(t)
	if v, err := rdb.Get(ctx, ix.MetaKey()).Result(); err != nil || v != simhash.HashVersion {
		t.Fatalf("meta = %q, %v; want %q", v, err, simhash.HashVersion)
	}
	// A second parser (or a restart) finds the same scheme.
	if err := ix.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, ix.MetaKey(), "sh64-older-scheme", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := ix.Init(ctx); !errors.Is(err, contentdup.ErrMismatch) {
		t.Errorf("Init over another scheme: %v, want ErrMismatch", err)
	}
}

func TestCheckFailsWhileRedisIsDown(t *testing.T) {
	t.Parallel()
	rs := redisproc.StartT(t, redisproc.Options{})
	opt, _ := redis.ParseURL(rs.URL())
	opt.MaxRetries = -1
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	ix, err := contentdup.New(rdb, "trawl", contentdup.Options{MaxDistance: 3, BucketCap: 64})
	if err != nil {
		t.Fatal(err)
	}
	page := textPage("http://a.test/", fixtureText(t, "sourdough.txt"))
	if err := rs.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := ix.Check(ctxT(t), []contentdup.Page{page}); err == nil {
		t.Fatal("Check succeeded with Redis stopped")
	}
	if err := rs.Restart(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	// A fresh server has an empty script cache: the script is loaded again by itself.
	if got := check(t, ix, page); got[0].Kind != contentdup.Original {
		t.Errorf("after restart: %+v", got[0])
	}
}

// A URL fetched again with another text gives up its previous text's exact key, whichever
// partition holds it; a URL that was only a copy of that text leaves the original's key.
func TestReplacesGivesUpTheOldExactKey(t *testing.T) {
	t.Parallel()
	ix, rdb := index(t, contentdup.Options{MaxDistance: 3, BucketCap: 64, Parts: 8})
	old, copyText, next := "first text of the page", "what the copy says now", "second text of the page"
	page := func(url, text, was string) contentdup.Page {
		p := textPage(url, text)
		if was != "" {
			p.Replaces = simhash.Of(was).Digest
		}
		return p
	}
	steps := []struct {
		page contentdup.Page
		want contentdup.Verdict
	}{
		{page("http://a.test/", old, ""), contentdup.Verdict{Kind: contentdup.Original}},
		{page("http://b.test/", old, ""), contentdup.Verdict{Kind: contentdup.Exact, Of: "http://a.test/"}},
		// b changes: a still has the old text, so its key stays.
		{page("http://b.test/", copyText, old), contentdup.Verdict{Kind: contentdup.Original}},
		{page("http://c.test/", old, ""), contentdup.Verdict{Kind: contentdup.Exact, Of: "http://a.test/"}},
		// a changes: the old text is no longer a's.
		{page("http://a.test/", next, old), contentdup.Verdict{Kind: contentdup.Original}},
	}
	for i, st := range steps {
		if got := check(t, ix, st.page)[0]; got.Kind != st.want.Kind || got.Of != st.want.Of {
			t.Fatalf("step %d (%s): %+v, want %+v", i, st.page.URL, got, st.want)
		}
	}
	ctx := ctxT(t)
	key, field := ix.ExactKey(simhash.Of(old).Digest)
	if n, err := rdb.HExists(ctx, key, field).Result(); err != nil || n {
		t.Errorf("the old text's entry is still there (%v, %v)", n, err)
	}
	for text, url := range map[string]string{next: "http://a.test/", copyText: "http://b.test/"} {
		key, field := ix.ExactKey(simhash.Of(text).Digest)
		if got, err := rdb.HGet(ctx, key, field).Result(); err != nil || got != url {
			t.Errorf("key of %q holds %q (%v), want %s", text, got, err, url)
		}
	}
}
