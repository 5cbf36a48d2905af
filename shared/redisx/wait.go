package redisx

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Waiter makes a write that must outlive its master's crash wait for a replica (WAIT).
// Redis replicates asynchronously: a master that dies before it has passed a write on
// takes the write with it, and the replica promoted in its place never saw it. Waiting
// after the write and before acting on it (acking the message that caused it, publishing
// what it leased) closes that window for the writes that matter.
//
// WAIT counts the writes of its own connection, and a pooled client may run the write
// and the WAIT on different ones; so Replicated writes a marker under the same hash tag on
// one connection of the key's master and waits for that: the master replicates in order,
// so once the marker is on a replica every earlier write of the slot is too.
//
// A master with no replica connected (a promoted one before its old master returns) has
// nobody to lose a write to, since it has no replica to fail over to either: a wait that
// no replica answers is let through, and that master is not waited on again for a second.
type Waiter struct {
	c       redis.UniversalClient
	timeout time.Duration // 0: never wait

	mu    sync.Mutex
	alone map[string]time.Time // master address → until when it is not waited on
}

// aloneFor is how long a master none of whose replicas answered is not waited on.
const aloneFor = time.Second

// NewWaiter returns a Waiter on c that waits up to timeout (TRAWL_REDIS_WAIT); 0 turns
// waiting off.
func NewWaiter(c redis.UniversalClient, timeout time.Duration) *Waiter {
	return &Waiter{c: c, timeout: timeout, alone: map[string]time.Time{}}
}

// Replicated waits until a replica of the master holding key's slot has every write made
// to that slot so far, or the timeout passes. key is the marker written, in the slot of
// the writes to wait for (the same hash tag). It reports whether a replica acknowledged;
// an error is a failure to reach the master.
func (w *Waiter) Replicated(ctx context.Context, key string) (bool, error) {
	if w == nil || w.timeout <= 0 {
		return false, nil
	}
	node, ok := w.c.(*redis.Client)
	if cc, isCluster := w.c.(*redis.ClusterClient); isCluster {
		var err error
		if node, err = cc.MasterForKey(ctx, key); err != nil {
			return false, fmt.Errorf("redisx: master of %s: %w", key, err)
		}
		ok = true
	}
	if !ok {
		return false, fmt.Errorf("redisx: wait: client %T", w.c)
	}
	addr := node.Options().Addr
	w.mu.Lock()
	skip := time.Now().Before(w.alone[addr])
	w.mu.Unlock()
	if skip {
		return false, nil
	}
	var wait *redis.Cmd
	// One pipeline of a single-node client runs on one connection.
	_, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, key, 1, time.Minute)
		wait = p.Do(ctx, "WAIT", 1, w.timeout.Milliseconds())
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("redisx: wait for a replica of %s: %w", addr, err)
	}
	if n, _ := wait.Int64(); n >= 1 {
		return true, nil
	}
	w.mu.Lock()
	w.alone[addr] = time.Now().Add(aloneFor)
	w.mu.Unlock()
	return false, nil
}
