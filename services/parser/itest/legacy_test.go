package itest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/trawl/trawl/services/parser/internal/contentdup"
)

// An index made before the exact entries were bounded holds one string key per original,
// "exact:<64 hex>", that nothing reads any more. DropLegacy deletes those, in every
// partition, and nothing of the current layout or outside the index.
func TestDropLegacyExactKeys(t *testing.T) {
	t.Parallel()
	for _, parts := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d partitions", parts), func(t *testing.T) {
			ix, rdb := index(t, contentdup.Options{MaxDistance: 3, BucketCap: 64, Parts: parts})
			ctx := ctxT(t)
			// Current entries, from the index itself.
			check(t, ix, exactPage("http://a.test/1", fmt.Sprintf("%064x", 1)), exactPage("http://a.test/2", fmt.Sprintf("%064x", 2)))
			var old []string
			for i := range 2500 { // more than one SCAN reply
				dig := fmt.Sprintf("%064x", 1_000_000+i)
				key, _ := ix.ExactKey(dig)
				old = append(old, key[:len(key)-len("abcd")]+dig)
			}
			for _, k := range old {
				if err := rdb.Set(ctx, k, "http://old.test/", 0).Err(); err != nil {
					t.Fatal(err)
				}
			}
			other := "trawl:{content}:exactly-not-the-index:" + fmt.Sprintf("%064x", 7)
			if err := rdb.Set(ctx, other, "x", 0).Err(); err != nil {
				t.Fatal(err)
			}
			before, err := rdb.Keys(ctx, "*").Result()
			if err != nil {
				t.Fatal(err)
			}
			n, err := ix.DropLegacy(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if n != int64(len(old)) {
				t.Errorf("deleted %d keys, want the %d of the earlier layout", n, len(old))
			}
			after, err := rdb.Keys(ctx, "*").Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range old {
				if slices.Contains(after, k) {
					t.Fatalf("%s is left", k)
				}
			}
			if len(after) != len(before)-len(old) {
				t.Errorf("%d keys left of %d, want all but the %d of the earlier layout", len(after), len(before), len(old))
			}
			if v := check(t, ix, exactPage("http://b.test/1", fmt.Sprintf("%064x", 1)))[0]; v.Kind != contentdup.Exact {
				t.Errorf("a copy of an indexed text after the sweep: %+v, want exact", v)
			}
		})
	}
}
