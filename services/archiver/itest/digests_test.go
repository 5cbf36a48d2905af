package itest

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/rediscluster"
	"github.com/trawl/trawl/devstack/warccheck"
	"github.com/trawl/trawl/services/archiver/internal/warc"
)

// digestSlot is where the archiver keeps url's last digest: the bucket's 4 hex digits
// and the field.
func digestSlot(url string) (bucket, field string) {
	h := sha1.Sum([]byte(url))
	return hex.EncodeToString(h[:2]), string(h[2:12])
}

func digestValue(body []byte, at time.Time) string {
	return strings.TrimPrefix(warc.Digest(body), "sha1:") + " " + strconv.FormatInt(at.UnixMilli(), 10)
}

// The per-URL digests of earlier releases (both layouts) are deleted at start-up: the
// payload digest index replaces them. A key that is no bucket is left alone, and a page
// seen before the upgrade is archived in full once, then revisits resume.
func TestLegacyDigestsDropped(t *testing.T) {
	s := newStack(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	rdb := s.redis()
	html := []byte("<html><body>archived before the upgrade</body></html>")
	before := time.Date(2025, 6, 7, 8, 9, 10, 0, time.UTC)
	pipe := rdb.Pipeline()
	for i := range 300 {
		b, f := digestSlot(fmt.Sprintf("http://other.example/%d", i))
		pipe.HSet(ctx, "trawl:{archive}:digests:"+b, f, digestValue([]byte(strconv.Itoa(i)), before))
		b, f = digestSlot(fmt.Sprintf("http://more.example/%d", i))
		pipe.HSet(ctx, "trawl:archive:digests:{"+b+"}", f, digestValue([]byte(strconv.Itoa(i)), before))
	}
	b, f := digestSlot("http://a.example/old")
	pipe.HSet(ctx, "trawl:archive:digests:{"+b+"}", f, digestValue(html, before))
	pipe.Set(ctx, "trawl:{archive}:digests:note", "not a bucket", 0)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}

	stop := s.start()
	if left, err := rdb.Keys(ctx, "trawl:*archive*:digests:*").Result(); err != nil || !slices.Equal(left, []string{"trawl:{archive}:digests:note"}) {
		t.Errorf("after start-up %d keys of the per-URL layouts are left (%v), want only the key that is no bucket", len(left), err)
	}
	s.publish(exchange("http://a.example/old", 200, "Content-Type: text/html\r\n", html, false), "m1")
	s.waitArchived()
	s.publish(exchange("http://a.example/old", 200, "Content-Type: text/html\r\n", html, false), "m2")
	s.waitArchived()
	stop()
	rs := capturesByURL(s.checked())["http://a.example/old"]
	if len(rs) != 2 || rs[0].Get("WARC-Type") != "response" || rs[1].Get("WARC-Type") != "revisit" {
		t.Errorf("captures of a page seen before the upgrade: %d, want a response then a revisit", len(rs))
	}
}

// On a Redis Cluster the payload digest index spreads over every master, and an identical
// payload is still found.
func TestDigestsOnRedisCluster(t *testing.T) {
	cl := rediscluster.StartT(t, rediscluster.Options{Replicas: -1})
	s := newStack(t, map[string]string{"TRAWL_REDIS_URL": cl.URL()})
	c := cl.Client(t)
	stop := s.start()
	const pages = 150
	for i := range pages {
		s.publish(exchange(fmt.Sprintf("http://a.example/p%d", i), 200, "Content-Type: text/plain\r\n", []byte(strconv.Itoa(i)), false), fmt.Sprintf("c%d", i))
	}
	s.publish(exchange("http://a.example/p7", 200, "Content-Type: text/plain\r\n", []byte("7"), false), "again")
	s.waitArchived()
	stop()

	per := rediscluster.KeysPerMasterT(t, c, "trawl:archive:payloads:{*}")
	if len(per) != 3 || per[0] < pages/3/2 {
		t.Errorf("digest index buckets per master %v: want every one of the 3 masters to hold a share of %d", per, pages)
	}
	a, err := warccheck.Check(s.dir)
	if err != nil {
		t.Fatalf("the archive does not read back:\n%v", err)
	}
	if rs := capturesByURL(a)["http://a.example/p7"]; len(rs) != 2 || rs[1].Get("WARC-Type") != "revisit" {
		t.Errorf("the second capture of an identical payload is not a revisit (%d captures)", len(rs))
	}
}
