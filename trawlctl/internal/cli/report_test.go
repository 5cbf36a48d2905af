package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// trawlctl report lists in skipped-report.txt every URL of the schedulers' skip log with
// its reason, status and error, from every shard, whatever the reason.
func TestReportListsEverySkippedURL(t *testing.T) {
	s := startStack(t, 2)
	ctx := testwait.Context(t)
	entries := []struct {
		shard int
		id    string
		urls  []crawlmsg.SkippedURL
	}{
		{0, "outs:a:1", []crawlmsg.SkippedURL{
			{URL: "http://a.example/private/x", Host: "a.example", Reason: crawlmsg.ReasonDisallowed, At: 1},
			{URL: "http://a.example/far", Host: "a.example", Reason: crawlmsg.ReasonOutOfScope, At: 1},
		}},
		{0, "front:c:1", []crawlmsg.SkippedURL{
			{URL: "http://c.example/deep", Host: "c.example", Reason: crawlmsg.ReasonTooDeep, Error: "TRAWL_MAX_DEPTH", At: 1},
			{URL: "http://c.example/more", Host: "c.example", Reason: crawlmsg.ReasonOverBudget, Error: "host budget", At: 1},
			// Logged twice (a redelivery past the duplicate window): listed once.
			{URL: "http://a.example/far", Host: "a.example", Reason: crawlmsg.ReasonOutOfScope, At: 2},
		}},
		{1, "outs:b:7", []crawlmsg.SkippedURL{
			{URL: "http://b.example/gone", Host: "b.example", Reason: crawlmsg.FailedReason(crawlmsg.OutcomeFetched), Status: 503, At: 2},
			{URL: "http://b.example/bad", Host: "b.example", Reason: crawlmsg.FailedReason(crawlmsg.OutcomeError), Error: "dial tcp:\n refused", At: 2},
		}},
	}
	for _, e := range entries {
		data, err := crawlmsg.Marshal(&crawlmsg.SkippedBatch{URLs: e.urls})
		if err != nil {
			t.Fatal(err)
		}
		if err := natsx.PublishBatch(ctx, s.js, []*nats.Msg{natsx.NewMsg(topology.SkippedSubject(e.shard), topology.SkippedID(e.id), data)}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	r := s.inv.run(t, "report", "-dir", dir)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	body, err := os.ReadFile(filepath.Join(dir, "skipped-report.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"robots-disallowed -9998 http://a.example/private/x -\n",
		"out-of-scope -5000 http://a.example/far -\n",
		"too-deep -4001 http://c.example/deep TRAWL_MAX_DEPTH\n",
		"over-budget -5003 http://c.example/more host budget\n",
		"failed(fetched) 503 http://b.example/gone -\n",
		"failed(error) 0 http://b.example/bad dial tcp: refused\n",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("skipped-report.txt lacks %q:\n%s", want, body)
		}
	}
	if n := strings.Count(string(body), "http://a.example/far"); n != 1 {
		t.Errorf("http://a.example/far listed %d times, want once:\n%s", n, body)
	}
}
