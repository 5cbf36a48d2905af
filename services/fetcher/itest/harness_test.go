package itest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/inproc"
	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/devstack/scrape"
	"github.com/trawl/trawl/services/fetcher/internal/config"
	"github.com/trawl/trawl/services/fetcher/internal/service"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// waitFor bounds every wait for what a fetcher does. CI's race suite runs this package
// two to four times slower than a quiet machine (127 s against 52 s); every wait is a
// poll, so a longer bound costs a passing test nothing.
const waitFor = 30 * time.Second

// stack is one embedded NATS and one redis-server, with the test acting as the scheduler
// (publishing tasks, reading outcomes) and as the pages/discovered readers.
type stack struct {
	t      testing.TB
	nats   *natsembed.Server
	redis  *redisproc.Server
	nc     *nats.Conn
	js     jetstream.JetStream
	rdb    *redis.Client
	env    map[string]string
	common envconfig.Common

	// outcomeWait is how long outcome waits: waitFor, or longer when an instance runs with
	// a fetch timeout that a slow body can use up before its outcome is published.
	outcomeWait time.Duration

	outCons, pageCons, discCons jetstream.Consumer
	outcomes                    map[string]received[crawlmsg.Outcome]
	pages                       map[string]received[*crawlmsg.Page]
	discovered                  map[string]received[crawlmsg.DiscoveredBatch] // by Nats-Msg-Id
}

type received[T any] struct {
	v     T
	msgID string
}

func newStack(t testing.TB) *stack {
	t.Helper()
	return newStackWith(t, natsembed.Options{})
}

// newStackWith runs the stack on a NATS server started with nopts (e.g. a small
// max_payload).
func newStackWith(t testing.TB, nopts natsembed.Options) *stack {
	t.Helper()
	if nopts.StoreDir == "" {
		nopts.StoreDir = t.TempDir()
	}
	if nopts.MaxStore == 0 {
		nopts.MaxStore = natsembed.TestMaxStore
	}
	ns, err := natsembed.Start(nopts)
	if err != nil {
		t.Fatalf("natsembed: start embedded NATS server: %v", err)
	}
	t.Cleanup(ns.Close)
	st := &stack{
		t:           t,
		nats:        ns,
		redis:       redisproc.StartT(t, redisproc.Options{}),
		outcomeWait: waitFor,
		outcomes:    map[string]received[crawlmsg.Outcome]{},
		pages:       map[string]received[*crawlmsg.Page]{},
		discovered:  map[string]received[crawlmsg.DiscoveredBatch]{},
	}
	st.env = map[string]string{
		"TRAWL_NATS_URL":          st.nats.URL(),
		"TRAWL_REDIS_URL":         st.redis.URL(),
		"TRAWL_REDIS_PREFIX":      "itest",
		"TRAWL_HTTP_ADDR":         "127.0.0.1:0",
		"TRAWL_ALLOW_CIDRS":       "127.0.0.0/8",
		"TRAWL_FETCH_TIMEOUT":     "5s",
		"TRAWL_LEASE_TTL":         "1m",
		"TRAWL_LOG_ERROR_AFTER":   "5",
		"TRAWL_FETCH_CONCURRENCY": "8",
		"TRAWL_LOG_LEVEL":         "debug",
	}
	st.common = st.config(nil).Common
	ctx := context.Background()
	st.nc, err = nats.Connect(st.nats.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.nc.Close)
	if st.js, err = jetstream.New(st.nc); err != nil {
		t.Fatal(err)
	}
	ectx, cancel := context.WithTimeout(ctx, waitFor)
	defer cancel()
	if err := natsx.Ensure(ectx, st.js, st.common.Topology(), st.common.Timings(), slog.Default()); err != nil {
		t.Fatal(err)
	}
	if st.outCons, err = st.js.Consumer(ctx, topology.StreamFetched, topology.SchedulerFetchedConsumer(0)); err != nil {
		t.Fatal(err)
	}
	if st.discCons, err = st.js.Consumer(ctx, topology.StreamDiscovered, topology.ConsumerDedup); err != nil {
		t.Fatal(err)
	}
	// An ordered consumer of our own: the `parser` durable belongs to the parser.
	if st.pageCons, err = st.js.OrderedConsumer(ctx, topology.StreamPages, jetstream.OrderedConsumerConfig{}); err != nil {
		t.Fatal(err)
	}
	opt, _ := redis.ParseURL(st.redis.URL())
	st.rdb = redis.NewClient(opt)
	t.Cleanup(func() { st.rdb.Close() })
	return st
}

