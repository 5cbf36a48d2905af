package answer

import (
	"context"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/polite/politetest"
	"github.com/trawl/trawl/shared/safedial"
)

// TestPoliteCallers runs the suite every process that makes requests runs (the fetcher's
// client runs it too): the renderer asks a host for robots.txt as a fetcher does.
func TestPoliteCallers(t *testing.T) {
	politetest.RunCallers(t, func(t *testing.T, ua string, d *safedial.Dialer) politetest.Caller {
		a := New(Config{UserAgent: ua, RequestTimeout: 5 * time.Second}, nil, nil, nil, d, nil, nil, slog.Default())
		t.Cleanup(a.Close)
		return robotsCaller{a}
	})
}

type robotsCaller struct{ a *Answerer }

func (r robotsCaller) GetRobots(ctx context.Context, rawURL string, limit int64) (int, []byte, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return 0, nil, err
	}
	res, err := r.a.getRobots(ctx, u, limit)
	return res.Status, res.Body, err
}
