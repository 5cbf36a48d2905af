package itest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/devstack/rediscluster"
	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/errclass"
	"github.com/trawl/trawl/shared/testwait"
)

// errCase is one row of the classification table: an operation that draws an error from
// a real server, and the verdict that error must get.
type errCase struct {
	name   string
	op     func(ctx context.Context) error
	class  errclass.Class
	reason string
	// text is a fragment of the server's own answer, so a row cannot pass on an error of
	// another kind that happens to classify alike.
	text string
}

func runErrCases(t *testing.T, cases []errCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := c.op(ctx)
			if err == nil {
				t.Fatal("the server accepted the operation; the case draws no error")
			}
			if !strings.Contains(err.Error(), c.text) {
				t.Fatalf("error %q does not contain %q: the server answered otherwise than the case expects", err, c.text)
			}
			v := errclass.Of(err)
			if v.Class != c.class || v.Reason != c.reason {
				t.Fatalf("errclass.Of(%q) = %s/%s, want %s/%s", err, v.Class, v.Reason, c.class, c.reason)
			}
			if errclass.IsPermanent(err) != (c.class == errclass.Permanent) {
				t.Fatalf("IsPermanent(%q) disagrees with Of", err)
			}
			// The callers wrap what they return; the verdict must survive that.
			if w := errclass.Of(fmt.Errorf("publish crawl.pages: %w", err)); w != v {
				t.Fatalf("wrapped: %s/%s, want %s/%s", w.Class, w.Reason, v.Class, v.Reason)
			}
		})
	}
}

