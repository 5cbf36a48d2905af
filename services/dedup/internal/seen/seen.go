// Package seen is the dedup service's idempotent seen test: for a batch of input messages
// it tests-and-sets every message's URLs in the Bloom filter and memoises each message's
// result under the message's id, in one Redis call.
//
// The memo is what makes redelivery harmless. Without it, a message redelivered after its
// bits were set (say the service died before publishing) would find all its URLs "seen"
// and they would be lost. With it, the redelivery gets the first answer back, republishes
// the same URLs, and the stream's duplicate window drops the copies. Once the outputs are
// stored the service calls Forget: a redelivery after that finds the bits set and
// publishes nothing, which is right because the outputs already exist.
package seen

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/services/dedup/internal/bloom"
	"github.com/trawl/trawl/services/dedup/internal/cache"
	"github.com/trawl/trawl/shared/redisx"
)

// MemoTTL is how long a result is kept when Forget is never called (the service died
// between test and publish). It must outlast every redelivery of the message: AckWait ×
// MaxDeliver with backoff is minutes, and the duplicate window that makes the republish
// harmless is 10 minutes.
const MemoTTL = time.Hour

// URL is one URL of a message to test.
type URL struct {
	// Index identifies the URL in its message, and is what comes back when it is new. Use
	// the position in the original message, not in a filtered list, so that a memo stays
	// right even if a redelivery is filtered differently (e.g. a changed max depth).
	Index int
	URL   string // normalised
}

// Message is one input message's share of a batch.
type Message struct {
	ID   string // stable id of the input message (natsx.MsgID)
	URLs []URL
	// Redelivered marks a message delivered before (Cached sends it to Redis whole, for
	// its memo). Store ignores it: it always consults the memo.
	Redelivered bool
}

// Redis is the part of a Redis client the seen test needs.
type Redis interface {
	redis.Scripter
	Del(ctx context.Context, keys ...string) *redis.IntCmd
}

// Store is the seen test backed by Redis. It is safe for concurrent use.
type Store struct {
	rdb    Redis
	filter *bloom.Filter
	ks     redisx.Keyspace
}

// New returns a Store over filter's keys; keys of the memo share the filter's keyspace
// (prefix + {dedup}), so one script can touch both in a Redis Cluster.
func New(rdb Redis, filter *bloom.Filter, prefix string) *Store {
	return &Store{rdb: rdb, filter: filter, ks: redisx.NewKeyspace(prefix, "dedup")}
}

// DoneKey is the memo key of a message.
func (s *Store) DoneKey(msgID string) string { return s.ks.Key("done", msgID) }

// script: KEYS = the filter's bitmaps (nb of them), then one memo key per message.
// ARGV[1] = k, ARGV[2] = nb, ARGV[3] = memo TTL (s), ARGV[3+i] = message i's records.
// Returns per message the new indexes as a comma-separated string, memoised or fresh.
var script = redis.NewScript(bloom.LuaLib + `
local k, nb, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local out = {}
for i = 1, #KEYS - nb do
  local done = KEYS[nb + i]
  local memo = redis.call('GET', done)
  if memo then
    out[i] = memo
  else
    local new = bloom_tas(ARGV[3 + i], k, 1)
    local res = table.concat(new, ',')
    redis.call('SET', done, res, 'EX', ttl)
    out[i] = res
  end
end
return out
`)

// MaxURLsPerCall bounds the URLs of one script call. A Lua script blocks Redis while it
// runs (about 1 µs per bit operation, so ~60 ms for 8192 URLs at k = 7); a batch of 256
// pages with thousands of links each is split, at message boundaries, into several calls
// so the scheduler sharing the Redis is never stalled for long. A single message larger
// than this still goes in one call: its test and its memo must be atomic.
const MaxURLsPerCall = 8192

// TestAndSet runs the seen test for a batch of messages and returns, per message, the
// indexes of its new URLs (ascending, as given). A message whose result is memoised gets
// the memo back even though its bits are now set. A URL is new at most once across the
// batch: messages are processed in order. Messages without URLs cost nothing.
func (s *Store) TestAndSet(ctx context.Context, msgs []Message) ([][]int, error) {
	out := make([][]int, len(msgs))
	for start := 0; start < len(msgs); {
		end, urls := start, 0
		for end < len(msgs) && (end == start || urls+len(msgs[end].URLs) <= MaxURLsPerCall) {
			urls += len(msgs[end].URLs)
			end++
		}
		if err := s.call(ctx, msgs[start:end], out[start:end]); err != nil {
			return nil, err
		}
		start = end
	}
	return out, nil
}

// call runs one script call for msgs, writing each message's result to out.
func (s *Store) call(ctx context.Context, msgs []Message, out [][]int) error {
	keys := append(make([]string, 0, s.filter.Keys+len(msgs)), s.filter.KeyNames()...)
	args := make([]any, 3, 3+len(msgs))
	args[0], args[1], args[2] = s.filter.K, s.filter.Keys, int64(MemoTTL/time.Second)
	var todo []int // indexes into msgs sent to Redis
	for i, m := range msgs {
		if len(m.URLs) == 0 {
			continue
		}
		recs := make([]byte, 0, len(m.URLs)*s.filter.RecordSize())
		for _, u := range m.URLs {
			recs = s.filter.AppendRecord(recs, uint32(u.Index), u.URL)
		}
		keys = append(keys, s.DoneKey(m.ID))
		args = append(args, recs)
		todo = append(todo, i)
	}
	if len(todo) == 0 {
		return nil
	}
	res, err := script.Run(ctx, s.rdb, keys, args...).StringSlice()
	if err != nil {
		return fmt.Errorf("seen: test-and-set %d messages: %w", len(todo), err)
	}
	if len(res) != len(todo) {
		return fmt.Errorf("seen: test-and-set returned %d results for %d messages", len(res), len(todo))
	}
	for j, i := range todo {
		idx, err := parseIndexes(res[j])
		if err != nil {
			return fmt.Errorf("seen: result of %s: %w", msgs[i].ID, err)
		}
		out[i] = idx
	}
	return nil
}

