package itest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/trawl/trawl/services/parser/internal/contentdup"
)

// exactPage is a page that takes the exact check only, with the text digest dig.
func exactPage(url, dig string) contentdup.Page {
	return contentdup.Page{URL: url, Digest: dig, Store: true}
}

// The exact entries are bounded by ExactCapacity, bucket by bucket: originals beyond a
// bucket's share evict others of the bucket, so the index stops growing with the crawl.
// An evicted text's next copy is taken for an original (a duplicate missed), and no page
// is ever reported a copy of a text it does not have.
func TestExactEntriesStayWithinCapacity(t *testing.T) {
	t.Parallel()
	const perBucket = 3
	ix, rdb := index(t, contentdup.Options{MaxDistance: 3, BucketCap: 64, ExactCapacity: perBucket * contentdup.ExactBuckets})
	// Digests of one bucket (their first four hex digits), so that a few fill it.
	var texts []string
	for i := range 40 {
		texts = append(texts, fmt.Sprintf("abcd%016x%044x", i, 0))
	}
	for i, text := range texts {
		url := fmt.Sprintf("http://a.test/%d", i)
		if v := check(t, ix, exactPage(url, text))[0]; v.Kind != contentdup.Original {
			t.Fatalf("first page with text %d: %+v, want an original", i, v)
		}
	}
	key, _ := ix.ExactKey(exactPage("", texts[0]).Digest)
	if !strings.Contains(key, "exact:abcd") {
		t.Fatalf("texts chosen for one bucket are in %s", key)
	}
	n, err := rdb.HLen(ctxT(t), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n != perBucket {
		t.Fatalf("bucket %s holds %d entries after %d originals, want its cap %d", key, n, len(texts), perBucket)
	}
	// Copies that may not be stored (noindex) evict nothing: exactly the bucket's entries
	// are found, and every other copy is taken for an original.
	kept := 0
	for i, text := range texts {
		p := exactPage(fmt.Sprintf("http://b.test/%d", i), text)
		p.Store = false
		v := check(t, ix, p)[0]
		switch {
		case v.Kind == contentdup.Exact && v.Of == fmt.Sprintf("http://a.test/%d", i):
			kept++
		case v.Kind == contentdup.Original:
		default:
			t.Fatalf("copy of text %d: %+v, want an exact copy of http://a.test/%d or an original", i, v, i)
		}
	}
	if kept != perBucket {
		t.Fatalf("%d copies found their original, want %d (the bucket's cap)", kept, perBucket)
	}
	// A copy that may be stored takes an evicted original's place, and the bucket stays
	// at its cap.
	if v := check(t, ix, exactPage("http://c.test/0", texts[0]), exactPage("http://c.test/1", texts[1]))[0]; v.Kind == contentdup.Exact && v.Of != "http://a.test/0" {
		t.Fatalf("copy of text 0: %+v", v)
	}
	if n, err := rdb.HLen(ctxT(t), key).Result(); err != nil || n != perBucket {
		t.Fatalf("bucket %s holds %d entries (%v) after more originals, want %d", key, n, err, perBucket)
	}
}
