package robotscache

import (
	"testing"
	"time"

	"github.com/trawl/trawl/shared/robots"
)

func TestLRU(t *testing.T) {
	now := time.Unix(1000, 0)
	e := &robots.Entry{Class: robots.Parsed}
	t.Run("bounded, least recently used goes first", func(t *testing.T) {
		l := newLRU(2)
		l.put("a", e, now.Add(time.Minute))
		l.put("b", e, now.Add(time.Minute))
		l.get("a", now) // a is now more recent than b
		l.put("c", e, now.Add(time.Minute))
		if l.len() != 2 || l.get("b", now) != nil || l.get("a", now) == nil || l.get("c", now) == nil {
			t.Errorf("len %d, b %v, a %v, c %v", l.len(), l.get("b", now), l.get("a", now), l.get("c", now))
		}
	})
	t.Run("expires", func(t *testing.T) {
		l := newLRU(2)
		l.put("a", e, now.Add(time.Second))
		if l.get("a", now) == nil {
			t.Fatal("fresh entry missing")
		}
		if l.get("a", now.Add(time.Second)) != nil || l.len() != 0 {
			t.Error("expired entry still served or kept")
		}
	})
}
