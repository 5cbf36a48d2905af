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
//
// A memo is needed only while its message can be delivered again, that is until the
// consumer's ack floor passes the message's stream sequence. Memos are kept in one hash
// with an index by stream sequence, and Trim removes those at or below the ack floor, so
// memos left by a crash or a failed Forget go as soon as their messages are acked, however
// long that takes, and never while a redelivery can still come.
package seen

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/services/dedup/internal/bloom"
	"github.com/trawl/trawl/services/dedup/internal/cache"
	"github.com/trawl/trawl/shared/bloomhash"
	"github.com/trawl/trawl/shared/redisx"
)

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
	ID string // stable id of the input message (natsx.MsgID)
	// Seq is the message's stream sequence. Its memo is kept until the consumer's ack
	// floor passes it (Trim): only then can no redelivery come. 0 = unknown: the memo is
	// kept until Forget.
	Seq  uint64
	URLs []URL
	// Redelivered marks a message delivered before (Cached sends it to Redis whole, for
	// its memo). Store ignores it: it always consults the memo.
	Redelivered bool
	// Keep, when set, gives what to keep of the URL at index should it be new: the memo
	// then holds these entries of its new URLs too (Kept), written in the same step as the
	// bits, so that the message's outputs can be rebuilt if NATS loses the message while
	// Redis keeps the bits. It is called only for URLs that go to Redis.
	Keep func(index int) []byte
}

// Redis is the part of a Redis client the seen test needs.
type Redis interface {
	redis.Cmdable
}

// Store is the seen test backed by Redis. It is safe for concurrent use.
type Store struct {
	rdb   Redis
	parts []part
	// OnGrow, if set, is called after this Store added a layer to a part of the filter
	// (another replica may add one too; only the one that did is told).
	OnGrow func(*bloom.Filter, bloom.Layer)
}

// part is one sub-filter with its memos, all under the part's hash tag.
type part struct {
	filter *bloom.Filter
	ks     redisx.Keyspace
}

// New returns a Store over one filter's keys; keys of the memo share the keyspace of a
// filter of one part (bloomhash.PartKeyspace, prefix + {dedup}), so one script can touch
// both in a Redis Cluster.
func New(rdb Redis, filter *bloom.Filter, prefix string) *Store {
	return &Store{rdb: rdb, parts: []part{{filter: filter, ks: bloomhash.PartKeyspace(prefix, 0, 1)}}}
}

// NewParts returns a Store over a filter split into parts: each URL is tested in its
// part (bloom.Parts.Of), and each part keeps its own memos of what it found new, in its
// own keyspace. A message's memo is so split over the parts its URLs fall in; each share
// is written atomically with that part's bits, which is what a redelivery needs: every
// part it reaches answers from its memo.
func NewParts(rdb Redis, parts bloom.Parts) *Store {
	s := &Store{rdb: rdb}
	for _, f := range parts {
		s.parts = append(s.parts, part{filter: f, ks: f.Keyspace()})
	}
	return s
}

// MemoKey is the hash of memos of the first part: message id → its new indexes,
// comma-separated, then, when the message kept something (Message.Keep), "|" and the
// kept entries of its new URLs.
func (s *Store) MemoKey() string { return s.parts[0].memoKey() }

// MemoSeqKey is the sorted set of the first part's memoised message ids scored by stream
// sequence, which Trim cuts below the ack floor.
func (s *Store) MemoSeqKey() string { return s.parts[0].memoSeqKey() }

func (p part) memoKey() string    { return p.ks.Key("memo") }
func (p part) memoSeqKey() string { return p.ks.Key("memo", "seq") }

//go:embed lua/seen.lua
var luaFS embed.FS

// script is the memoised test-and-set of a batch: the bloom module, then lua/seen.lua
// (whose header gives its KEYS, ARGV and reply).
var script = redisx.Script(bloomhash.LuaNames, bloom.Module, redisx.Lua{FS: luaFS, Name: "lua/seen.lua"})

// maxStuck bounds the calls in a row that handle nothing because the layers changed.
const maxStuck = 64

