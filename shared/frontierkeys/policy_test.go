package frontierkeys

import (
	"reflect"
	"testing"
	"time"
)

func TestHostLimitsEncoding(t *testing.T) {
	d := func(x time.Duration) *time.Duration { return &x }
	k, n, b, y := 2.5, 4, int64(100), true
	tests := []struct {
		name string
		l    HostLimits
		want string
	}{
		{"unset", HostLimits{}, "- - - - - -"},
		{"every field", HostLimits{MinDelay: d(1500 * time.Millisecond), DelayFactor: &k,
			CrawlDelay: &CrawlDelayRule{Cap: time.Minute}, Connections: &n, HostBudget: &b, Block: &y}, "1500 2.5 60000 4 100 1"},
		{"exact crawl delay", HostLimits{CrawlDelay: &CrawlDelayRule{Exact: true}}, "- - x - - -"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.l.Encode()
			if got != tt.want {
				t.Fatalf("Encode = %q; want %q", got, tt.want)
			}
			back, err := ParseHostLimits(got)
			if err != nil || !reflect.DeepEqual(back, tt.l) {
				t.Fatalf("ParseHostLimits(%q) = %+v, %v; want %+v", got, back, err, tt.l)
			}
		})
	}
	if _, err := ParseHostLimits("1 2 3 4 5 6 7"); err == nil {
		t.Error("an entry with too many fields parsed")
	}
	if _, err := ParseHostLimits("x - - - - -"); err == nil {
		t.Error("a bad min delay parsed")
	}
}

func TestPolicyEntryEncoding(t *testing.T) {
	d := func(x time.Duration) *time.Duration { return &x }
	y := true
	tests := []struct {
		name string
		e    PolicyEntry
		want string
	}{
		{"a rule that sets no limit", PolicyEntry{Rules: []string{"host:a.example"}}, "- - - - - - - host:a.example"},
		{"merged and blocking", PolicyEntry{Limits: HostLimits{MinDelay: d(time.Second), Block: &y}, BlockBy: "domain:example.com",
			Rules: []string{"host:www.example.com", "domain:example.com"}}, "1000 - - - - 1 domain:example.com host:www.example.com domain:example.com"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.e.Encode()
			if got != tt.want {
				t.Fatalf("Encode = %q; want %q", got, tt.want)
			}
			back, err := ParsePolicyEntry(got)
			if err != nil || !reflect.DeepEqual(back, tt.e) {
				t.Fatalf("ParsePolicyEntry(%q) = %+v, %v; want %+v", got, back, err, tt.e)
			}
		})
	}
}