// config returns a valid fetcher configuration for the stack, changed by mod.
func (st *stack) config(mod map[string]string) config.Config {
	st.t.Helper()
	return inproc.Config(st.t, config.Load, st.env, mod)
}

// instance is one fetcher running in-process.
type instance struct {
	*inproc.Running[*service.Service]
}

func (st *stack) start(cfg config.Config, name string) *instance {
	st.t.Helper()
	return st.startLogged(cfg, testLogger(st.t, name))
}

// startWith starts an instance built with opts.
func (st *stack) startWith(cfg config.Config, name string, opts ...service.Option) *instance {
	st.t.Helper()
	return st.startLogged(cfg, testLogger(st.t, name), opts...)
}

// startLogged starts an instance logging to log (benchmarks keep the test log quiet).
func (st *stack) startLogged(cfg config.Config, log *slog.Logger, opts ...service.Option) *instance {
	st.t.Helper()
	st.outcomeWait = max(st.outcomeWait, cfg.FetchTimeout+waitFor/2)
	return &instance{inproc.Start(st.t, log, func(ctx context.Context) (*service.Service, error) {
		return service.New(ctx, cfg, log, opts...)
	})}
}

// stop ends the instance and waits for Run to return (graceful shutdown).
func (in *instance) stop(t testing.TB) {
	t.Helper()
	if err := in.Stop(); err != nil {
		t.Errorf("fetcher Run: %v", err)
	}
}

// metric is the sum of the samples sel selects ("name{labels}") from the instance's
// /metrics; 0 if it exports none.
func (in *instance) metric(t testing.TB, sel string) float64 {
	t.Helper()
	return scrape.Value(t, in.Svc.Addr(), sel)
}

// waitMetric polls until the samples sel selects reach want.
func (in *instance) waitMetric(t testing.TB, sel string, want float64) {
	t.Helper()
	testwait.EventuallyState(t, waitFor, fmt.Sprintf("%s = %v", sel, want), func() (bool, string) {
		got := in.metric(t, sel)
		return got == want, fmt.Sprintf("%s = %v", sel, got)
	})
}

var leaseSeq struct {
	sync.Mutex
	n int
}

func newLease() string {
	leaseSeq.Lock()
	defer leaseSeq.Unlock()
	leaseSeq.n++
	return fmt.Sprintf("lease-%d-%d", time.Now().UnixNano(), leaseSeq.n)
}

// task builds a fetch task for rawURL with a fresh lease and a deadline a minute away.
func task(rawURL string) crawlmsg.FetchTask {
	host := strings.Split(strings.TrimPrefix(strings.TrimPrefix(rawURL, "http://"), "https://"), "/")[0]
	host = strings.Split(host, ":")[0]
	return crawlmsg.FetchTask{
		Shard:    0,
		Host:     host,
		URL:      rawURL,
		Lease:    newLease(),
		Deadline: time.Now().Add(time.Minute).UnixMilli(),
	}
}

func (st *stack) publishTask(tk crawlmsg.FetchTask) {
	st.t.Helper()
	data, err := crawlmsg.Marshal(&tk)
	if err != nil {
		st.t.Fatal(err)
	}
	st.publishRaw(data)
}

func (st *stack) publishRaw(data []byte) {
	st.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := st.js.Publish(ctx, topology.FetchSubject(0), data); err != nil {
		st.t.Fatal(err)
	}
}

// drain pulls what is available from c into the maps.
func (st *stack) drain(c jetstream.Consumer, handle func(jetstream.Msg)) {
	st.t.Helper()
	batch, err := c.Fetch(32, jetstream.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		st.t.Fatal(err)
	}
	for m := range batch.Messages() {
		handle(m)
	}
}

