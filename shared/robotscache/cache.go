// Package robotscache is the robots.txt cache shared by all fetchers: one Redis string per
// origin holding a shared/robots Entry, with a small in-process LRU in front. The policy
// itself (parsing, matching, status handling, encoding) lives in shared/robots so that
// trawlctl decides exactly as the fetcher does.
package robotscache

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/redisx"
	"github.com/trawl/trawl/shared/robots"
)

// KV is the part of a Redis client the cache uses.
type KV interface {
	Get(ctx context.Context, key string) *redis.StringCmd
	Set(ctx context.Context, key string, value any, expiration time.Duration) *redis.StatusCmd
	Del(ctx context.Context, keys ...string) *redis.IntCmd
}

// DefaultTTL and DefaultErrorTTL are how long an entry is kept unless told otherwise
// (TRAWL_ROBOTS_TTL and TRAWL_ROBOTS_ERROR_TTL, polite.LoadRobotsSettings): a day for a
// robots.txt that answered, as RFC 9309 §2.4 suggests at most, and a minute for one that
// did not, so its host is tried again soon.
const (
	DefaultTTL      = 24 * time.Hour
	DefaultErrorTTL = time.Minute
)

// StoreOptions configure a Store. Zero durations and sizes take the defaults noted.
type StoreOptions struct {
	Prefix   string        // deployment key prefix (TRAWL_REDIS_PREFIX), default "trawl"
	Agent    string        // product token entries are reduced for
	TTL      time.Duration // Redis expiry of parsed and unavailable entries, default DefaultTTL
	ErrorTTL time.Duration // Redis expiry of unreachable entries, default DefaultErrorTTL
	// LocalSize and LocalTTL bound the in-process copy kept in front of Redis (defaults
	// 4096 entries, 1m). It only saves round trips and reparsing: every fetcher reads the
	// same Redis entry, so a stale local copy is at most LocalTTL old.
	LocalSize int
	LocalTTL  time.Duration
	Now       func() time.Time
}

// Store is the robots.txt cache shared by all fetchers: one Redis string per origin under
// "<prefix>:robots:<origin>", with an in-process LRU in front.
type Store struct {
	kv    KV
	o     StoreOptions
	local *lru
}

// NewStore returns a Store over kv.
func NewStore(kv KV, o StoreOptions) *Store {
	if o.Prefix == "" {
		o.Prefix = redisx.DefaultPrefix
	}
	o.Agent = robots.AgentKey(o.Agent)
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.ErrorTTL <= 0 {
		o.ErrorTTL = DefaultErrorTTL
	}
	if o.LocalSize <= 0 {
		o.LocalSize = 4096
	}
	if o.LocalTTL <= 0 {
		o.LocalTTL = time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Store{kv: kv, o: o, local: newLRU(o.LocalSize)}
}

// Key is the Redis key of origin's entry (origin is scheme://host[:port]) under the key
// prefix: the layout the fetchers, renderers and trawlctl's inspect share.
func Key(prefix, origin string) string { return prefix + ":robots:" + origin }

// HopKey is the Redis key of origin's pending robots.txt hop under the key prefix.
func HopKey(prefix, origin string) string { return prefix + ":robots-hop:" + origin }

// Key is the Redis key of origin's entry (origin is scheme://host[:port]).
func (s *Store) Key(origin string) string { return Key(s.o.Prefix, origin) }

// TTL is how long an entry is kept: briefly for an unreachable robots.txt, so the host is
// retried soon, and TTL otherwise.
func (s *Store) TTL(e *robots.Entry) time.Duration {
	if e.Class == robots.Unreachable {
		return s.o.ErrorTTL
	}
	return s.o.TTL
}

// Get returns origin's entry, or nil when there is none (never fetched, expired, written
// for another agent, or undecodable: each means robots.txt must be fetched again).
// Errors are Redis failures and worth retrying.
func (s *Store) Get(ctx context.Context, origin string) (*robots.Entry, error) {
	now := s.o.Now()
	if e := s.local.get(origin, now); e != nil {
		return e, nil
	}
	key := s.Key(origin)
	raw, err := s.kv.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("robots cache: get %s: %w", key, err)
	}
	e, err := robots.UnmarshalEntry(raw)
	if err != nil || e.Agent != s.o.Agent {
		return nil, nil
	}
	s.remember(origin, e, now)
	return e, nil
}

