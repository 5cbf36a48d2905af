package redisx

import (
	"strconv"
	"testing"
)

func TestSlot(t *testing.T) {
	t.Parallel()
	// Values from CLUSTER KEYSLOT of redis-server 7.
	for key, want := range map[string]int{
		"foo":             12182,
		"{user1000}.a":    3443,
		"user1000":        3443,
		"trawl:{s0}:heap": Slot("s0"),
		"a{}b":            Slot("a{}b"),
		"123456789":       12739,
	} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
}

// Parts tagged with SpreadTag fall in n equal slot ranges, one each, so masters with
// equal slot ranges hold equal numbers of parts.
func TestSpreadTag(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 3, 12, 1024} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			t.Parallel()
			seen := map[string]bool{}
			for i := range n {
				tag := SpreadTag("dedup", i, n)
				if s := Slot(tag); s < i*Slots/n || s >= (i+1)*Slots/n {
					t.Fatalf("SpreadTag(%d, %d) = %q in slot %d, outside its range", i, n, tag, s)
				}
				if seen[tag] {
					t.Fatalf("tag %q twice", tag)
				}
				seen[tag] = true
			}
		})
	}
}

// CentredTag's slot lies in the middle half of its range, so that a master whose range
// ends a few slots off the equal split (redis-cli rounds) still holds the whole part.
func TestCentredTag(t *testing.T) {
	t.Parallel()
	for _, n := range []int{2, 3, 12, 96, 1024} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			t.Parallel()
			for i := range n {
				lo, hi := i*Slots/n, (i+1)*Slots/n
				w := (hi - lo) / 4
				if s := Slot(CentredTag("s", i, n)); s < lo+w || s >= hi-w {
					t.Fatalf("CentredTag(%d, %d) in slot %d, outside the middle half [%d, %d) of its range", i, n, s, lo+w, hi-w)
				}
			}
		})
	}
}