// MaxURLsPerCall bounds the URLs of one script call. A Lua script blocks Redis while it
// runs (about 8 µs per new URL); a batch of 256 pages with thousands of links each is
// split, at message boundaries, into several calls so the scheduler sharing the Redis is
// never stalled for long. A single message larger than this still goes in one call: its
// test and its memo must be atomic.
const MaxURLsPerCall = 8192

// TestAndSet runs the seen test for a batch of messages and returns, per message, the
// indexes of its new URLs (ascending, as given). A message whose result is memoised gets
// the memo back even though its bits are now set. A URL is new at most once across the
// batch: messages are processed in order. Messages without URLs cost nothing. With several
// parts, each part's share of the batch goes in its own calls, the parts concurrently.
func (s *Store) TestAndSet(ctx context.Context, msgs []Message) ([][]int, error) {
	if len(s.parts) == 1 {
		return s.parts[0].testAndSet(ctx, s, msgs)
	}
	of := bloom.Parts{}
	for _, p := range s.parts {
		of = append(of, p.filter)
	}
	sub := make([][]Message, len(s.parts))
	for p := range sub {
		sub[p] = make([]Message, len(msgs))
	}
	for i, m := range msgs {
		for p := range sub {
			sub[p][i] = Message{ID: m.ID, Seq: m.Seq, Redelivered: m.Redelivered, Keep: m.Keep}
		}
		for _, u := range m.URLs {
			p := of.Of(u.URL)
			sub[p][i].URLs = append(sub[p][i].URLs, u)
		}
	}
	res := make([][][]int, len(s.parts))
	errs := make([]error, len(s.parts))
	var wg sync.WaitGroup
	for p := range s.parts {
		wg.Go(func() { res[p], errs[p] = s.parts[p].testAndSet(ctx, s, sub[p]) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out := make([][]int, len(msgs))
	for i := range msgs {
		for p := range s.parts {
			out[i] = append(out[i], res[p][i]...)
		}
		slices.Sort(out[i])
	}
	return out, nil
}

func (p part) testAndSet(ctx context.Context, s *Store, msgs []Message) ([][]int, error) {
	out := make([][]int, len(msgs))
	for start, stuck := 0, 0; start < len(msgs); {
		end, urls := start, 0
		for end < len(msgs) && (end == start || urls+len(msgs[end].URLs) <= MaxURLsPerCall) {
			urls += len(msgs[end].URLs)
			end++
		}
		done, err := p.call(ctx, s, msgs[start:end], out[start:end])
		if err != nil {
			return nil, err
		}
		if done == 0 {
			// A layer was added, by this call or another replica: rare, so many in a row
			// mean something is wrong.
			if stuck++; stuck > maxStuck {
				return nil, fmt.Errorf("seen: test-and-set: layers kept changing under %d calls", maxStuck)
			}
		} else {
			stuck = 0
		}
		start += done
	}
	return out, nil
}

// call runs one script call for msgs, writing each handled message's result to out, and
// returns how many messages are handled (all, unless a layer had to be added first).
func (p part) call(ctx context.Context, s *Store, msgs []Message, out [][]int) (int, error) {
	call := p.filter.NewCall(p.memoKey(), p.memoSeqKey())
	args := append(make([]any, 0, len(call.Args)+4*len(msgs)), call.Args...)
	var todo []int // indexes into msgs sent to Redis
	for i, m := range msgs {
		if len(m.URLs) == 0 {
			continue
		}
		recs := make([]byte, 0, len(m.URLs)*call.RecordSize())
		for _, u := range m.URLs {
			recs = call.AppendRecord(recs, uint32(u.Index), u.URL)
		}
		var seq any = m.Seq
		if m.Seq == 0 {
			seq = "+inf" // unknown: kept until Forget, never trimmed
		}
		args = append(args, m.ID, seq, recs, keptArg(m))
		todo = append(todo, i)
	}
	if len(todo) == 0 {
		return len(msgs), nil
	}
	res, err := script.Run(ctx, s.rdb, call.Keys, args...).StringSlice()
	if err != nil {
		return 0, fmt.Errorf("seen: test-and-set %d messages: %w", len(todo), err)
	}
	if len(res) == 0 || len(res)-1 > len(todo) || (res[0] == "ok" && len(res)-1 != len(todo)) {
		return 0, fmt.Errorf("seen: test-and-set returned %d results for %d messages", len(res)-1, len(todo))
	}
	for j, r := range res[1:] {
		i := todo[j]
		idx, err := parseIndexes(r)
		if err != nil {
			return 0, fmt.Errorf("seen: result of %s: %w", msgs[i].ID, err)
		}
		out[i] = idx
	}
	switch res[0] {
	case "ok":
		return len(msgs), nil
	case "stale":
		return 0, p.filter.Load(ctx, s.rdb)
	case "full":
		added, err := p.filter.Grow(ctx, s.rdb, len(call.Layers))
		if err != nil {
			return 0, fmt.Errorf("seen: %w", err)
		}
		if added && s.OnGrow != nil {
			ls := p.filter.Layers()
			s.OnGrow(p.filter, ls[len(ls)-1])
		}
		// Messages up to the first one not handled are done (empty ones included).
		return todo[len(res)-1], nil
	default:
		return 0, fmt.Errorf("seen: test-and-set status %q", res[0])
	}
}

// Forget deletes the memos of messages whose outputs are stored, in one round trip. A
// failure is harmless — Trim removes the memos once the messages are acked — so callers
// may just log it.
func (s *Store) Forget(ctx context.Context, msgIDs []string) error {
	return s.forget(ctx, s.parts, msgIDs)
}

func (s *Store) forget(ctx context.Context, parts []part, msgIDs []string) error {
	if len(msgIDs) == 0 {
		return nil
	}
	members := make([]any, len(msgIDs))
	for i, id := range msgIDs {
		members[i] = id
	}
	var err error
	if len(parts) == 1 {
		_, err = s.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			pipe.HDel(ctx, parts[0].memoKey(), msgIDs...)
			pipe.ZRem(ctx, parts[0].memoSeqKey(), members...)
			return nil
		})
	} else {
		// A transaction may not span slots, so each part deletes its memos in a script
		// of its own (atomic: a memo never outlives its index entry, which Trim needs to
		// find it), all in one pipeline, one round trip per node on a cluster.
		_, err = s.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for _, p := range parts {
				pipe.Eval(ctx, forgetLua, []string{p.memoKey(), p.memoSeqKey()}, members...)
			}
			return nil
		})
	}
	if err != nil {
		return fmt.Errorf("seen: forget %d memos: %w", len(msgIDs), err)
	}
	return nil
}

