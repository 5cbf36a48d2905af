package stack

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestProcMetric(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `# HELP trawl_x_total Things.
# TYPE trawl_x_total counter
trawl_x_total{shard="0"} 2
trawl_x_total{shard="1",kind="a b}"} 3
trawl_x_total_more 100
trawl_gauge 7.5
trawl_h_bucket{le="1"} 4
`)
	}))
	defer srv.Close()
	p := &Proc{Name: "scheduler", HTTPAddr: strings.TrimPrefix(srv.URL, "http://")}
	for _, c := range []struct {
		name string
		want float64
		ok   bool
	}{
		{"trawl_x_total", 5, true},
		{"trawl_gauge", 7.5, true},
		{"trawl_h", 0, false},
		{"trawl_none", 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, ok, err := p.Metric(context.Background(), c.name)
			if err != nil || v != c.want || ok != c.ok {
				t.Errorf("Metric(%s) = %v, %v, %v; want %v, %v", c.name, v, ok, err, c.want, c.ok)
			}
		})
	}
}
