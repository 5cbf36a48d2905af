package contentdup

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/redisx"
)

// The script calls of one batch, grouped per partition and sent in one pipeline.

// call is one script call of a pipeline.
type call struct {
	script *redis.Script
	keys   []string
	args   []any
	cmd    *redis.Cmd
}

// partCall is the script call of one partition, with the page of each of its entries in
// the order of the reply.
type partCall struct {
	call
	pages []int
}

// calls collects one partCall per partition, in the order they were first needed.
type calls struct {
	ix     *Index
	script *redis.Script
	head   []any // the first arguments, after which come the entries
	by     map[int]*partCall
	order  []*partCall
}

func (ix *Index) newCalls(script *redis.Script, head ...any) *calls {
	return &calls{ix: ix, script: script, head: head, by: make(map[int]*partCall)}
}

// add appends the entry of page i to partition p's call.
func (cs *calls) add(p, i int, entry ...any) {
	c := cs.by[p]
	if c == nil {
		c = &partCall{call: call{script: cs.script, keys: []string{cs.ix.parts[p]}, args: append([]any(nil), cs.head...)}}
		cs.by[p] = c
		cs.order = append(cs.order, c)
	}
	c.args = append(c.args, entry...)
	c.pages = append(c.pages, i)
}

func (cs *calls) list() []*call {
	out := make([]*call, len(cs.order))
	for i, c := range cs.order {
		out[i] = &c.call
	}
	return out
}

// runPipeline sends the script calls, and what more adds, in one pipeline. Scripts go as
// EVALSHA; those a server does not know (NOSCRIPT: a restarted or new master) are loaded
// (on every master of a cluster) and sent once more, so a flushed script cache costs one
// more round trip instead of sending every script whole each time.
func runPipeline(ctx context.Context, rdb redis.Cmdable, calls []*call, more func(redis.Pipeliner)) error {
	send := func(calls []*call, more func(redis.Pipeliner)) {
		// The pipeline's own error is the first command's; each command is read below.
		_, _ = rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for _, c := range calls {
				c.cmd = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
			}
			if more != nil {
				more(pipe)
			}
			return nil
		})
	}
	send(calls, more)
	var again []*call
	loaded := map[*redis.Script]bool{}
	for _, c := range calls {
		err := c.cmd.Err()
		switch {
		case err == nil:
		case redisx.IsNoScript(err):
			if !loaded[c.script] {
				if err := c.script.Load(ctx, rdb).Err(); err != nil {
					return fmt.Errorf("load script: %w", err)
				}
				loaded[c.script] = true
			}
			again = append(again, c)
		default:
			return err
		}
	}
	if len(again) == 0 {
		return nil
	}
	send(again, nil)
	for _, c := range again {
		if err := c.cmd.Err(); err != nil {
			return err
		}
	}
	return nil
}
