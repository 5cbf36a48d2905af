package itest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/services/scheduler/internal/statuspage"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// statusBody is what a probe reads of /status.json.
type statusBody struct {
	Error string `json:"error"`
	Total *struct {
		Terminal struct {
			Fetched int64 `json:"fetched"`
		} `json:"terminal"`
	} `json:"total"`
	Unavailable []statuspage.Unavailable `json:"unavailable"`
}

// getStatus reads the scheduler's /status.json: its status code, body and report.
func (s *stack) getStatus() (int, string, statusBody) {
	s.t.Helper()
	resp, err := http.Get("http://" + s.cfg.Common.HTTPAddr + "/status.json")
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	var rep statusBody
	if err := json.Unmarshal(body, &rep); err != nil {
		s.t.Fatalf("status.json: %v\n%s", err, body)
	}
	return resp.StatusCode, string(body), rep
}

// While Redis is unreachable the status page must not answer with counters of zero, which
// read as a crawl that finished having fetched nothing: it answers 503, says that the
// frontier cannot be read and why, without the Redis password, and has no totals.
func TestStatusSaysRedisUnreachable(t *testing.T) {
	t.Parallel()
	const password = "pw-s3cret-9"
	s := startStack(t, redisproc.Options{Password: password, FsyncAlways: true}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.runFetcher(ctx, fetched200)
	s.publish(topology.FrontierSubject(0), &crawlmsg.FrontierBatch{URLs: []crawlmsg.Discovered{{URL: "http://a.example/1"}}})
	testwait.Eventually(t, 30*time.Second, "the URL fetched", func() bool { return s.stats().Fetched == 1 })
	if code, body, rep := s.getStatus(); code != http.StatusOK || rep.Error != "" || rep.Total == nil || rep.Total.Terminal.Fetched != 1 {
		t.Fatalf("with Redis up: %d %s", code, body)
	}

	if err := s.redis.Stop(); err != nil {
		t.Fatal(err)
	}
	code, body, rep := s.getStatus()
	if code != http.StatusServiceUnavailable {
		t.Errorf("status %d with Redis stopped, want 503", code)
	}
	t.Logf("with Redis stopped: %d %s", code, rep.Error)
	if !strings.HasPrefix(rep.Error, "the frontier cannot be read: shard 0: ") || !strings.Contains(rep.Error, "connection refused") {
		t.Errorf("error %q, want that the frontier cannot be read and why", rep.Error)
	}
	if rep.Total != nil {
		t.Errorf("totals %+v with nothing read, want null", *rep.Total)
	}
	if len(rep.Unavailable) != 1 || rep.Unavailable[0].Shard != 0 {
		t.Errorf("unavailable %+v, want shard 0", rep.Unavailable)
	}
	if strings.Contains(body, password) {
		t.Errorf("the body shows the Redis password: %s", body)
	}

	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	if err := s.redis.Restart(rctx); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 30*time.Second, "status.json to answer 200 with the crawl's totals again", func() bool {
		code, _, rep := s.getStatus()
		return code == http.StatusOK && rep.Error == "" && rep.Total != nil && rep.Total.Terminal.Fetched == 1
	})
}
