package cli

import (
	"fmt"
	"testing"

	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/testwait"
)

func TestPauseResume(t *testing.T) {
	s := startStack(t, 3)
	ctx := testwait.Context(t)
	paused := func() []bool {
		out := make([]bool, 3)
		for k := range out {
			n, err := s.rdb.Exists(ctx, frontierkeys.ForShard("trawl", k, 3).Paused()).Result()
			if err != nil {
				t.Fatal(err)
			}
			out[k] = n == 1
		}
		return out
	}
	tests := []struct {
		args   []string
		stdout string
		want   []bool
	}{
		{[]string{"pause"}, "shard 0: paused\nshard 1: paused\nshard 2: paused\n", []bool{true, true, true}},
		{[]string{"resume", "-shard", "1"}, "shard 1: running\n", []bool{true, false, true}},
		{[]string{"pause", "-shard", "1"}, "shard 1: paused\n", []bool{true, true, true}},
		{[]string{"resume"}, "shard 0: running\nshard 1: running\nshard 2: running\n", []bool{false, false, false}},
		{[]string{"pause", "-shard", "2"}, "shard 2: paused\n", []bool{false, false, true}},
		// Pausing twice is harmless.
		{[]string{"pause", "-shard", "2"}, "shard 2: paused\n", []bool{false, false, true}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.args), func(t *testing.T) {
			r := s.inv.run(t, tt.args...)
			if r.code != 0 || r.stdout != tt.stdout {
				t.Fatalf("exit %d, stdout %q, stderr %q; want stdout %q", r.code, r.stdout, r.stderr, tt.stdout)
			}
			if got := paused(); fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("paused keys %v, want %v", got, tt.want)
			}
		})
	}
	t.Run("other prefix", func(t *testing.T) {
		r := s.inv.run(t, "pause", "-prefix", "crawl2", "-shards", "1")
		if r.code != 0 || r.stdout != "shard 0: paused\n" {
			t.Fatalf("exit %d, stdout %q", r.code, r.stdout)
		}
		if n := s.rdb.Exists(ctx, "crawl2:{s0}:paused").Val(); n != 1 {
			t.Errorf("crawl2:{s0}:paused not set")
		}
		if got := paused(); fmt.Sprint(got) != fmt.Sprint([]bool{false, false, true}) {
			t.Errorf("the default prefix changed: %v", got)
		}
	})
}
