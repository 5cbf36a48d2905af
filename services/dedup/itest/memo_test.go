package itest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/services/dedup/internal/bloom"
	"github.com/trawl/trawl/services/dedup/internal/seen"
	"github.com/trawl/trawl/shared/testwait"
)

// TestSeenTrimToAckFloor: memos at or below the ack floor go, the others stay and still
// give a redelivery its first answer.
func TestSeenTrimToAckFloor(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	ctx := testwait.Context(t)
	f := newFilter(t, c, "trawl", smallParams)
	s := seen.New(c, f, "trawl")

	var msgs []seen.Message
	for i := 1; i <= 5000; i++ {
		m := msg(fmt.Sprintf("S:%d", i), fmt.Sprintf("https://t.test/%d", i))
		m.Seq = uint64(i)
		msgs = append(msgs, m)
	}
	if _, err := s.TestAndSet(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	// More than one trim slice below the floor.
	removed, left, err := s.Trim(ctx, 4990)
	if err != nil {
		t.Fatal(err)
	}
	if removed != 4990 || left != 10 {
		t.Fatalf("Trim(4990) removed %d, left %d; want 4990, 10", removed, left)
	}
	if n, _ := c.HLen(ctx, s.MemoKey()).Result(); n != 10 {
		t.Errorf("%d memos in the hash, want 10", n)
	}
	got, err := s.TestAndSet(ctx, []seen.Message{msgs[4994], msgs[0]})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got[0], []int{0}) {
		t.Errorf("message 4995 above the floor: new %v, want its memo [0]", got[0])
	}
	if len(got[1]) != 0 {
		t.Errorf("message 1, trimmed: new %v, want none (its URL is seen)", got[1])
	}
}

