package natsx

import "testing"

func TestSeqGaps(t *testing.T) {
	tests := []struct {
		name   string
		resume int64 // -1 = not resumed
		seqs   []uint64
		want   []uint64
	}{
		{"contiguous from anywhere", -1, []uint64{40, 41, 42}, []uint64{0, 0, 0}},
		{"a jump is counted", -1, []uint64{5, 6, 10, 11}, []uint64{0, 0, 3, 0}},
		{"redeliveries are no gap", -1, []uint64{5, 6, 7, 6, 8}, []uint64{0, 0, 0, 0, 0}},
		{"resumed after the floor", 100, []uint64{101, 102}, []uint64{0, 0}},
		{"resumed after messages were dropped", 100, []uint64{151}, []uint64{50}},
		{"resumed with nothing acked", 0, []uint64{501}, []uint64{500}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var g SeqGaps
			if tc.resume >= 0 {
				g.Resume(uint64(tc.resume))
			}
			for i, s := range tc.seqs {
				if got := g.Next(s); got != tc.want[i] {
					t.Fatalf("Next(%d) = %d, want %d", s, got, tc.want[i])
				}
			}
		})
	}
}
