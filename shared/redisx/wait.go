package redisx

import (
	"context"
	"errors"
	"fmt"
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
// nobody to lose a write to, since it has no replica to fail over to either: it is not
// waited on, which its ROLE reply, read with the marker's write, tells. A master whose
// replica is connected but does not acknowledge in time (slow, paused, partitioned) is not
// let through: Replicated fails with ErrNotReplicated and the caller fails its step, to be
// retried, since that replica may be the one promoted.
type Waiter struct {
	c       redis.UniversalClient
	timeout time.Duration // 0: never wait
}

// ErrNotReplicated: a replica is connected to the master but did not acknowledge the
// writes within TRAWL_REDIS_WAIT; the step that made them must not be acted on yet.
var ErrNotReplicated = errors.New("no replica acknowledged the writes in time")

// NewWaiter returns a Waiter on c that waits up to timeout (TRAWL_REDIS_WAIT); 0 turns
// waiting off.
func NewWaiter(c redis.UniversalClient, timeout time.Duration) *Waiter {
	return &Waiter{c: c, timeout: timeout}
}

// Replicated waits until a replica of the master holding key's slot has every write made
// to that slot so far. key is the marker written, in the slot of the writes to wait for
// (the same hash tag). It reports true when a replica acknowledged, false (nil error) when
// waiting is off or the master has no replica connected; an error wrapping
// ErrNotReplicated when a connected replica did not acknowledge within the timeout, and
// any other error when the master could not be reached.
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
	// The marker, the ROLE and the WAIT go on one connection: WAIT counts its own
	// connection's writes.
	conn := node.Conn()
	defer conn.Close()
	var role *redis.Cmd
	if _, err := conn.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, key, 1, time.Minute)
		role = p.Do(ctx, "ROLE")
		return nil
	}); err != nil {
		return false, fmt.Errorf("redisx: wait for a replica of %s: %w", addr, err)
	}
	replicas, err := connectedReplicas(role.Val())
	if err != nil {
		return false, fmt.Errorf("redisx: wait for a replica of %s: %w", addr, err)
	}
	if replicas == 0 {
		return false, nil
	}
	n, err := conn.Do(ctx, "WAIT", 1, w.timeout.Milliseconds()).Int64()
	if err != nil {
		return false, fmt.Errorf("redisx: wait for a replica of %s: %w", addr, err)
	}
	if n < 1 {
		return false, fmt.Errorf("redisx: %s: %w: %d connected, none within TRAWL_REDIS_WAIT=%s", addr, ErrNotReplicated, replicas, w.timeout)
	}
	return true, nil
}

// connectedReplicas reads the replicas a master's ROLE reply lists:
// ["master", offset, [[ip, port, offset], ...]].
func connectedReplicas(v any) (int, error) {
	r, ok := v.([]any)
	if !ok || len(r) < 1 {
		return 0, fmt.Errorf("ROLE reply %v", v)
	}
	if r[0] != "master" {
		// A replica answering for the slot: the slot map is stale (a failover under way).
		return 0, fmt.Errorf("the node is a %v, not a master", r[0])
	}
	if len(r) < 3 {
		return 0, fmt.Errorf("ROLE reply %v", v)
	}
	rs, ok := r[2].([]any)
	if !ok {
		return 0, fmt.Errorf("ROLE reply %v", v)
	}
	return len(rs), nil
}
