package itest

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/devstack/inproc"
	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/services/archiver/internal/config"
	"github.com/trawl/trawl/services/archiver/internal/service"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/topology"
)

// waitFor bounds every poll. A Redis cluster's three masters and the archiver under the
// race detector beside other suites took over 15 s to settle 151 pages.
const waitFor = 30 * time.Second

type stack struct {
	t   *testing.T
	ns  *natsembed.Server
	rs  *redisproc.Server
	dir string
	env map[string]string
	nc  *nats.Conn
	js  jetstream.JetStream
}

func newStack(t *testing.T, env map[string]string) *stack {
	t.Helper()
	s := &stack{t: t, ns: natsembed.StartT(t), rs: redisproc.StartT(t, redisproc.Options{}), dir: t.TempDir()}
	s.env = map[string]string{
		"TRAWL_NATS_URL":  s.ns.URL(),
		"TRAWL_REDIS_URL": s.rs.URL(),
		"TRAWL_HTTP_ADDR": "127.0.0.1:0",
		"TRAWL_ACK_WAIT":  "1s",
		// Acks at once: the 1s level's settling window is longer than this ack wait.
		"TRAWL_FSYNC":         "always",
		"TRAWL_ARCHIVE_DIR":   s.dir,
		"TRAWL_ARCHIVE_ID":    "itest",
		"TRAWL_ARCHIVE_BATCH": "8",
	}
	for k, v := range env {
		s.env[k] = v
	}
	nc, err := nats.Connect(s.ns.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if s.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	s.nc = nc
	return s
}

// config is the archiver's configuration on the stack's servers and directory.
func (s *stack) config() config.Config {
	s.t.Helper()
	return inproc.Config(s.t, config.Load, s.env)
}

// newService builds an archiver that is not run: the test hands it batches itself.
func (s *stack) newService() *service.Service {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	svc, err := service.New(ctx, s.config(), quietLog())
	if err != nil {
		s.t.Fatal(err)
	}
	return svc
}

// start runs an archiver and returns a stop function that requires a clean, prompt exit.
func (s *stack) start() (stop func()) {
	s.t.Helper()
	cfg, log := s.config(), quietLog()
	r := inproc.Start(s.t, log, func(ctx context.Context) (*service.Service, error) { return service.New(ctx, cfg, log) })
	return func() {
		if err := r.Stop(); err != nil {
			s.t.Errorf("archiver Run: %v", err)
		}
	}
}

func quietLog() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func (s *stack) publish(p *crawlmsg.Page, lease string) uint64 {
	s.t.Helper()
	p.Meta.Lease = lease
	m, err := crawlmsg.PageMsg(topology.SubjectPages, p)
	if err != nil {
		s.t.Fatal(err)
	}
	m.Header.Set(nats.MsgIdHdr, topology.PageID(lease))
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	ack, err := s.js.PublishMsg(ctx, m)
	if err != nil {
		s.t.Fatal(err)
	}
	return ack.Sequence
}

// publishV1 publishes p as a fetcher of the earlier release did (version 1): the heads as
// base64 in the metadata, the raw body in the Trawl-Raw-Body header, the payload the body.
func (s *stack) publishV1(p *crawlmsg.Page, lease string) {
	s.t.Helper()
	p.Meta.Lease, p.Meta.V = lease, 1
	meta, err := json.Marshal(&p.Meta)
	if err != nil {
		s.t.Fatal(err)
	}
	m := nats.NewMsg(topology.SubjectPages)
	m.Header.Set(crawlmsg.MetaHeader, string(meta))
	m.Header.Set(crawlmsg.RawHeader, base64.StdEncoding.EncodeToString(p.Raw))
	m.Header.Set(nats.MsgIdHdr, topology.PageID(lease))
	m.Data = p.Body
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := s.js.PublishMsg(ctx, m); err != nil {
		s.t.Fatal(err)
	}
}

func (s *stack) putObject(name string, data []byte) *crawlmsg.BodyRef {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	st, err := s.js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: topology.BodiesBucket})
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := st.PutBytes(ctx, name, data); err != nil {
		s.t.Fatal(err)
	}
	return &crawlmsg.BodyRef{Bucket: topology.BodiesBucket, Name: name, Size: int64(len(data))}
}

// waitArchived waits until the archiver's consumer has acked every page published.
func (s *stack) waitArchived() {
	s.t.Helper()
	natsembed.WaitSettled(s.t, s.js, topology.StreamPages, topology.ConsumerArchiver, waitFor)
}

// exchange builds a page as the fetcher publishes it: verbatim heads and, for a gzip body,
// the body as received beside the decoded one.
func exchange(url string, status int, header string, body []byte, gz bool) *crawlmsg.Page {
	raw := body
	if gz {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		zw.Write(body)
		zw.Close()
		raw = b.Bytes()
		header += "Content-Encoding: gzip\r\n"
	}
	head := "HTTP/1.1 " + strconv.Itoa(status) + " Whatever\r\n" + header + "Content-Length: " + strconv.Itoa(len(raw)) + "\r\n\r\n"
	p := &crawlmsg.Page{
		Meta: crawlmsg.PageMeta{
			URL: url, Host: "a.example", Status: status, FetchedAt: time.Now().UnixMilli(),
			Capture: &crawlmsg.Capture{
				Request:  []byte("GET " + url + " HTTP/1.1\r\nHost: a.example\r\nUser-Agent: itest\r\n\r\n"),
				Response: []byte(head),
				Verbatim: true,
				IP:       "192.0.2.7",
			},
		},
		Body: body,
	}
	if gz {
		p.Meta.Capture.RawSize = int64(len(raw))
		p.Raw = raw
	}
	return p
}
