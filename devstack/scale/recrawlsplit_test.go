//go:build scale

package scale

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/trawl/trawl/devstack/natscluster"
	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/recrawl"
	"github.com/trawl/trawl/shared/topology"
)

// envRecrawlURLs is how many known URLs' recrawl schedules TestRecrawlSplit loads
// (default 1e6).
const envRecrawlURLs = "SCALE_RECRAWL_URLS"

// splitServers and splitShards shape TestRecrawlSplit's cluster: as many recrawl streams as
// servers at most, and no more streams than shards (TRAWL_RECRAWL_STREAMS ≤ TRAWL_SHARDS).
const (
	splitServers = 3
	splitShards  = 3
)

// ServerLoad is what one NATS server of the cluster took on for the schedules.
type ServerLoad struct {
	Streams   []string // recrawl streams it leads (R1: holds)
	RSSBefore int64    // VmRSS with the streams declared and empty
	RSSAfter  int64    // VmRSS with every schedule stored
	HWM       int64    // VmHWM after the load
	DiskAfter int64    // its JetStream store's files, bytes
	CPU       time.Duration
}

// TestRecrawlSplit measures what TRAWL_RECRAWL_STREAMS is for: with the recrawl schedules
// in one stream, the server that holds it takes all of their memory and disk; split into
// as many streams as servers, each server takes its share, so the known URLs a crawl can
// keep grow with the servers. For 1 and 3 streams it starts a cluster of three trawl-nats
// processes, declares the recrawl streams (topology.Recrawl, three shards; a split's streams
// pinned one a server by server tags), publishes a schedule
// per URL as the parser does (recrawl.Schedule, due in a day so none fires), and reads each
// server's RSS and store. Not part of make bench-scale(-ci): run it by name.
func TestRecrawlSplit(t *testing.T) {
	sizes, err := parseSizes(cmpOr(os.Getenv(envRecrawlURLs), "1e6"))
	if err != nil || len(sizes) != 1 {
		t.Fatalf("%s: want one number of URLs: %v", envRecrawlURLs, err)
	}
	n := sizes[0]
	bin := filepath.Join(binaries(t), stack.NATSServer)
	loads := map[int][]ServerLoad{}
	for _, streams := range []int{1, splitServers} {
		t.Run(fmt.Sprintf("streams=%d", streams), func(t *testing.T) {
			loads[streams] = loadSchedules(t, bin, streams, n)
		})
	}
	one, split := loads[1], loads[splitServers]
	if one == nil || split == nil {
		t.FailNow()
	}
	var oneMax, splitMax int64
	for i := range splitServers {
		oneMax = max(oneMax, one[i].RSSAfter-one[i].RSSBefore)
		splitMax = max(splitMax, split[i].RSSAfter-split[i].RSSBefore)
	}
	t.Logf("largest RSS growth of a server: %.0f B/URL with 1 stream, %.0f B/URL with %d (%.2f of it)",
		float64(oneMax)/float64(n), float64(splitMax)/float64(n), splitServers, float64(splitMax)/float64(oneMax))
	// Evenly split, a server takes a third; half leaves room for the noise of a Go heap's
	// RSS, yet fails when two streams share a server.
	if 2*splitMax > oneMax {
		t.Errorf("split over %d streams, the fullest server grew by %d B, more than half of the %d B one stream's server grew by", splitServers, splitMax, oneMax)
	}
}