// JetStream's answers, from an embedded nats-server, sorted into temporary and permanent.
func TestErrorClassesNATS(t *testing.T) {
	t.Parallel()
	srv, err := natsembed.Start(natsembed.Options{StoreDir: t.TempDir(), MaxStore: natsembed.TestMaxStore})
	if err != nil {
		t.Fatalf("natsembed: start embedded NATS server: %v", err)
	}
	t.Cleanup(srv.Close)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testwait.Context(t)
	mk := func(cfg jetstream.StreamConfig) {
		t.Helper()
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	mk(jetstream.StreamConfig{Name: "BIG", Subjects: []string{"big.>"}, Storage: jetstream.MemoryStorage})
	mk(jetstream.StreamConfig{Name: "SMALL", Subjects: []string{"small.>"}, MaxMsgSize: 1024, Storage: jetstream.MemoryStorage})
	mk(jetstream.StreamConfig{Name: "ONEMSG", Subjects: []string{"onemsg.>"}, MaxMsgs: 1, Discard: jetstream.DiscardNew, Storage: jetstream.MemoryStorage})
	mk(jetstream.StreamConfig{Name: "FEWBYTES", Subjects: []string{"fewbytes.>"}, MaxBytes: 4096, Discard: jetstream.DiscardNew, Storage: jetstream.MemoryStorage})
	for _, s := range []string{"onemsg.a", "fewbytes.a"} {
		if _, err := js.Publish(ctx, s, make([]byte, 3000)); err != nil {
			t.Fatal(err)
		}
	}
	// A subscriber that never answers: a request to it times out.
	if _, err := nc.Subscribe("silent.>", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	closed, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	closedJS, _ := jetstream.New(closed)
	closed.Close()

	withHeader := func(subject string, n int) *nats.Msg {
		m := nats.NewMsg(subject)
		m.Header.Set("Big", strings.Repeat("x", n))
		m.Data = []byte("body")
		return m
	}
	runErrCases(t, []errCase{
		{"header over 64k", func(ctx context.Context) error {
			_, err := js.PublishMsg(ctx, withHeader("big.h", 70<<10))
			return err
		}, errclass.Permanent, errclass.ReasonHeaderTooLarge, "err_code=10097"},
		{"message over the stream's max size", func(ctx context.Context) error {
			_, err := js.Publish(ctx, "small.a", make([]byte, 4096))
			return err
		}, errclass.Permanent, errclass.ReasonMessageTooLarge, "err_code=10054"},
		{"message over the server's max payload", func(ctx context.Context) error {
			_, err := js.Publish(ctx, "big.a", make([]byte, int(nc.MaxPayload())+1))
			return err
		}, errclass.Permanent, errclass.ReasonMaxPayload, "maximum payload exceeded"},
		{"wrong last sequence", func(ctx context.Context) error {
			_, err := js.Publish(ctx, "big.seq", []byte("x"), jetstream.WithExpectLastSequence(999))
			return err
		}, errclass.Permanent, errclass.ReasonWrongSequence, "err_code=10071"},
		{"wrong last sequence per subject", func(ctx context.Context) error {
			_, err := js.Publish(ctx, "big.seq", []byte("x"), jetstream.WithExpectLastSequencePerSubject(999))
			return err
		}, errclass.Permanent, errclass.ReasonWrongSequence, "err_code=10071"},
		{"stream at maximum messages", func(ctx context.Context) error {
			_, err := js.Publish(ctx, "onemsg.b", []byte("x"))
			return err
		}, errclass.Temporary, errclass.ReasonStreamFull, "maximum messages exceeded"},
		{"stream at maximum bytes", func(ctx context.Context) error {
			_, err := js.Publish(ctx, "fewbytes.b", make([]byte, 3000))
			return err
		}, errclass.Temporary, errclass.ReasonStreamFull, "maximum bytes exceeded"},
		{"no stream for the subject", func(ctx context.Context) error {
			_, err := js.Publish(ctx, "nostream.a", []byte("x"))
			return err
		}, errclass.Temporary, errclass.ReasonNoResponders, "no response from stream"},
		{"no answer in time", func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			_, err := js.Publish(ctx, "silent.a", []byte("x"))
			return err
		}, errclass.Temporary, errclass.ReasonTimeout, "deadline exceeded"},
		{"stream not found", func(ctx context.Context) error {
			_, err := js.Stream(ctx, "NOSUCH")
			return err
		}, errclass.Temporary, errclass.ReasonStreamNotFound, "stream not found"},
		{"connection closed", func(ctx context.Context) error {
			_, err := closedJS.Publish(ctx, "big.a", []byte("x"))
			return err
		}, errclass.Temporary, errclass.ReasonConnection, "connection closed"},
	})
}

// Redis's answers, from real redis-server processes (a plain one, its replica and a
// cluster), sorted into temporary and permanent.
func TestErrorClassesRedis(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t)
	rs := redisproc.StartT(t, redisproc.Options{Ephemeral: true})
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	replica := redisproc.StartT(t, redisproc.Options{Ephemeral: true, Args: []string{"--replicaof", "127.0.0.1", portOf(t, rs.Addr())}})
	rep := redis.NewClient(&redis.Options{Addr: replica.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rep.Close() })
	if err := rdb.Set(ctx, "str", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Do(ctx, "ACL", "SETUSER", "reader", "on", ">pw", "~*", "+get", "+ping", "+hello", "+client").Err(); err != nil {
		t.Fatal(err)
	}
	reader := redis.NewClient(&redis.Options{Addr: rs.Addr(), Username: "reader", Password: "pw", MaxRetries: -1})
	t.Cleanup(func() { reader.Close() })
	bad := redis.NewClient(&redis.Options{Addr: rs.Addr(), Username: "reader", Password: "wrong", MaxRetries: -1})
	t.Cleanup(func() { bad.Close() })

	// A cluster with one master whose slots are not all assigned answers CLUSTERDOWN; a
	// plain client at a master of a full cluster is MOVED for another master's key, and
	// ASKed for a missing key of a slot being migrated away.
	lone := redisproc.StartT(t, redisproc.Options{Ephemeral: true, Args: []string{"--cluster-enabled", "yes", "--cluster-config-file", t.TempDir() + "/nodes.conf"}})
	loneC := redis.NewClient(&redis.Options{Addr: lone.Addr(), MaxRetries: -1})
	t.Cleanup(func() { loneC.Close() })
	cl := rediscluster.StartT(t, rediscluster.Options{Replicas: -1})
	node0 := redis.NewClient(&redis.Options{Addr: cl.Nodes[0].Addr(), MaxRetries: -1})
	t.Cleanup(func() { node0.Close() })
	own0, other := slotKeys(t, ctx, node0)
	// Migrate the slot of own0 away (to any other master) without moving keys: a key of it
	// that node 0 does not hold gets ASK.
	ids, err := node0.ClusterNodes(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	var target string
	for _, l := range strings.Split(ids, "\n") {
		if f := strings.Fields(l); len(f) > 2 && !strings.Contains(f[2], "myself") {
			target = f[0]
			break
		}
	}
	askKey := "{" + own0 + "}-missing" // the hash tag puts it in own0's slot
	if err := node0.Do(ctx, "CLUSTER", "SETSLOT", node0.ClusterKeySlot(ctx, own0).Val(), "MIGRATING", target).Err(); err != nil {
		t.Fatal(err)
	}

	refused := redis.NewClient(&redis.Options{Addr: deadAddr(t), MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { refused.Close() })

	runErrCases(t, []errCase{
		{"NOSCRIPT", func(ctx context.Context) error {
			return rdb.EvalSha(ctx, strings.Repeat("0", 40), nil).Err()
		}, errclass.Temporary, errclass.ReasonRedisNoScript, "NOSCRIPT"},
		{"OOM under noeviction", func(ctx context.Context) error {
			if err := rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
				return fmt.Errorf("setup: %w", err)
			}
			if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
				return fmt.Errorf("setup: %w", err)
			}
			defer rdb.ConfigSet(context.Background(), "maxmemory", "0")
			return rdb.Set(ctx, "oom", "v", 0).Err()
		}, errclass.Temporary, errclass.ReasonRedisOOM, "OOM"},
		{"OOM inside a script", func(ctx context.Context) error {
			if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
				return fmt.Errorf("setup: %w", err)
			}
			defer rdb.ConfigSet(context.Background(), "maxmemory", "0")
			return rdb.Eval(ctx, "return redis.call('SET', KEYS[1], 'v')", []string{"oom2"}).Err()
		}, errclass.Temporary, errclass.ReasonRedisOOM, "OOM"},
		{"READONLY replica", func(ctx context.Context) error {
			return rep.Set(ctx, "k", "v", 0).Err()
		}, errclass.Temporary, errclass.ReasonRedisReadOnly, "READONLY"},
		{"CLUSTERDOWN", func(ctx context.Context) error {
			return loneC.Get(ctx, "k").Err()
		}, errclass.Temporary, errclass.ReasonRedisCluster, "CLUSTERDOWN"},
		{"MOVED", func(ctx context.Context) error {
			return node0.Get(ctx, other).Err()
		}, errclass.Temporary, errclass.ReasonRedisCluster, "MOVED"},
		{"ASK", func(ctx context.Context) error {
			return node0.Get(ctx, askKey).Err()
		}, errclass.Temporary, errclass.ReasonRedisCluster, "ASK"},
		{"CROSSSLOT", func(ctx context.Context) error {
			return node0.MGet(ctx, own0, "{"+other+"}x").Err()
		}, errclass.Permanent, errclass.ReasonRedisCommand, "CROSSSLOT"},
		{"WRONGTYPE", func(ctx context.Context) error {
			return rdb.LPush(ctx, "str", "x").Err()
		}, errclass.Permanent, errclass.ReasonRedisWrongType, "WRONGTYPE"},
		{"script error", func(ctx context.Context) error {
			return rdb.Eval(ctx, "return redis.call('NOSUCHCOMMAND')", nil).Err()
		}, errclass.Permanent, errclass.ReasonRedisCommand, "ERR"},
		{"unknown command", func(ctx context.Context) error {
			return rdb.Do(ctx, "NOSUCHCOMMAND").Err()
		}, errclass.Permanent, errclass.ReasonRedisCommand, "ERR unknown command"},
		{"NOPERM", func(ctx context.Context) error {
			return reader.Set(ctx, "k", "v", 0).Err()
		}, errclass.Permanent, errclass.ReasonPermission, "NOPERM"},
		{"WRONGPASS", func(ctx context.Context) error {
			return bad.Get(ctx, "k").Err()
		}, errclass.Permanent, errclass.ReasonPermission, "WRONGPASS"},
		{"connection refused", func(ctx context.Context) error {
			return refused.Ping(ctx).Err()
		}, errclass.Temporary, errclass.ReasonConnection, "refused"},
	})
}

func portOf(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// slotKeys returns a key node serves and one it does not.
func slotKeys(t *testing.T, ctx context.Context, node *redis.Client) (own, other string) {
	t.Helper()
	for i := 0; own == "" || other == ""; i++ {
		k := fmt.Sprintf("k%d", i)
		err := node.Get(ctx, k).Err()
		switch {
		case errors.Is(err, redis.Nil):
			own = k
		case err != nil && strings.HasPrefix(err.Error(), "MOVED"):
			other = k
		case err != nil:
			t.Fatal(err)
		}
		if i > 1000 {
			t.Fatal("no key of each kind in 1000 tries")
		}
	}
	return own, other
}
