package crawlid

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// dialWatch counts every failed connection to Redis, by any caller of the service's
// client, as a failed check (Guard.FailedAt, Kept). go-redis dials again until its
// caller's deadline, so a check begun while Redis was down succeeds if Redis is back
// within that deadline (2 s), and would record nothing of an outage that Redis may have
// come back from older (a restart from files an OS crash rolled back).
type dialWatch struct{ g *Guard }

// watchDials adds dialWatch to c and, on a cluster, to every node's client, those to come
// included (their dials are their own).
func watchDials(ctx context.Context, c redis.UniversalClient, g *Guard) {
	w := dialWatch{g}
	cl, ok := c.(*redis.ClusterClient)
	if !ok {
		c.AddHook(w)
		return
	}
	cl.OnNewNode(func(n *redis.Client) { n.AddHook(w) })
	// The nodes known now were made before OnNewNode; a node missed here (the cluster
	// changing at this instant) still fails the guard's own checks.
	_ = cl.ForEachShard(ctx, func(_ context.Context, n *redis.Client) error {
		n.AddHook(w)
		return nil
	})
}

func (w dialWatch) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		// A dial its caller gave up on says nothing of Redis.
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			storeMax(&w.g.failedAt, time.Now().UnixNano())
			w.g.okAt.Store(0)
		}
		return conn, err
	}
}

func (dialWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (dialWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
