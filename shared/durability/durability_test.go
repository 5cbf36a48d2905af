package durability

import (
	"strings"
	"testing"
	"time"
)

func TestLevels(t *testing.T) {
	for _, tc := range []struct {
		in           string
		want         Level
		redis        string
		natsAlways   bool
		natsInterval time.Duration
		window       time.Duration
	}{
		{"", EverySecond, "everysec", false, time.Second, 3 * time.Second},
		{"always", Always, "always", true, 0, 0},
		{"1s", EverySecond, "everysec", false, time.Second, 3 * time.Second},
	} {
		t.Run(tc.in, func(t *testing.T) {
			l, err := Parse(tc.in)
			if err != nil || l != tc.want {
				t.Fatalf("Parse(%q) = %q, %v; want %q", tc.in, l, err, tc.want)
			}
			if got := l.RedisAppendFsync(); got != tc.redis {
				t.Errorf("appendfsync %q, want %q", got, tc.redis)
			}
			// The window must outlast both stores' fsync lag: Redis's everysec can be 3 s
			// behind (a second, plus 2 s of postponed writes behind a slow fsync).
			if got := l.Window(); got != tc.window {
				t.Errorf("window %s, want %s", got, tc.window)
			}
			if a, i := l.NATSSync(); a != tc.natsAlways || (!a && i != tc.natsInterval) {
				t.Errorf("JetStream sync always=%v interval=%s, want %v %s", a, i, tc.natsAlways, tc.natsInterval)
			}
		})
	}
	for _, bad := range []string{"everysec", "no", "2s", "Always"} {
		if _, err := Parse(bad); err == nil || !strings.Contains(err.Error(), Env) {
			t.Errorf("Parse(%q): %v, want an error naming %s", bad, err, Env)
		}
	}
}