func (st *stack) pollOutcomes() {
	st.drain(st.outCons, func(m jetstream.Msg) {
		outs, invalid, err := crawlmsg.DecodeOutcomes(m.Data())
		if err != nil || invalid > 0 {
			st.t.Errorf("bad outcome batch %q: %v (%d invalid)", m.Data(), err, invalid)
		}
		for _, o := range outs {
			if m.Subject() != topology.FetchedSubject(o.Shard) {
				st.t.Errorf("outcome on %s for shard %d", m.Subject(), o.Shard)
			}
			if _, dup := st.outcomes[o.Lease]; dup {
				st.t.Errorf("outcome for lease %s published twice", o.Lease)
			}
			st.outcomes[o.Lease] = received[crawlmsg.Outcome]{o, m.Headers().Get(nats.MsgIdHdr)}
		}
		m.Ack()
	})
}

// outcome waits for the outcome of lease, read through the scheduler's durable.
func (st *stack) outcome(lease string) crawlmsg.Outcome {
	st.t.Helper()
	deadline := time.Now().Add(st.outcomeWait)
	for {
		if r, ok := st.outcomes[lease]; ok {
			if !strings.HasPrefix(r.msgID, "outs:") {
				st.t.Errorf("outcome batch Nats-Msg-Id %q, want outs:<process>:<n>", r.msgID)
			}
			return r.v
		}
		if time.Now().After(deadline) {
			st.t.Fatalf("no outcome for lease %s within %s", lease, st.outcomeWait)
		}
		st.pollOutcomes()
	}
}

// page waits for the page published for lease.
func (st *stack) page(lease string) *crawlmsg.Page {
	st.t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		if r, ok := st.pages[lease]; ok {
			if r.msgID != topology.PageID(lease) {
				st.t.Errorf("page Nats-Msg-Id %q, want page:%s", r.msgID, lease)
			}
			return r.v
		}
		if time.Now().After(deadline) {
			st.t.Fatalf("no page for lease %s within %s", lease, waitFor)
		}
		st.pollPages()
	}
}

func (st *stack) pollPages() {
	st.drain(st.pageCons, func(m jetstream.Msg) {
		parts, err := crawlmsg.Unbundle(m.Headers(), m.Data())
		if err != nil {
			st.t.Errorf("bad page message: %v", err)
			return
		}
		for _, part := range parts {
			p, err := crawlmsg.DecodePage(part.Header, part.Data)
			if err != nil {
				st.t.Errorf("bad page: %v", err)
				continue
			}
			st.pages[p.Meta.Lease] = received[*crawlmsg.Page]{p, part.Header.Get(nats.MsgIdHdr)}
		}
	})
}

// pollDiscovered reads crawl.discovered through the dedup durable (a work queue admits
// no second reader of the same subject).
func (st *stack) pollDiscovered() {
	st.drain(st.discCons, func(m jetstream.Msg) {
		var b crawlmsg.DiscoveredBatch
		if err := crawlmsg.Unmarshal(m.Data(), &b); err != nil {
			st.t.Errorf("bad discovered batch: %v", err)
		}
		st.discovered[m.Headers().Get(nats.MsgIdHdr)] = received[crawlmsg.DiscoveredBatch]{b, m.Headers().Get(nats.MsgIdHdr)}
		m.Ack()
	})
}

// site is an httptest server (on 127.0.0.1) that logs every request path.
type site struct {
	*httptest.Server
	mu  sync.Mutex
	log []string
}

func newSite(t *testing.T, routes map[string]http.HandlerFunc) *site {
	t.Helper()
	return newSiteOn(t, "127.0.0.1", routes)
}

// newSiteOn serves the site on ip (any of 127/8), so two sites can be two hosts.
func newSiteOn(t *testing.T, ip string, routes map[string]http.HandlerFunc) *site {
	t.Helper()
	s := &site{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.log = append(s.log, r.URL.RequestURI())
		s.mu.Unlock()
		if h, ok := routes[r.URL.Path]; ok {
			h(w, r)
			return
		}
		http.NotFound(w, r)
	}))
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatalf("listen on %s: %v", ip, err)
	}
	s.Listener.Close()
	s.Listener = l
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func (s *site) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.log...)
}

func text(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, body)
	}
}

func html(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=UTF-8")
		io.WriteString(w, body)
	}
}

// testLogger sends the service's log to the test log while the test runs.
func testLogger(t testing.TB, name string) *slog.Logger {
	return inproc.Logger(t, slog.LevelDebug, nil).With("instance", name)
}
