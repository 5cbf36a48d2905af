package service

import (
	"strconv"
	"testing"
)

// The set forgets only whole generations: an id stays known for at least n further adds.
func TestRecentKeepsTwoGenerations(t *testing.T) {
	r := newRecent(4)
	for i := range 4 {
		r.add(strconv.Itoa(i))
	}
	for i := 4; i < 8; i++ {
		r.add(strconv.Itoa(i))
	}
	for i := range 8 {
		if !r.has(strconv.Itoa(i)) {
			t.Fatalf("id %d forgotten within two generations", i)
		}
	}
	r.add("8")
	if r.has("0") || !r.has("4") || !r.has("8") {
		t.Fatal("the oldest generation not dropped, or a newer one lost")
	}
}