// Forget deletes the memos of messages whose outputs are stored, in one command (all memo
// keys share a slot). A failure is harmless — the memos expire — so callers may just log it.
func (s *Store) Forget(ctx context.Context, msgIDs []string) error {
	if len(msgIDs) == 0 {
		return nil
	}
	keys := make([]string, len(msgIDs))
	for i, id := range msgIDs {
		keys[i] = s.DoneKey(id)
	}
	if err := s.rdb.Del(ctx, keys...).Err(); err != nil {
		return fmt.Errorf("seen: forget %d memos: %w", len(keys), err)
	}
	return nil
}

func parseIndexes(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	out := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("bad index %q: %w", p, err)
		}
		out[i] = n
	}
	return out, nil
}

// Cached puts an in-process cache of URLs the Bloom filter holds in front of a Store. A
// URL found in the cache is seen without asking Redis; the others go to one Store call, and
// then join the cache (new or seen, the filter holds them now). A message whose URLs are
// all cached costs no Redis call at all. A URL that an earlier message of the same batch
// asks Redis about is seen too: whatever the answer, that message has it first.
//
// A redelivered message bypasses the cache. It may carry a memo from its earlier delivery,
// and only the memo gives back the URLs that delivery found new: those URLs are in the
// cache by now and would read "seen", and they would never reach the frontier.
type Cached struct {
	Store *Store
	Cache *cache.Clock // nil: every URL goes to Redis
}

// Result is the outcome of Cached.Check.
type Result struct {
	New   [][]int // per message, the indexes of its new URLs (as Store.TestAndSet)
	Asked []bool  // per message, whether it went to Redis (only then can it have a memo)
	// Lookups counts the URLs of first deliveries; Hits those of them answered without
	// Redis (in the cache, or asked about by an earlier message of the batch).
	Lookups, Hits int
}

// Check runs the seen test for a batch of messages, the cached ones first.
func (c *Cached) Check(ctx context.Context, msgs []Message) (Result, error) {
	res := Result{New: make([][]int, len(msgs)), Asked: make([]bool, len(msgs))}
	var (
		ask     []Message
		askIdx  []int    // index into msgs of each ask entry
		toCache []uint64 // keys of first-delivery URLs asked about
		keys    []uint64
		hit     []bool
		asked   map[uint64]bool // keys asked about by earlier messages of the batch
	)
	if c.Cache != nil {
		n := 0
		for _, m := range msgs {
			n += len(m.URLs)
		}
		asked = make(map[uint64]bool, n)
		toCache = make([]uint64, 0, n)
	}
	for i, m := range msgs {
		if len(m.URLs) == 0 {
			continue
		}
		if c.Cache == nil {
			ask, askIdx = append(ask, m), append(askIdx, i)
			continue
		}
		keys, hit = keys[:0], hit[:0]
		for _, u := range m.URLs {
			keys = append(keys, cache.Key(u.URL))
			hit = append(hit, false)
		}
		if m.Redelivered {
			for _, k := range keys {
				asked[k] = true
			}
			ask, askIdx = append(ask, m), append(askIdx, i)
			continue
		}
		res.Lookups += len(keys)
		c.Cache.Lookup(keys, hit)
		hits := 0
		for j, k := range keys {
			if hit[j] || asked[k] {
				hit[j] = true
				hits++
			}
		}
		res.Hits += hits
		miss := m
		if hits > 0 {
			miss.URLs = make([]URL, 0, len(keys)-hits)
			for j, u := range m.URLs {
				if !hit[j] {
					miss.URLs = append(miss.URLs, u)
				}
			}
		}
		for j, k := range keys {
			if !hit[j] {
				toCache = append(toCache, k)
			}
		}
		if len(miss.URLs) == 0 {
			continue // all seen, nothing to ask
		}
		// Marked after the whole message: a URL repeated within one message is for the
		// script to tell (new the first time only).
		for _, k := range toCache[len(toCache)-len(miss.URLs):] {
			asked[k] = true
		}
		ask, askIdx = append(ask, miss), append(askIdx, i)
	}
	if len(ask) == 0 {
		return res, nil
	}
	got, err := c.Store.TestAndSet(ctx, ask)
	if err != nil {
		// Nothing is decided; only the statistics of the lookups made stand.
		return Result{Lookups: res.Lookups, Hits: res.Hits}, err
	}
	for j, i := range askIdx {
		res.New[i], res.Asked[i] = got[j], true
	}
	if c.Cache != nil {
		c.Cache.Add(toCache...)
	}
	return res, nil
}

// Forget is Store.Forget.
func (c *Cached) Forget(ctx context.Context, msgIDs []string) error {
	return c.Store.Forget(ctx, msgIDs)
}
