package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/digestindex"
	"github.com/trawl/trawl/shared/testwait"
)

// archive seed-index loads a pywb CDXJ's 200 responses into the named index, and archive
// forget drops them again.
func TestArchiveSeedAndForget(t *testing.T) {
	rs := redisproc.StartT(t, redisproc.Options{})
	inv := invocation{env: map[string]string{"TRAWL_REDIS_URL": rs.URL(), "TRAWL_ARCHIVE_DEDUP_INDEX": "webarchive"}}
	ctx := testwait.Context(t)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	idx := digestindex.New(rdb, "webarchive")
	// The fixture's two 200 responses with a SHA-1 digest, bare and prefixed.
	digests := []string{"YSCD7KXAPJHSHUOMCN65572MRUBYXGDH", "sha1:6RIPX2KQZX7R27ZZYM2LK6RGQ5DBE3TJ"}

	cases := []struct {
		name     string
		args     []string
		wantOut  string
		wantURIs []string
	}{
		{"seed", []string{"archive", "seed-index", "testdata/pywb.cdxj"},
			"testdata/pywb.cdxj: 2 captures, 2 added (index webarchive), 3 skipped, 1 malformed lines\n",
			[]string{"http://old.example/style.css", "http://old.example/app.js"}},
		{"seed again keeps the entries", []string{"archive", "seed-index", "testdata/pywb.cdxj"},
			"testdata/pywb.cdxj: 2 captures, 0 added (index webarchive), 3 skipped, 1 malformed lines\n",
			[]string{"http://old.example/style.css", "http://old.example/app.js"}},
		{"forget", []string{"archive", "forget", "testdata/pywb.cdxj"},
			"testdata/pywb.cdxj: 2 captures, 2 dropped (index webarchive), 3 skipped, 1 malformed lines\n",
			[]string{"", ""}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := inv.run(t, c.args...)
			if r.code != ExitOK || r.stdout != c.wantOut {
				t.Fatalf("exit %d, stdout %q, stderr %q; want %q", r.code, r.stdout, r.stderr, c.wantOut)
			}
			got, err := idx.Lookup(ctx, digests)
			if err != nil {
				t.Fatal(err)
			}
			for i, o := range got {
				uri := ""
				if o != nil {
					uri = o.URI
					if i == 0 && !o.Date.Equal(time.Date(2024, 3, 5, 6, 7, 8, 0, time.UTC)) {
						t.Errorf("date %v", o.Date)
					}
				}
				if uri != c.wantURIs[i] {
					t.Errorf("digest %s refers to %q, want %q", digests[i], uri, c.wantURIs[i])
				}
			}
		})
	}
	if r := inv.run(t, "archive", "seed-index"); r.code != ExitUsage || !strings.Contains(r.stderr, "no CDXJ file") {
		t.Errorf("no file: exit %d, %q", r.code, r.stderr)
	}
}
