package fetch

import (
	"context"
	"testing"

	"github.com/trawl/trawl/shared/polite/politetest"
	"github.com/trawl/trawl/shared/safedial"
)

// TestPoliteCallers runs the suite every process that makes requests runs (the renderer's
// answerer runs it too): the fetcher asks a host for robots.txt as the renderer does.
func TestPoliteCallers(t *testing.T) {
	politetest.RunCallers(t, func(t *testing.T, ua string, d *safedial.Dialer) politetest.Caller {
		cfg := testConfig()
		cfg.UserAgent, cfg.Dial = ua, d.DialContext
		c := New(cfg)
		t.Cleanup(c.CloseIdle)
		return robotsCaller{c}
	})
}

type robotsCaller struct{ c *Client }

func (r robotsCaller) GetRobots(ctx context.Context, rawURL string, limit int64) (int, []byte, error) {
	resp, err := r.c.GetRobots(ctx, rawURL, limit)
	if err != nil {
		return 0, nil, err
	}
	return resp.Status, resp.Body, nil
}
