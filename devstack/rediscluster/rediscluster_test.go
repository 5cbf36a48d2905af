package rediscluster

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// A cluster serves every slot from three masters, and a killed master's slots come back
// on its promoted replica with the data it had replicated.
func TestClusterFailover(t *testing.T) {
	t.Parallel()
	c := StartT(t, Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	masters, err := c.Masters(ctx)
	if err != nil || len(masters) != 3 {
		t.Fatalf("masters = %v, %v; want 3", masters, err)
	}
	cl := c.Client(t)
	for i := range 100 {
		if err := cl.Set(ctx, fmt.Sprintf("k%d", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	slot := int(cl.ClusterKeySlot(ctx, "k7").Val())
	killed, err := c.KillMaster(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WaitFailover(ctx, killed); err != nil {
		t.Fatal(err)
	}
	after, err := c.Masters(ctx)
	if err != nil || len(after) != 3 {
		t.Fatalf("masters after failover = %v, %v; want 3", after, err)
	}
	for _, m := range after {
		if m == killed {
			t.Fatalf("killed node %d still listed as a master", killed)
		}
	}
	for i := range 100 {
		if err := cl.Set(ctx, fmt.Sprintf("k%d", i), i, 0).Err(); err != nil {
			t.Fatalf("write after failover: %v", err)
		}
	}
	if err := c.Restart(ctx, killed); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
}
