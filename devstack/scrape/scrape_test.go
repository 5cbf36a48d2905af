package scrape_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trawl/trawl/devstack/scrape"
	"github.com/trawl/trawl/shared/obs"
	"github.com/trawl/trawl/shared/testwait"
)

// serve starts the metrics server every service runs, with a few metrics of each kind.
func serve(t *testing.T) string {
	t.Helper()
	reg := obs.NewRegistry()
	urls := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "t_urls_total"}, []string{"shard", "result"})
	urls.WithLabelValues("0", "new").Add(3)
	urls.WithLabelValues("1", "new").Add(4)
	urls.WithLabelValues("1", "seen").Add(5)
	unused := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "t_unused_total"}, []string{"reason"})
	depth := prometheus.NewGauge(prometheus.GaugeOpts{Name: "t_depth"})
	depth.Set(-2.5)
	lat := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "t_seconds", Buckets: []float64{1}})
	lat.Observe(0.5)
	lat.Observe(2)
	reg.MustRegister(urls, unused, depth, lat)
	srv, err := obs.NewServer("127.0.0.1:0", reg, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return srv.Addr()
}

func TestRead(t *testing.T) {
	addr := serve(t)
	for _, tc := range []struct {
		sel   string
		want  float64
		found bool
	}{
		{`t_urls_total`, 12, true},
		{`t_urls_total{result="new"}`, 7, true},
		{`t_urls_total{shard="1",result="seen"}`, 5, true},
		{`t_urls_total{ shard="1" , result="new" }`, 4, true},
		{`t_urls_total{result="gone"}`, 0, false},
		{`t_urls_total{other="x"}`, 0, false},
		{`t_unused_total`, 0, false},
		{`t_missing`, 0, false},
		{`t_depth`, -2.5, true},
		{`t_seconds_count`, 2, true},
		{`t_seconds_sum`, 2.5, true},
		{`t_seconds`, 0, false},
	} {
		t.Run(tc.sel, func(t *testing.T) {
			v, found, err := scrape.Read(testwait.Context(t), addr, tc.sel)
			if err != nil {
				t.Fatal(err)
			}
			if v != tc.want || found != tc.found {
				t.Fatalf("Read(%s) = %v, %v; want %v, %v", tc.sel, v, found, tc.want, tc.found)
			}
		})
	}
}

func TestParseRefusesMalformedSelectors(t *testing.T) {
	for _, sel := range []string{``, `{a="b"}`, `m{a="b"`, `m{a=b}`, `m{a}`, `m{a="}`} {
		t.Run(sel, func(t *testing.T) {
			if s, err := scrape.Parse(sel); err == nil {
				t.Fatalf("Parse(%q) = %+v, want an error", sel, s)
			}
		})
	}
}

func TestReadFailsOnAnAddressWithNoServer(t *testing.T) {
	addr := serve(t)
	if _, _, err := scrape.Read(testwait.Context(t), addr, "t_depth"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := scrape.Read(testwait.Context(t), "127.0.0.1:1", "t_depth"); err == nil {
		t.Fatal("a scrape of a closed port succeeded")
	}
}
