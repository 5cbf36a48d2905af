package itest

import (
	"slices"
	"strconv"
	"testing"

	"github.com/trawl/trawl/services/dedup/internal/bloom"
	"github.com/trawl/trawl/services/dedup/internal/seen"
	"github.com/trawl/trawl/shared/testwait"
)

// msg builds a seen.Message whose URL indexes are their positions.
func msg(id string, us ...string) seen.Message {
	m := seen.Message{ID: id}
	for i, u := range us {
		m.URLs = append(m.URLs, seen.URL{Index: i, URL: u})
	}
	return m
}

func TestSeenNewThenSeenAcrossMessages(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	ctx := testwait.Context(t)
	f := newFilter(t, c, "trawl", smallParams)
	s := seen.New(c, f, "trawl")

	a, b := "https://a.test/1", "https://b.test/2"
	got, err := s.TestAndSet(ctx, []seen.Message{
		msg("S:1", a, b, a),              // repeated within the message
		msg("S:2", b, "https://c.test/"), // b repeated across messages in one batch
		msg("S:3"),                       // nothing to test
	})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]int{{0, 1}, {1}, nil}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("new = %v, want %v", got, want)
	}
	// A later message with the same URLs finds them all seen.
	got, err = s.TestAndSet(ctx, []seen.Message{msg("S:4", b, a, "https://c.test/")})
	if err != nil {
		t.Fatal(err)
	}
	if len(got[0]) != 0 {
		t.Errorf("later message: new %v, want none", got[0])
	}
}

func TestSeenMemoIsIdempotent(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	ctx := testwait.Context(t)
	f := newFilter(t, c, "trawl", smallParams)
	s := seen.New(c, f, "trawl")

	// Indexes are positions in the original message: 0 and 2 were filtered out upstream.
	m := seen.Message{ID: "CRAWL_DISCOVERED:7", Seq: 7, URLs: []seen.URL{{Index: 1, URL: "https://m.test/1"}, {Index: 3, URL: "https://m.test/3"}, {Index: 4, URL: "https://m.test/1"}}}
	first, err := s.TestAndSet(ctx, []seen.Message{m})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{1, 3}; !slices.Equal(first[0], want) {
		t.Fatalf("first delivery: new %v, want %v", first[0], want)
	}
	// The memo is indexed by the message's stream sequence, for Trim.
	if score, err := c.ZScore(ctx, s.MemoSeqKey(), m.ID).Result(); err != nil || score != 7 {
		t.Errorf("memo index score %v, %v; want 7", score, err)
	}

	// Redelivery (same id, bits now set): the same answer, so nothing is lost. It sits in
	// a batch with a new message holding the same URL, which must be seen.
	again, err := s.TestAndSet(ctx, []seen.Message{msg("CRAWL_DISCOVERED:8", "https://m.test/3"), m})
	if err != nil {
		t.Fatal(err)
	}
	if len(again[0]) != 0 || !slices.Equal(again[1], first[0]) {
		t.Fatalf("redelivery batch: %v, want [[] %v]", again, first[0])
	}

	// After the outputs are stored the memo goes; a redelivery then publishes nothing.
	if err := s.Forget(ctx, []string{m.ID, "CRAWL_DISCOVERED:8"}); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.HLen(ctx, s.MemoKey()).Result(); n != 0 {
		t.Errorf("%d memos left after Forget", n)
	}
	if n, _ := c.ZCard(ctx, s.MemoSeqKey()).Result(); n != 0 {
		t.Errorf("%d memo index entries left after Forget", n)
	}
	late, err := s.TestAndSet(ctx, []seen.Message{m})
	if err != nil {
		t.Fatal(err)
	}
	if len(late[0]) != 0 {
		t.Errorf("redelivery after Forget: new %v, want none", late[0])
	}
}

func TestSeenMemoOfNothingNew(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	ctx := testwait.Context(t)
	f := newFilter(t, c, "trawl", smallParams)
	s := seen.New(c, f, "trawl")

	if _, err := s.TestAndSet(ctx, []seen.Message{msg("X:1", "https://n.test/")}); err != nil {
		t.Fatal(err)
	}
	// X:2 has nothing new; its memo is the empty result, not a missing key.
	got, err := s.TestAndSet(ctx, []seen.Message{msg("X:2", "https://n.test/")})
	if err != nil {
		t.Fatal(err)
	}
	if len(got[0]) != 0 {
		t.Fatalf("new %v, want none", got[0])
	}
	v, err := c.HGet(ctx, s.MemoKey(), "X:2").Result()
	if err != nil || v != "" {
		t.Errorf("memo of X:2 = %q, %v; want the empty string", v, err)
	}
}

func TestSeenSpansKeys(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	ctx := testwait.Context(t)
	f := newFilter(t, c, "trawl", bloom.Params{Capacity: 100_000, FPRate: 0.01, KeyBits: 1 << 16})
	s := seen.New(c, f, "trawl")

	var msgs []seen.Message
	for i := range 20 {
		msgs = append(msgs, msg("K:"+string(rune('a'+i)), urls("k", i*100, 100)...))
	}
	got, err := s.TestAndSet(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range got {
		if !slices.Equal(g, span(0, 100)) {
			t.Fatalf("message %d: %d new, want 100", i, len(g))
		}
	}
	// The same URLs under new ids: all seen, through all 17 keys.
	for i := range msgs {
		msgs[i].ID += "-again"
	}
	got, err = s.TestAndSet(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range got {
		if len(g) != 0 {
			t.Errorf("message %d again: %d new, want 0", i, len(g))
		}
	}
}

// TestSeenLargeBatchSplit: a batch bigger than MaxURLsPerCall is split at message
// boundaries into several calls, with the same results as one call: URLs repeated in a
// later call are seen, and an oversized message still goes through whole.
func TestSeenLargeBatchSplit(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	ctx := testwait.Context(t)
	f := newFilter(t, c, "trawl", smallParams)
	s := seen.New(c, f, "trawl")

	per := seen.MaxURLsPerCall/2 - 100 // two messages per call
	var msgs []seen.Message
	for i := range 4 {
		msgs = append(msgs, msg("L:"+strconv.Itoa(i), urls("large", i*per, per)...))
	}
	// The last message repeats the first message's first 10 URLs, two calls later, and is
	// itself larger than one call.
	big := append(urls("large", 0, 10), urls("big", 0, seen.MaxURLsPerCall+10)...)
	msgs = append(msgs, msg("L:big", big...))

	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := s.TestAndSet(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if n := redisCalls(t, c, "eval", "evalsha"); n != 3 {
		t.Errorf("%d script calls, want 3: [L:0 L:1] [L:2 L:3] [L:big]", n)
	}
	for i := range 4 {
		if !slices.Equal(got[i], span(0, per)) {
			t.Errorf("message %d: %d new, want all %d", i, len(got[i]), per)
		}
	}
	if !slices.Equal(got[4], span(10, seen.MaxURLsPerCall+10)) {
		t.Errorf("big message: %d new starting at %v, want %d starting at 10", len(got[4]), got[4][:1], seen.MaxURLsPerCall+10)
	}
	for _, m := range msgs {
		if ok, _ := c.HExists(ctx, s.MemoKey(), m.ID).Result(); !ok {
			t.Errorf("no memo for %s", m.ID)
		}
	}
}
