package itest

import (
	"fmt"
	"log/slog"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/services/dedup/internal/bloom"
	"github.com/trawl/trawl/shared/testwait"
)

// startRedis starts a real redis-server for the test and returns a client to it.
func startRedis(t testing.TB) (*redisproc.Server, *redis.Client) {
	t.Helper()
	srv := redisproc.StartT(t, redisproc.Options{})
	return srv, redisClient(t, srv)
}

// newFilter builds and initialises a filter.
func newFilter(t testing.TB, c *redis.Client, prefix string, p bloom.Params) *bloom.Filter {
	t.Helper()
	f, err := bloom.New(prefix, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Init(testwait.Context(t), c); err != nil {
		t.Fatal(err)
	}
	return f
}

// urls returns n distinct normalised URLs over a few hosts, distinct from other tags.
func urls(tag string, from, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("https://h%d.%s.test/page/%d?q=%d", (from+i)%97, tag, from+i, (from+i)*7)
	}
	return out
}

// span returns [from, from+n).
func span(from, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = from + i
	}
	return out
}

// redisClient connects to a running redisproc server.
func redisClient(t testing.TB, srv *redisproc.Server) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func quietLog() *slog.Logger { return slog.New(slog.DiscardHandler) }
