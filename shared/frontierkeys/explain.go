package frontierkeys

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// QueueHit is the result of searching one queue for a URL.
type QueueHit struct {
	Queue   string `json:"queue"`
	Len     int64  `json:"len"`
	Scanned int64  `json:"scanned"`
	Found   bool   `json:"found"`
	Index   int64  `json:"index,omitempty"` // 0 = head (next to go)
	Depth   int    `json:"depth,omitempty"`
	Hops    int    `json:"hops,omitempty"`
	Attempt int    `json:"attempt,omitempty"`
}

// Complete says the whole queue was searched.
func (q QueueHit) Complete() bool { return q.Scanned >= q.Len }

// HostState is a host's politeness state (Shard.Host).
type HostState struct {
	Known      bool
	Next       *time.Time
	CrawlDelay time.Duration
	ErrStreak  int64
	Fails      int64
	Retired    *time.Time
	Pages      *int64
	Addr       string            // the server address last requested for the host
	ExpiresIn  time.Duration     // the state of an inactive host expires
	Other      map[string]string // fields this reader does not know
}

// URLState is what the frontier of a URL's shard holds about the URL and its host.
type URLState struct {
	Shard      int
	Paused     bool
	HostActive bool       // the host holds a back queue
	HeapNext   *time.Time // the host's next fetch time while it is idle
	// The host's task out, if any: its lease token and deadline, its entry (nil when the
	// lease cannot be read) and its fetcher's last error for that task.
	LeaseToken    string
	LeaseDeadline *time.Time
	Lease         *Entry
	TaskError     *LeaseError
	// Outcome is the URL's newest line in the shard's error log; ErrorsRead lines of
	// ErrorsKey were searched for it.
	Outcome    *ErrorRecord
	ErrorsRead int
	ErrorsKey  string
	Host       HostState
	// BackQueue is the search of the host's back queue, FrontQueues of the front queues.
	BackQueue   QueueHit
	FrontQueues []QueueHit
	// ParkKey is the host's park list, ParkQueued its length; Parked its entry in the
	// parked table ("" when none), ParkedHost that entry decoded (ok false when unreadable).
	ParkKey    string
	ParkQueued int64
	Parked     string
	ParkedHost *ParkedHost
}

// ExplainOptions bound a URL's search.
type ExplainOptions struct {
	// FrontQueues is F; 0 probes every queue a scheduler may have and reports the default
	// eight, or up to the last that holds anything.
	FrontQueues int
	// ScanLimit bounds how many entries of each queue are searched for the URL (queues
	// can hold millions; a list cannot be searched by value cheaply). Default 10000.
	ScanLimit int
}