// forgetLua deletes the memos ARGV from the memo hash KEYS[1] and its index KEYS[2]. It is
// sent whole (EVAL, not EVALSHA) because a pipeline cannot fall back on NOSCRIPT.
const forgetLua = `redis.call('HDEL', KEYS[1], unpack(ARGV)) redis.call('ZREM', KEYS[2], unpack(ARGV)) return 0`

// trimSlice bounds the memos one Trim round trip removes, so Redis is never blocked long.
const trimSlice = 4096

// Trim removes the memos of messages at or below the consumer's ack floor (the stream
// sequence below which every message is acked or terminated): none of them can be
// delivered again, so their memos can never be read. It returns how many it removed and
// how many are left, counting a message's memo once per part that holds a share of it.
func (s *Store) Trim(ctx context.Context, ackFloor uint64) (removed int, left int64, err error) {
	upTo := strconv.FormatUint(ackFloor, 10)
	for _, p := range s.parts {
		for {
			ids, err := s.rdb.ZRangeByScore(ctx, p.memoSeqKey(), &redis.ZRangeBy{Min: "-inf", Max: upTo, Count: trimSlice}).Result()
			if err != nil {
				return removed, 0, fmt.Errorf("seen: trim memos to %d: %w", ackFloor, err)
			}
			if len(ids) == 0 {
				break
			}
			// Below the floor no memo is written again, so reading and deleting need not
			// be atomic.
			if err := s.forget(ctx, []part{p}, ids); err != nil {
				return removed, 0, fmt.Errorf("seen: trim memos to %d: %w", ackFloor, err)
			}
			removed += len(ids)
			if len(ids) < trimSlice {
				break
			}
		}
		n, err := s.rdb.ZCard(ctx, p.memoSeqKey()).Result()
		if err != nil {
			return removed, 0, fmt.Errorf("seen: count memos: %w", err)
		}
		left += n
	}
	return removed, left, nil
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