// Put stores origin's entry in Redis and locally.
func (s *Store) Put(ctx context.Context, origin string, e *robots.Entry) error {
	raw, err := e.MarshalBinary()
	if err != nil {
		return fmt.Errorf("robots cache: encode: %w", err)
	}
	key := s.Key(origin)
	if err := s.kv.Set(ctx, key, raw, s.TTL(e)).Err(); err != nil {
		return fmt.Errorf("robots cache: set %s: %w", key, err)
	}
	s.remember(origin, e, s.o.Now())
	return nil
}

// Hop is a robots.txt redirect step still to be requested: robots.txt of an origin
// answered a redirect to URL on the same host, the N-th of its chain. The next task of
// the host requests it, so each hop waits the host's delay like any request.
type Hop struct {
	URL string
	N   int
}

// hopTTL bounds how long a pending hop is kept; past it the chain starts over.
const hopTTL = time.Hour

// HopKey is the Redis key of origin's pending hop.
func (s *Store) HopKey(origin string) string { return HopKey(s.o.Prefix, origin) }

// GetHop returns origin's pending robots.txt hop, or nil.
func (s *Store) GetHop(ctx context.Context, origin string) (*Hop, error) {
	key := s.HopKey(origin)
	raw, err := s.kv.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("robots cache: get %s: %w", key, err)
	}
	n, u, ok := strings.Cut(raw, " ")
	h := &Hop{URL: u}
	if h.N, err = strconv.Atoi(n); !ok || err != nil || u == "" {
		return nil, nil // unreadable: start the chain over
	}
	return h, nil
}

// PutHop records origin's next robots.txt hop.
func (s *Store) PutHop(ctx context.Context, origin string, h Hop) error {
	key := s.HopKey(origin)
	if err := s.kv.Set(ctx, key, strconv.Itoa(h.N)+" "+h.URL, hopTTL).Err(); err != nil {
		return fmt.Errorf("robots cache: set %s: %w", key, err)
	}
	return nil
}

// ClearHop forgets origin's pending hop once its chain has ended.
func (s *Store) ClearHop(ctx context.Context, origin string) error {
	key := s.HopKey(origin)
	if err := s.kv.Del(ctx, key).Err(); err != nil {
		return fmt.Errorf("robots cache: del %s: %w", key, err)
	}
	return nil
}

func (s *Store) remember(origin string, e *robots.Entry, now time.Time) {
	exp := now.Add(s.o.LocalTTL)
	if end := e.FetchedAt.Add(s.TTL(e)); end.Before(exp) {
		exp = end
	}
	if exp.After(now) {
		s.local.put(origin, e, exp)
	}
}

// lru is a size-bounded map whose entries also expire.
type lru struct {
	mu    sync.Mutex
	max   int
	order *list.List // front = most recently used
	items map[string]*list.Element
}

type lruItem struct {
	key string
	e   *robots.Entry
	exp time.Time
}

func newLRU(max int) *lru {
	return &lru{max: max, order: list.New(), items: make(map[string]*list.Element)}
}

func (l *lru) get(key string, now time.Time) *robots.Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	el, ok := l.items[key]
	if !ok {
		return nil
	}
	it := el.Value.(*lruItem)
	if !now.Before(it.exp) {
		l.order.Remove(el)
		delete(l.items, key)
		return nil
	}
	l.order.MoveToFront(el)
	return it.e
}

func (l *lru) put(key string, e *robots.Entry, exp time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if el, ok := l.items[key]; ok {
		el.Value = &lruItem{key: key, e: e, exp: exp}
		l.order.MoveToFront(el)
		return
	}
	l.items[key] = l.order.PushFront(&lruItem{key: key, e: e, exp: exp})
	for l.order.Len() > l.max {
		old := l.order.Back()
		l.order.Remove(old)
		delete(l.items, old.Value.(*lruItem).key)
	}
}

func (l *lru) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.order.Len()
}
