package seen

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
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

// Memoised is a memoised message: its id and stream sequence.
type Memoised struct {
	ID  string
	Seq uint64
}

// walkPage is how many memos WalkDown reads from Redis at a time.
const walkPage = 1000

// WalkDown calls fn with each part's memoised messages, from the highest stream sequence
// down, until fn returns false or the part has no more; then the next part. Memos of an
// unknown sequence (Message.Seq 0) are left out. read, unless nil, is called after each
// read of the index and before fn is given what it read (natsx.Rollback.Refresh).
func (s *Store) WalkDown(ctx context.Context, read func(context.Context) error, fn func(Memoised) bool) error {
	for _, p := range s.parts {
	page:
		for off := int64(0); ; off += walkPage {
			zs, err := s.rdb.ZRevRangeByScoreWithScores(ctx, p.memoSeqKey(), &redis.ZRangeBy{Max: "(+inf", Min: "-inf", Offset: off, Count: walkPage}).Result()
			if err != nil {
				return fmt.Errorf("seen: read memo index: %w", err)
			}
			if len(zs) > 0 && read != nil {
				if err := read(ctx); err != nil {
					return err
				}
			}
			for _, z := range zs {
				id, _ := z.Member.(string)
				if !fn(Memoised{ID: id, Seq: uint64(z.Score)}) {
					break page
				}
			}
			if len(zs) < walkPage {
				break
			}
		}
	}
	return nil
}
