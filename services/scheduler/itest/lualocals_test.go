package itest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/trawl/trawl/services/scheduler/internal/frontier"
	"github.com/trawl/trawl/shared/redisx"
)

// minLocalsLeft is the room each frontier script keeps under Lua's limit of 200 locals per
// function: Redis runs a script's body as one function, and the frontier's scripts are
// pasted together from the shared modules, so every name and helper a module adds at its
// top level takes one local from every script.
const minLocalsLeft = 10

// TestScriptsLocalsLeft loads each frontier script into a real Redis with more and more
// spare locals before it and reports how many fit: the room left for a new name or helper.
func TestScriptsLocalsLeft(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	ctx := context.Background()
	// loads says whether the script loads with n spare locals; a failure other than the
	// locals' limit fails the test.
	loads := func(t *testing.T, src string, n int) bool {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "local spare_%d = %d\n", i, i)
		}
		b.WriteString(src)
		err := rdb.ScriptLoad(ctx, b.String()).Err()
		if err != nil && !strings.Contains(err.Error(), "local variables") {
			t.Fatalf("load with %d spare locals: %v", n, err)
		}
		return err == nil
	}
	scripts := frontier.Scripts()
	names := make([]string, 0, len(scripts))
	for n := range scripts {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			src := redisx.Source(scripts[name])
			if src == "" {
				t.Fatal("no source")
			}
			if !loads(t, src, 0) {
				t.Fatal("the script itself is over the limit of 200 locals")
			}
			// lo loads, hi does not.
			lo, hi := 0, 201
			for hi-lo > 1 {
				mid := (lo + hi) / 2
				if loads(t, src, mid) {
					lo = mid
				} else {
					hi = mid
				}
			}
			t.Logf("%s: %d locals left of 200", name, lo)
			if lo < minLocalsLeft {
				t.Errorf("%s: %d locals left; keep at least %d", name, lo, minLocalsLeft)
			}
		})
	}
}
