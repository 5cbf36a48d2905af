package redisx

import (
	"errors"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestOpen(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		raw     string
		cluster []string // seeds of a cluster client; nil = a single-server client
		addr    string   // of a single-server client
		user    string
		tls     bool
		db      int
	}{
		{name: "one server", raw: "redis://127.0.0.1:6379/2", addr: "127.0.0.1:6379", db: 2},
		{name: "one server with ACL user over TLS", raw: "rediss://trawl:secret@r.example:6380/0", addr: "r.example:6380", user: "trawl", tls: true},
		{name: "seed list", raw: "redis://a:7000,b:7001,c:7002", cluster: []string{"a:7000", "b:7001", "c:7002"}},
		{name: "seed list with db 0 and options", raw: "redis://u:p@a:7000,b:7001/0?max_redirects=5", cluster: []string{"a:7000", "b:7001"}, user: "u"},
		{name: "cluster scheme with one seed", raw: "redis-cluster://a:7000", cluster: []string{"a:7000"}},
		{name: "cluster over TLS", raw: "rediss-cluster://u:p@[::1]:7000,[::1]:7001", cluster: []string{"[::1]:7000", "[::1]:7001"}, user: "u", tls: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := Open(tc.raw, Timeouts{Retries: 3})
			if err != nil {
				t.Fatalf("Open(%q): %v", tc.raw, err)
			}
			defer c.Close()
			if got := IsCluster(tc.raw); got != (tc.cluster != nil) {
				t.Errorf("IsCluster = %v, want %v", got, tc.cluster != nil)
			}
			switch cc := c.(type) {
			case *redis.ClusterClient:
				o := cc.Options()
				if tc.cluster == nil {
					t.Fatalf("got a cluster client for %q", tc.raw)
				}
				if !slices.Equal(o.Addrs, tc.cluster) {
					t.Errorf("seeds = %v, want %v", o.Addrs, tc.cluster)
				}
				if o.Username != tc.user || (o.TLSConfig != nil) != tc.tls || o.MaxRetries != 3 {
					t.Errorf("user %q tls %v retries %d, want %q %v 3", o.Username, o.TLSConfig != nil, o.MaxRetries, tc.user, tc.tls)
				}
			case *redis.Client:
				o := cc.Options()
				if tc.cluster != nil {
					t.Fatalf("got a single-server client for %q", tc.raw)
				}
				if o.Addr != tc.addr || o.DB != tc.db || o.Username != tc.user || (o.TLSConfig != nil) != tc.tls {
					t.Errorf("addr %q db %d user %q tls %v, want %q %d %q %v", o.Addr, o.DB, o.Username, o.TLSConfig != nil, tc.addr, tc.db, tc.user, tc.tls)
				}
			default:
				t.Fatalf("client %T", c)
			}
			if got := Addrs(tc.raw); got == "" || got != Addrs(tc.raw) || containsSecret(got) {
				t.Errorf("Addrs = %q", got)
			}
		})
	}
}

func containsSecret(s string) bool { return slices.Contains([]byte(s), '@') }

func TestOpenRefuses(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"redis://a:7000,b:7001/3", // a cluster has database 0 only
		"redis://a:7000,b",        // a seed without a port
		"redis:///0",              // no host
		"http://a:7000",           // not Redis
	} {
		t.Run(raw, func(t *testing.T) {
			t.Parallel()
			if _, err := Open(raw, Timeouts{}); !errors.Is(err, ErrURL) {
				t.Fatalf("Open(%q) = %v, want ErrURL", raw, err)
			}
		})
	}
}

// Over TLS, each node of a cluster is verified against its own host name, not the first
// seed's that go-redis puts in the configuration it shares between the nodes.
func TestOpenClusterTLSNamesEachNode(t *testing.T) {
	t.Parallel()
	c, err := Open("rediss-cluster://a.example:7000,b.example:7001", Timeouts{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	o := c.(*redis.ClusterClient).Options()
	if o.NewClient == nil {
		t.Fatal("no per-node client hook")
	}
	node := o.NewClient(&redis.Options{Addr: "c.example:7002", TLSConfig: o.TLSConfig})
	defer node.Close()
	if got := node.Options().TLSConfig.ServerName; got != "c.example" {
		t.Errorf("node c.example:7002 verified as %q", got)
	}
	if got := o.TLSConfig.ServerName; got != "a.example" {
		t.Errorf("the shared configuration was changed: ServerName %q", got)
	}
}