// TestServiceMemosTrimmedToAckFloor: memos left behind (an instance died, or forgetting
// them failed) are removed as soon as the consumer's ack floor passes their messages,
// while the memo of a message still unacked stays until its redelivery has used it.
func TestServiceMemosTrimmedToAckFloor(t *testing.T) {
	t.Parallel()
	s := startStack(t, redisproc.Options{}, map[string]string{
		"TRAWL_DEDUP_MEMO_TRIM_INTERVAL": "1s",
		"TRAWL_ACK_WAIT":                 "8s",
	})
	c := redisClient(t, s.redis)
	ctx := testwait.Context(t)
	const acked = 300
	for i := range acked {
		s.publishDiscovered(t, link(fmt.Sprintf("http://a.test/%d", i), 1))
	}
	got, ids := map[int][]string{}, map[string]int{}
	testwait.Eventually(t, 20*time.Second, "the acked messages' URLs on the frontier", func() bool {
		s.frontier(t, got, ids)
		return len(got[0])+len(got[1]) == acked
	})
	testwait.Eventually(t, 20*time.Second, "dedup consumer idle", func() bool { return s.idle(t) })
	if err := s.svc.Stop(); err != nil {
		t.Fatal(err)
	}

	// Memos left behind for messages long acked, which nothing will forget. Stored before
	// the message below is taken, so that its AckWait leaves the trim all the time it can.
	store := seen.New(c, nil, s.cfg.Common.RedisPrefix)
	if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := 1; i <= acked; i++ {
			p.HSet(ctx, store.MemoKey(), fmt.Sprintf("left:%d", i), "0")
			p.ZAdd(ctx, store.MemoSeqKey(), redis.Z{Score: float64(i), Member: fmt.Sprintf("left:%d", i)})
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// One more message, taken by an instance that dies after its seen test.
	s.publishDiscovered(t, link("http://b.test/kept", 1), link("http://c.test/kept", 1))
	id, seq := s.takeAsCrashed(t, c, []string{"http://b.test/kept", "http://c.test/kept"})
	if seq != acked+1 {
		t.Fatalf("taken message has sequence %d, want %d", seq, acked+1)
	}

	s.start(t)
	// Before the taken message comes back (AckWait 8 s), the trim has removed every memo
	// below the ack floor and kept the one above it.
	testwait.Eventually(t, 5*time.Second, "memos trimmed to the unacked message's", func() bool {
		ms, err := c.ZRange(ctx, store.MemoSeqKey(), 0, -1).Result()
		return err == nil && slices.Equal(ms, []string{id})
	})
	if n, _ := c.HLen(ctx, store.MemoKey()).Result(); n != 1 {
		t.Errorf("%d memos in the hash, want 1", n)
	}
	// The gauge is set once the trim call returns, a moment after Redis shows its effect.
	testwait.Eventually(t, 5*time.Second, "trawl_dedup_memos at 1", func() bool { return s.metric(t, "trawl_dedup_memos") == 1 })

	// The redelivery republishes the URLs its first delivery found new.
	testwait.Eventually(t, 20*time.Second, "the unacked message's URLs on the frontier", func() bool {
		s.frontier(t, got, ids)
		return slices.Contains(got[0], "http://c.test/kept") && slices.Contains(got[1], "http://b.test/kept")
	})
	testwait.Eventually(t, 20*time.Second, "dedup consumer idle", func() bool { return s.idle(t) })
	testwait.Eventually(t, 5*time.Second, "no memo left", func() bool {
		n, err := c.ZCard(ctx, store.MemoSeqKey()).Result()
		h, err2 := c.HLen(ctx, store.MemoKey()).Result()
		return err == nil && err2 == nil && n == 0 && h == 0
	})
}

// TestSeenKeepsEntriesOfNewURLs: what a message keeps of its URLs (Message.Keep) is stored
// with its memo for the URLs it found new, and only those, across the filter's parts; a
// redelivery answered from the memo leaves it as it was; Forget and Trim remove it with
// the memo; WalkDown gives the memos from the highest sequence down, without those of an
// unknown sequence.
func TestSeenKeepsEntriesOfNewURLs(t *testing.T) {
	t.Parallel()
	for _, parts := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d parts", parts), func(t *testing.T) {
			_, c := startRedis(t)
			ctx := testwait.Context(t)
			p := smallParams
			p.Parts = parts
			fs, err := bloom.NewParts("trawl", p)
			if err != nil {
				t.Fatal(err)
			}
			if err := fs.Init(ctx, c); err != nil {
				t.Fatal(err)
			}
			s := seen.NewParts(c, fs)
			keep := func(m seen.Message) seen.Message {
				m.Keep = func(i int) []byte { return []byte("kept " + m.URLs[i].URL) }
				return m
			}
			us := urls("k", 0, 8)
			if _, err := s.TestAndSet(ctx, []seen.Message{msg("P", us[1], us[5])}); err != nil {
				t.Fatal(err)
			}
			a := keep(msg("A", us[:6]...))
			a.Seq = 7
			b := keep(msg("B", us[1]))
			b.Seq = 9
			unknown := keep(msg("U", us[6]))
			got, err := s.TestAndSet(ctx, []seen.Message{a, b, unknown})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got[0], []int{0, 2, 3, 4}) || len(got[1]) != 0 {
				t.Fatalf("new %v, want [[0 2 3 4] []]", got[:2])
			}
			want := []string{"kept " + us[0], "kept " + us[2], "kept " + us[3], "kept " + us[4]}
			keptOf := func(id string) []string {
				t.Helper()
				k, err := s.Kept(ctx, []string{id})
				if err != nil {
					t.Fatal(err)
				}
				es, err := seen.SplitKept(k[id])
				if err != nil {
					t.Fatal(err)
				}
				var out []string
				for _, e := range es {
					out = append(out, string(e))
				}
				slices.Sort(out)
				return out
			}
			if k := keptOf("A"); !slices.Equal(k, want) {
				t.Errorf("A keeps %q, want %q", k, want)
			}
			if k := keptOf("B"); len(k) != 0 {
				t.Errorf("B, with nothing new, keeps %q", k)
			}
			// The redelivery gets its memo; what it keeps is unchanged.
			a.Keep = func(int) []byte { return []byte("changed") }
			if got, err := s.TestAndSet(ctx, []seen.Message{a}); err != nil || !slices.Equal(got[0], []int{0, 2, 3, 4}) {
				t.Fatalf("redelivery: new %v, %v", got, err)
			}
			if k := keptOf("A"); !slices.Equal(k, want) {
				t.Errorf("after the redelivery A keeps %q, want %q", k, want)
			}

			// D is memoised under A's sequence, as when a rolled-back NATS gives it twice.
			d := keep(msg("D", us[6]))
			d.Seq = 7
			if _, err := s.TestAndSet(ctx, []seen.Message{d}); err != nil {
				t.Fatal(err)
			}
			var walked []string
			if err := s.WalkDown(ctx, nil, func(seq uint64, ids []string) bool {
				walked = append(walked, fmt.Sprintf("%d:%s", seq, strings.Join(ids, ",")))
				return true
			}); err != nil {
				t.Fatal(err)
			}
			// P and U have no sequence (0): never walked. A and D, sharing a sequence, come
			// together, whichever parts their memos are in.
			if want := []string{"9:B", "7:A,D"}; !slices.Equal(walked, want) {
				t.Errorf("walked %q, want %q", walked, want)
			}
			if err := s.Forget(ctx, []string{"D"}); err != nil {
				t.Fatal(err)
			}

			if err := s.Forget(ctx, []string{"A"}); err != nil {
				t.Fatal(err)
			}
			if k := keptOf("A"); len(k) != 0 {
				t.Errorf("after Forget A keeps %q", k)
			}
			c2 := keep(msg("C", us[7]))
			c2.Seq = 11
			if _, err := s.TestAndSet(ctx, []seen.Message{c2}); err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.Trim(ctx, 11); err != nil {
				t.Fatal(err)
			}
			if k := keptOf("C"); len(k) != 0 {
				t.Errorf("after Trim C keeps %q", k)
			}
		})
	}
}
