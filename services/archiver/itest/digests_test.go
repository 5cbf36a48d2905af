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

	"github.com/redis/go-redis/v9"

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

// Digests stored by a release that kept every bucket under the {archive} tag are moved
// at start-up to one tag per bucket and found there: a page seen before the upgrade is a
// revisit after it. A digest already under the new layout is kept over the old one, and a
// key that is no bucket is left alone.
func TestDigestsMovedToTheirOwnSlots(t *testing.T) {
	s := newStack(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: s.rs.Addr()})
	defer rdb.Close()

	html := []byte("<html><body>archived before the upgrade</body></html>")
	before := time.Date(2025, 6, 7, 8, 9, 10, 0, time.UTC)
	newer := time.Date(2025, 9, 1, 0, 0, 0, 0, time.UTC)
	// Enough buckets for several migration steps.
	pipe := rdb.Pipeline()
	for i := range 600 {
		b, f := digestSlot(fmt.Sprintf("http://other.example/%d", i))
		pipe.HSet(ctx, "trawl:{archive}:digests:"+b, f, digestValue([]byte(strconv.Itoa(i)), before))
	}
	b, f := digestSlot("http://a.example/old")
	pipe.HSet(ctx, "trawl:{archive}:digests:"+b, f, digestValue(html, before))
	b, f = digestSlot("http://a.example/both")
	pipe.HSet(ctx, "trawl:{archive}:digests:"+b, f, digestValue(html, before))
	pipe.HSet(ctx, "trawl:archive:digests:{"+b+"}", f, digestValue(html, newer))
	pipe.Set(ctx, "trawl:{archive}:digests:note", "not a bucket", 0)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	oldBuckets, err := rdb.Keys(ctx, "trawl:{archive}:digests:[0-9a-f][0-9a-f][0-9a-f][0-9a-f]").Result()
	if err != nil || len(oldBuckets) < 300 {
		t.Fatalf("old buckets: %d, %v", len(oldBuckets), err)
	}

	stop := s.run(s.newService())
	if left, err := rdb.Keys(ctx, "trawl:{archive}:digests:*").Result(); err != nil || !slices.Equal(left, []string{"trawl:{archive}:digests:note"}) {
		t.Errorf("after start-up the old layout holds %d keys (%v), want only the key that is no bucket", len(left), err)
	}
	if moved, err := rdb.Keys(ctx, "trawl:archive:digests:{*}").Result(); err != nil || len(moved) != len(oldBuckets) {
		t.Errorf("new layout holds %d buckets (%v), want the %d moved", len(moved), err, len(oldBuckets))
	}
	s.publish(exchange("http://a.example/old", 200, "Content-Type: text/html\r\n", html, false), "m1")
	s.publish(exchange("http://a.example/both", 200, "Content-Type: text/html\r\n", html, false), "m2")
	s.waitArchived()
	stop()

	a, err := warccheck.Check(s.dir)
	if err != nil {
		t.Fatalf("the archive does not read back:\n%v", err)
	}
	caps := capturesByURL(a)
	for url, at := range map[string]time.Time{"http://a.example/old": before, "http://a.example/both": newer} {
		rs := caps[url]
		if len(rs) != 1 || rs[0].Get("WARC-Type") != "revisit" {
			t.Errorf("%s: %d captures, want one revisit of the digest stored before the upgrade", url, len(rs))
			continue
		}
		if got, want := rs[0].Get("WARC-Refers-To-Date"), warc.Date(at); got != want {
			t.Errorf("%s: refers to %s, want %s", url, got, want)
		}
	}
}

// On a Redis Cluster the revisit digests spread over every master, and an identical
// payload is still found.
func TestDigestsOnRedisCluster(t *testing.T) {
	cl := rediscluster.StartT(t, rediscluster.Options{Replicas: -1})
	s := newStack(t, map[string]string{"TRAWL_REDIS_URL": cl.URL()})
	c := cl.Client(t)
	stop := s.run(s.newService())
	const pages = 150
	for i := range pages {
		s.publish(exchange(fmt.Sprintf("http://a.example/p%d", i), 200, "Content-Type: text/plain\r\n", []byte(strconv.Itoa(i)), false), fmt.Sprintf("c%d", i))
	}
	s.publish(exchange("http://a.example/p7", 200, "Content-Type: text/plain\r\n", []byte("7"), false), "again")
	s.waitArchived()
	stop()

	per := rediscluster.KeysPerMasterT(t, c, "trawl:archive:digests:{*}")
	if len(per) != 3 || per[0] < pages/3/2 {
		t.Errorf("digest buckets per master %v: want every one of the 3 masters to hold a share of %d", per, pages)
	}
	a, err := warccheck.Check(s.dir)
	if err != nil {
		t.Fatalf("the archive does not read back:\n%v", err)
	}
	if rs := capturesByURL(a)["http://a.example/p7"]; len(rs) != 2 || rs[1].Get("WARC-Type") != "revisit" {
		t.Errorf("the second capture of an identical payload is not a revisit (%d captures)", len(rs))
	}
}
