package natscluster

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/devstack/freeport"
	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/shared/testwait"
)

// A stopped node leaves a cluster that still places replicated streams on the other
// two, and started again it rejoins: the cluster is ready with all three.
func TestStopAndStartNode(t *testing.T) {
	t.Parallel()
	c := StartT(t, Options{})
	if got := strings.Count(c.URL(), ","); got != 2 {
		t.Fatalf("URL %q: want three servers", c.URL())
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c.StopNode(1)
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "R2", Subjects: []string{"r2"}, Replicas: 2}); err != nil {
		t.Fatalf("a stream of two replicas with one node down: %v", err)
	}
	if err := c.StartNode(1); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "R3", Subjects: []string{"r3"}, Replicas: 3}); err != nil {
		t.Fatalf("a stream of three replicas once the node is back: %v", err)
	}
}

// A server that reaches the route ports but lacks the route credentials is not taken as a
// peer; with them it is.
func TestRoutesNeedCredentials(t *testing.T) {
	t.Parallel()
	c := StartT(t, Options{})
	before := make([]int, len(c.Nodes))
	for i, n := range c.Nodes {
		before[i] = n.Routes()
	}
	for _, tc := range []struct {
		name           string
		user, password string
		joins          bool
	}{
		{"without credentials", "", "", false},
		{"with a wrong password", c.RouteUser, "wrong", false},
		{"with the cluster's", c.RouteUser, c.RoutePassword, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ports, err := freeport.Ports(1)
			if err != nil {
				t.Fatal(err)
			}
			var logs testwait.Buffer
			s, err := natsembed.Start(natsembed.Options{
				StoreDir: t.TempDir(), ServerName: "stranger", Logger: slog.New(slog.NewTextHandler(&logs, nil)),
				Cluster: &natsembed.Cluster{Name: "trawl", Port: ports[0], Routes: c.RouteURLs, User: tc.user, Password: tc.password},
			})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if tc.joins {
				testwait.Eventually(t, 20*time.Second, "the server with the credentials to be routed to every node", func() bool { return s.Routes() >= len(c.Nodes) })
				return
			}
			testwait.Eventually(t, 20*time.Second, "the cluster to refuse the route (an authorization error in the stranger's log)", func() bool {
				return strings.Contains(strings.ToLower(logs.String()), "authorization")
			})
			// Counted on the cluster's nodes, not on the stranger: its own listener takes
			// anyone, and a parallel test's cluster that found the stranger's port free
			// before it was taken may route to it.
			for i, n := range c.Nodes {
				if got := n.Routes(); got != before[i] {
					t.Errorf("node %d has %d routes, want the %d to its peers", i, got, before[i])
				}
			}
		})
	}
}
