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
	}{
		{"", Always, "always", true, 0},
		{"always", Always, "always", true, 0},
		{"1s", EverySecond, "everysec", false, time.Second},
	} {
		t.Run(tc.in, func(t *testing.T) {
			l, err := Parse(tc.in)
			if err != nil || l != tc.want {
				t.Fatalf("Parse(%q) = %q, %v; want %q", tc.in, l, err, tc.want)
			}
			if got := l.RedisAppendFsync(); got != tc.redis {
				t.Errorf("appendfsync %q, want %q", got, tc.redis)
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
