package seen

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// keptArg packs what m keeps of its URLs for seen.lua: a count, then per URL its index
// and the end of its entry in the data (big-endian uint32s, in the message's URL order,
// which is ascending by index), then the data, each entry length-prefixed so that the
// entries of the new URLs, stored concatenated, split again (SplitKept). "" when m keeps
// nothing.
func keptArg(m Message) string {
	if m.Keep == nil {
		return ""
	}
	entries := make([][]byte, len(m.URLs))
	size := 0
	for j, u := range m.URLs {
		entries[j] = m.Keep(u.Index)
		size += binary.MaxVarintLen32 + len(entries[j])
	}
	b := make([]byte, 4+8*len(m.URLs), 4+8*len(m.URLs)+size)
	binary.BigEndian.PutUint32(b, uint32(len(m.URLs)))
	end := 0
	for j, u := range m.URLs {
		at := len(b)
		b = binary.AppendUvarint(b, uint64(len(entries[j])))
		b = append(b, entries[j]...)
		end += len(b) - at
		binary.BigEndian.PutUint32(b[4+8*j:], uint32(u.Index))
		binary.BigEndian.PutUint32(b[8+8*j:], uint32(end))
	}
	return string(b)
}

// SplitKept splits what Kept returns for a message into its URLs' entries.
func SplitKept(b []byte) ([][]byte, error) {
	var out [][]byte
	for len(b) > 0 {
		n, w := binary.Uvarint(b)
		if w <= 0 || uint64(len(b)-w) < n {
			return nil, errors.New("seen: kept entries cut short")
		}
		out = append(out, b[w:w+int(n)])
		b = b[w+int(n):]
	}
	return out, nil
}

// Kept returns, for each of ids that has one, the concatenated entries its memo keeps of
// the URLs it found new (Message.Keep), gathered from every part.
func (s *Store) Kept(ctx context.Context, ids []string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, p := range s.parts {
		vals, err := s.rdb.HMGet(ctx, p.memoKey(), ids...).Result()
		if err != nil {
			return nil, fmt.Errorf("seen: read memos: %w", err)
		}
		for i, v := range vals {
			if v, ok := v.(string); ok {
				if _, kept, ok := strings.Cut(v, "|"); ok {
					out[ids[i]] = append(out[ids[i]], kept...)
				}
			}
		}
	}
	return out, nil
}

// walkPage is how many memos WalkDown reads from a part's index at a time.
const walkPage = 1000

// WalkDown calls fn with the memoised messages of every part, by stream sequence from the
// highest down, the ids memoised under one sequence together (two or more when NATS gave a
// sequence twice, natsx.Verdict), until fn returns false or none are left. Memos of an
// unknown sequence (Message.Seq 0) are left out. read, unless nil, is called after each
// read of an index and before fn is given what it read (natsx.Rollback.Refresh).
func (s *Store) WalkDown(ctx context.Context, read func(context.Context) error, fn func(seq uint64, ids []string) bool) error {
	cs := make([]*memoCursor, len(s.parts))
	for i, p := range s.parts {
		cs[i] = &memoCursor{key: p.memoSeqKey(), max: "(+inf"}
	}
	for {
		var top uint64
		found := false
		for _, c := range cs {
			if err := s.fill(ctx, c, read); err != nil {
				return err
			}
			if len(c.buf) > 0 && (!found || c.head() > top) {
				top, found = c.head(), true
			}
		}
		if !found {
			return nil
		}
		var ids []string
		for _, c := range cs {
			for len(c.buf) > 0 && c.head() == top {
				if id, _ := c.buf[0].Member.(string); !slices.Contains(ids, id) {
					ids = append(ids, id)
				}
				c.buf = c.buf[1:]
			}
		}
		slices.Sort(ids)
		if !fn(top, ids) {
			return nil
		}
	}
}

// memoCursor reads one part's memo index down, a page at a time. Pages are bounded by
// score, not offset, since memos are added above while a walk at a reconnect runs.
type memoCursor struct {
	key  string
	max  string // the next page's bound, a ZRANGE score
	buf  []redis.Z
	done bool
}

func (c *memoCursor) head() uint64 { return uint64(c.buf[0].Score) }

// fill reads c's next page once its buffer is spent. A full page leaves out the memos of
// its lowest sequence, which the next page reads whole, so that a sequence's ids are
// never split between two pages.
func (s *Store) fill(ctx context.Context, c *memoCursor, read func(context.Context) error) error {
	if len(c.buf) > 0 || c.done {
		return nil
	}
	zs, err := s.rdb.ZRevRangeByScoreWithScores(ctx, c.key, &redis.ZRangeBy{Max: c.max, Min: "-inf", Count: walkPage}).Result()
	if err != nil {
		return fmt.Errorf("seen: read memo index: %w", err)
	}
	if len(zs) < walkPage {
		c.done = true
	} else {
		low := zs[len(zs)-1].Score
		n := len(zs)
		for n > 0 && zs[n-1].Score == low {
			n--
		}
		if n == 0 { // one sequence filled the page: nothing rolled back gives one that often
			c.max = "(" + strconv.FormatFloat(low, 'f', -1, 64)
		} else {
			zs, c.max = zs[:n], strconv.FormatFloat(low, 'f', -1, 64)
		}
	}
	c.buf = zs
	if len(zs) > 0 && read != nil {
		return read(ctx)
	}
	return nil
}
