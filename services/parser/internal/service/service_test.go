package service

import (
	"sync/atomic"
	"testing"

	"github.com/trawl/trawl/services/parser/internal/config"
)

func TestExtractOptions(t *testing.T) {
	tests := []struct {
		name                string
		textBytes           int64
		outlinks            int
		agent               string
		wantText, wantLinks int
		wantAgent           string
	}{
		{"defaults", 256 << 10, 1000, "trawl", 256 << 10, 5000, "trawl"},
		{"zero text means none", 0, 1000, "Trawl", -1, 5000, "trawl"},
		{"link cap above the outlink cap", 1024, 4000, "x", 1024, 8000, "x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := extractOptions(config.Config{MaxTextBytes: tt.textBytes, MaxOutlinks: tt.outlinks, RobotsAgent: tt.agent})
			if o.MaxTextBytes != tt.wantText || o.MaxLinks != tt.wantLinks || o.RobotsAgent != tt.wantAgent {
				t.Errorf("options = %+v", o)
			}
		})
	}
}

func TestParallel(t *testing.T) {
	for _, tt := range []struct{ n, workers int }{{0, 4}, {1, 4}, {10, 1}, {100, 3}, {5, 50}} {
		var hits [100]atomic.Int32
		parallel(tt.n, tt.workers, func(i int) { hits[i].Add(1) })
		for i := range hits {
			want := int32(0)
			if i < tt.n {
				want = 1
			}
			if got := hits[i].Load(); got != want {
				t.Errorf("n=%d workers=%d: index %d ran %d times", tt.n, tt.workers, i, got)
			}
		}
	}
}