// loadSchedules starts a cluster, declares the recrawl streams split in streams, loads n
// schedules and returns each server's load.
func loadSchedules(t *testing.T, bin string, streams int, n int64) []ServerLoad {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Minute)
	defer cancel()
	store := t.TempDir()
	c := natscluster.StartT(t, natscluster.Options{Nodes: splitServers, Bin: bin, StoreDir: store})
	nc, js, err := natsx.Connect(ctx, c.URL(), "recrawl-split", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	o := topology.DefaultOptions(splitShards)
	o.Recrawl, o.RecrawlStreams = true, streams
	// The recrawl streams as the services declare them, each of a split pinned to a
	// server of its own (TRAWL_RECRAWL_PLACEMENT): left to itself, a cluster put two of
	// three on one server and none on another (a 10⁴ trial), which is not the split this
	// measures.
	if streams > 1 {
		for i := range splitServers {
			o.RecrawlPlacement = append(o.RecrawlPlacement, natscluster.NodeTag(i))
		}
	}
	for g := range streams {
		cfg := topology.Recrawl(o, g)
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			t.Fatalf("declare %s: %v", cfg.Name, err)
		}
	}

	// Which server holds each recrawl stream: R1, its leader.
	loads := make([]ServerLoad, splitServers)
	server := map[string]int{}
	for i := range splitServers {
		server[fmt.Sprintf("trawl-n%d", i)] = i
	}
	for g := range streams {
		name := topology.RecrawlStreamName(g, streams)
		str, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := str.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.Cluster == nil {
			t.Fatalf("%s: no cluster info", name)
		}
		i, ok := server[info.Cluster.Leader]
		if !ok {
			t.Fatalf("%s: led by %q, not a server of the cluster", name, info.Cluster.Leader)
		}
		loads[i].Streams = append(loads[i].Streams, name)
	}
	cpu0 := make([]time.Duration, splitServers)
	for i := range splitServers {
		m, err := ReadMem(c.PID(i))
		if err != nil {
			t.Fatal(err)
		}
		loads[i].RSSBefore = m.RSS
		if cpu0[i], err = stack.CPUTime(c.PID(i)); err != nil {
			t.Fatal(err)
		}
	}

	start := time.Now()
	// Under the client's limit of outstanding asynchronous publishes (4,000).
	const per = 1000
	for i := int64(0); i < n; i += per {
		msgs := make([]*nats.Msg, 0, per)
		for j := i; j < i+per && j < n; j++ {
			u := splitURL(j)
			pu, err := url.Parse(u)
			if err != nil {
				t.Fatal(err)
			}
			e := &crawlmsg.RecrawlEntry{URL: u, Depth: int(j % 4), State: splitState(j)}
			// Due in a day: the schedules wait, as a crawl's do.
			e.State.Due = time.Now().Add(24 * time.Hour).UnixMilli()
			m, err := recrawl.Schedule(topology.ShardOf(pu.Hostname(), splitShards), e, "")
			if err != nil {
				t.Fatal(err)
			}
			msgs = append(msgs, m)
		}
		if err := natsx.PublishBatch(ctx, js, msgs); err != nil {
			t.Fatal(err)
		}
	}
	took := time.Since(start)

	var stored uint64
	var bytes []string
	for g := range streams {
		name := topology.RecrawlStreamName(g, streams)
		str, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := str.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		stored += info.State.Msgs
		bytes = append(bytes, fmt.Sprintf("%s %d msgs %d B on %s", name, info.State.Msgs, info.State.Bytes, info.Cluster.Leader))
	}
	if stored != uint64(n) {
		t.Fatalf("the recrawl streams hold %d schedules, want %d", stored, n)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d streams, %d schedules loaded in %s (%.0f/s); %s\n", streams, n, took.Round(time.Millisecond), float64(n)/took.Seconds(), strings.Join(bytes, "; "))
	fmt.Fprintf(&b, "| server | recrawl streams | RSS before | RSS after | RSS growth per URL | peak RSS | store on disk | disk per URL | CPU-µs per URL |\n|---|---|---|---|---|---|---|---|---|\n")
	for i := range splitServers {
		m, err := ReadMem(c.PID(i))
		if err != nil {
			t.Fatal(err)
		}
		cpu, err := stack.CPUTime(c.PID(i))
		if err != nil {
			t.Fatal(err)
		}
		l := &loads[i]
		l.RSSAfter, l.HWM, l.CPU = m.RSS, m.HWM, cpu-cpu0[i]
		l.DiskAfter = dirBytes(filepath.Join(store, fmt.Sprintf("n%d", i)))
		fmt.Fprintf(&b, "| trawl-n%d | %s | %.0f MB | %.0f MB | %.0f B | %.0f MB | %.0f MB | %.0f B | %.1f |\n", i, strings.Join(l.Streams, ", "),
			mb(l.RSSBefore), mb(l.RSSAfter), float64(l.RSSAfter-l.RSSBefore)/float64(n), mb(l.HWM), mb(l.DiskAfter),
			float64(l.DiskAfter)/float64(n), float64(l.CPU.Microseconds())/float64(n))
	}
	t.Log("\n" + b.String())
	if streams == splitServers {
		for i, l := range loads {
			if len(l.Streams) != 1 {
				t.Errorf("server trawl-n%d holds recrawl streams %v: the cluster did not put one on each server, so the split is not measured", i, l.Streams)
			}
		}
	}
	return loads
}

func mb(b int64) float64 { return float64(b) / 1e6 }

// splitURL is URL i, ~70 characters, a hundred a host (the shape TestScale and the
// scheduler's BenchmarkRecrawlState use).
func splitURL(i int64) string {
	return fmt.Sprintf("https://www.host%06d.example.com/articles/2024/section-%08d/page.html", i/urlsPerHost, i)
}

// splitState is a recrawled page's state with everything a 2xx fills in: both validators,
// the digest and the SimHash.
func splitState(i int64) crawlmsg.Recrawl {
	return crawlmsg.Recrawl{
		ETag: fmt.Sprintf(`"%016x"`, i), LastModified: "Mon, 02 Jan 2026 15:04:05 GMT",
		Digest: fmt.Sprintf("%064x", i), SimHash: fmt.Sprintf("%016x", i*7919),
		Interval: 86_400_000, Fetches: 5, Changes: 2, NotModified: 2,
		LastFetch: 1_790_000_000_000 + i,
	}
}