// Explain reads where url (normalised) of host is in its shard's frontier, and the state
// of the host: one round trip, then a few LRANGEs per queue searched.
func (r *Reader) Explain(ctx context.Context, shard int, host, url string, o ExplainOptions) (*URLState, error) {
	if o.ScanLimit <= 0 {
		o.ScanLimit = 10000
	}
	nq := o.FrontQueues
	if nq <= 0 {
		nq = MaxFrontQueues
	}
	ks := ForShard(r.prefix, shard, r.shards)
	var (
		hostHash                 *redis.MapStringStringCmd
		lease, lastErr, parked   *redis.StringCmd
		errLog                   *redis.StringSliceCmd
		hostTTL                  *redis.DurationCmd
		active                   *redis.BoolCmd
		paused, bqLen, parkLen   *redis.IntCmd
		heapScore, inflightScore *redis.FloatCmd
		fqLen                    = make([]*redis.IntCmd, nq)
	)
	_, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		active = p.HExists(ctx, ks.Hosts(), host)
		heapScore = p.ZScore(ctx, ks.Heap(), host)
		inflightScore = p.ZScore(ctx, ks.Inflight(), host)
		lease = p.HGet(ctx, ks.Lease(), host)
		lastErr = p.HGet(ctx, ks.LastErr(), host)
		errLog = p.LRange(ctx, ks.Errors(), 0, -1)
		hostHash = p.HGetAll(ctx, ks.Host(host))
		hostTTL = p.PTTL(ctx, ks.Host(host))
		paused = p.Exists(ctx, ks.Paused())
		bqLen = p.LLen(ctx, ks.BackQueue(host))
		parked = p.HGet(ctx, ks.Parked(), host)
		parkLen = p.LLen(ctx, ks.Park(host))
		for q := range fqLen {
			fqLen[q] = p.LLen(ctx, ks.FrontQueue(q))
		}
		return nil
	})
	// redis.Nil only says one of the keys is absent, which each field reports itself.
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("explain: redis: %w", err)
	}
	st := &URLState{Shard: shard, Paused: paused.Val() > 0, HostActive: active.Val(), ErrorsKey: ks.Errors(),
		ParkKey: ks.Park(host), ParkQueued: parkLen.Val()}
	if s, err := heapScore.Result(); err == nil {
		t := time.UnixMilli(int64(s))
		st.HeapNext = &t
	}
	if s, err := inflightScore.Result(); err == nil {
		t := time.UnixMilli(int64(s))
		st.LeaseDeadline = &t
	}
	if v, err := lease.Result(); err == nil {
		tok, e, err := ParseLease(v)
		st.LeaseToken = tok
		if err == nil {
			st.Lease = &e
		}
	}
	if v, err := lastErr.Result(); err == nil {
		if le, ok := ParseLeaseError(v); ok && le.Token == st.LeaseToken {
			st.TaskError = &le
		}
	}
	st.ErrorsRead = len(errLog.Val())
	for _, line := range errLog.Val() {
		if rec, ok := ParseErrorRecord(line); ok && rec.URL == url {
			st.Outcome = &rec
			break
		}
	}
	st.Host = parseHostState(hostHash.Val(), hostTTL)
	if v, err := parked.Result(); err == nil {
		st.Parked = v
		if ph, ok := ParseParked(host, v); ok {
			st.ParkedHost = &ph
		}
	}
	if st.BackQueue, err = r.scan(ctx, ks.BackQueue(host), BackQueueName(host), bqLen.Val(), url, o.ScanLimit); err != nil {
		return nil, err
	}
	shown := nq
	if o.FrontQueues <= 0 {
		shown = probedFront([][]*redis.IntCmd{fqLen})
	}
	for q, c := range fqLen[:shown] {
		hit, err := r.scan(ctx, ks.FrontQueue(q), FrontQueueName(q), c.Val(), url, o.ScanLimit)
		if err != nil {
			return nil, err
		}
		st.FrontQueues = append(st.FrontQueues, hit)
	}
	return st, nil
}

// parseHostState decodes a host's state hash; a field it cannot read goes to Other.
func parseHostState(h map[string]string, ttl *redis.DurationCmd) HostState {
	var hs HostState
	if len(h) == 0 {
		return hs
	}
	hs.Known = true
	if d, err := ttl.Result(); err == nil && d > 0 {
		hs.ExpiresIn = d
	}
	for k, v := range h {
		n, err := strconv.ParseInt(v, 10, 64)
		switch {
		case k == HostNext && err == nil:
			t := time.UnixMilli(n)
			hs.Next = &t
		case k == HostCD && err == nil:
			hs.CrawlDelay = time.Duration(n) * time.Millisecond
		case k == HostErr && err == nil:
			hs.ErrStreak = n
		case k == HostFails && err == nil:
			hs.Fails = n
		case k == HostRetired && err == nil:
			t := time.UnixMilli(n)
			hs.Retired = &t
		case k == HostPages && err == nil:
			hs.Pages = &n
		case k == HostAddr:
			hs.Addr = v
		default:
			if hs.Other == nil {
				hs.Other = map[string]string{}
			}
			hs.Other[k] = v
		}
	}
	return hs
}

// scanChunk is how many entries one LRANGE returns.
const scanChunk = 1000

// scan searches the first limit entries of a list for the URL, a chunk per round trip.
func (r *Reader) scan(ctx context.Context, key, name string, length int64, u string, limit int) (QueueHit, error) {
	hit := QueueHit{Queue: name, Len: length}
	end := min(length, int64(limit))
	for start := int64(0); start < end; start += scanChunk {
		stop := min(start+scanChunk, end) - 1
		es, err := r.rdb.LRange(ctx, key, start, stop).Result()
		if err != nil {
			return hit, fmt.Errorf("explain: scan %s: %w", key, err)
		}
		for i, e := range es {
			en, err := ParseEntry(e)
			if err == nil && en.URL == u {
				hit.Found, hit.Index, hit.Depth, hit.Hops, hit.Attempt = true, start+int64(i), en.Depth, en.Hops, en.Attempt
				hit.Scanned = start + int64(i) + 1
				return hit, nil
			}
		}
		hit.Scanned = start + int64(len(es))
		if int64(len(es)) < stop-start+1 {
			break // the list shrank under us
		}
	}
	return hit, nil
}
