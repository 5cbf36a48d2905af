package synthweb

import (
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// rq builds a request from millisecond offsets.
func rq(host, path string, startMS, endMS int) Request {
	return Request{Host: host, Path: path, Start: t0.Add(time.Duration(startMS) * time.Millisecond),
		End: t0.Add(time.Duration(endMS) * time.Millisecond), Status: 200}
}

func pairs(vs []Violation) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.Host + " " + v.A.Path + "+" + v.B.Path
	}
	return out
}

func TestOverlaps(t *testing.T) {
	tests := []struct {
		name string
		reqs []Request
		want []string
	}{
		{name: "empty"},
		{name: "sequential", reqs: []Request{rq("a", "/1", 0, 10), rq("a", "/2", 11, 20), rq("a", "/3", 21, 30)}},
		{name: "parallel on different hosts", reqs: []Request{rq("a", "/1", 0, 10), rq("b", "/1", 0, 10)}},
		{name: "simple overlap", reqs: []Request{rq("a", "/1", 0, 10), rq("a", "/2", 5, 15)}, want: []string{"a /1+/2"}},
		{name: "touching counts as overlap", reqs: []Request{rq("a", "/1", 0, 10), rq("a", "/2", 10, 15)}, want: []string{"a /1+/2"}},
		{name: "unordered input", reqs: []Request{rq("a", "/2", 5, 15), rq("a", "/1", 0, 10)}, want: []string{"a /1+/2"}},
		{
			name: "long request overlaps several",
			reqs: []Request{rq("a", "/long", 0, 100), rq("a", "/x", 10, 20), rq("a", "/y", 30, 40), rq("a", "/z", 101, 110)},
			want: []string{"a /long+/x", "a /long+/y"},
		},
		{
			name: "only the offending host",
			reqs: []Request{rq("a", "/1", 0, 10), rq("b", "/1", 0, 10), rq("b", "/2", 9, 12), rq("a", "/2", 11, 12)},
			want: []string{"b /1+/2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pairs(Overlaps(tt.reqs)); !slices.Equal(got, tt.want) && (len(got) != 0 || len(tt.want) != 0) {
				t.Fatalf("Overlaps = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestGaps(t *testing.T) {
	delay := func(d map[string]time.Duration) func(string) time.Duration {
		return func(h string) time.Duration { return d[h] }
	}
	tests := []struct {
		name   string
		reqs   []Request
		minGap func(string) time.Duration
		want   []string
	}{
		{name: "nil minGap and clean log", reqs: []Request{rq("a", "/1", 0, 10), rq("a", "/2", 10, 20)}},
		{name: "nil minGap flags overlap", reqs: []Request{rq("a", "/1", 0, 10), rq("a", "/2", 5, 20)}, want: []string{"a /1+/2"}},
		{
			name:   "crawl delay honoured",
			reqs:   []Request{rq("a", "/robots.txt", 0, 1), rq("a", "/", 201, 210), rq("a", "/p/1", 410, 420)},
			minGap: delay(map[string]time.Duration{"a": 200 * time.Millisecond}),
		},
		{
			name:   "robots.txt counts too",
			reqs:   []Request{rq("a", "/robots.txt", 0, 1), rq("a", "/", 50, 60), rq("a", "/p/1", 260, 270)},
			minGap: delay(map[string]time.Duration{"a": 200 * time.Millisecond}),
			want:   []string{"a /robots.txt+/"},
		},
		{
			name:   "per-host delays",
			reqs:   []Request{rq("a", "/1", 0, 1), rq("a", "/2", 50, 51), rq("b", "/1", 0, 1), rq("b", "/2", 50, 51)},
			minGap: delay(map[string]time.Duration{"a": 10 * time.Millisecond, "b": 100 * time.Millisecond}),
			want:   []string{"b /1+/2"},
		},
		{
			name:   "only consecutive pairs",
			reqs:   []Request{rq("a", "/1", 0, 1), rq("a", "/2", 5, 6), rq("a", "/3", 7, 8)},
			minGap: delay(map[string]time.Duration{"a": 3 * time.Millisecond}),
			want:   []string{"a /2+/3"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pairs(Gaps(tt.reqs, tt.minGap)); !slices.Equal(got, tt.want) && (len(got) != 0 || len(tt.want) != 0) {
				t.Fatalf("Gaps = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestViolationString(t *testing.T) {
	v := Gaps([]Request{rq("127.0.1.2", "/a", 0, 10), rq("127.0.1.2", "/b", 60, 70)},
		func(string) time.Duration { return 100 * time.Millisecond })
	if len(v) != 1 {
		t.Fatalf("%d violations", len(v))
	}
	s := v[0].String()
	for _, want := range []string{"127.0.1.2", "/a", "/b", "gap 50ms < 100ms", "03:04:05.010000"} {
		if !strings.Contains(s, want) {
			t.Errorf("%q lacks %q", s, want)
		}
	}
}

func TestCountByURL(t *testing.T) {
	reqs := []Request{rq("127.0.1.1", "/", 0, 1), rq("127.0.1.1", "/", 2, 3), rq("127.0.1.2", "/p/1?x=1", 0, 1)}
	tests := []struct {
		name   string
		origin func(string) string
		want   map[string]int
	}{
		{name: "with port", origin: func(h string) string { return "http://" + h + ":8080" },
			want: map[string]int{"http://127.0.1.1:8080/": 2, "http://127.0.1.2:8080/p/1?x=1": 1}},
		{name: "nil origin", want: map[string]int{"http://127.0.1.1/": 2, "http://127.0.1.2/p/1?x=1": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := CountByURL(reqs, tt.origin)
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Fatalf("got %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func TestExpectationCheck(t *testing.T) {
	origin := func(h string) string { return "http://" + h }
	exp := Expectation{
		Fetch:          map[string]bool{"http://a/": true, "http://a/p/1": true},
		Retried:        map[string]int{"http://a/broken": 500},
		Forbidden:      map[string]bool{"http://a/private": true},
		ForbiddenHosts: map[string]bool{"z": true},
	}
	good := []Request{rq("a", "/robots.txt", 0, 1), rq("a", "/", 2, 3), rq("a", "/p/1", 4, 5), rq("a", "/broken", 6, 7), rq("a", "/broken", 8, 9), rq("z", "/robots.txt", 0, 1), rq("z", "/robots.txt", 2, 3)}
	tests := []struct {
		name string
		reqs []Request
		want []string // substrings, one per expected problem
	}{
		{name: "correct crawl", reqs: good},
		{name: "missing page", reqs: slices.Delete(slices.Clone(good), 2, 3), want: []string{"never fetched: http://a/p/1"}},
		{name: "duplicate fetch", reqs: append(slices.Clone(good), rq("a", "/p/1", 20, 21)), want: []string{"fetched 2 times, want once"}},
		{name: "too many retries", reqs: append(slices.Clone(good), rq("a", "/broken", 20, 21), rq("a", "/broken", 22, 23)), want: []string{"more than 1+2 retries"}},
		{name: "5xx never tried", reqs: slices.Delete(slices.Clone(good), 3, 5), want: []string{"never fetched (always 5xx"}},
		{name: "forbidden", reqs: append(slices.Clone(good), rq("a", "/private", 20, 21)), want: []string{"forbidden URL fetched 1 times: http://a/private"}},
		{name: "unexpected", reqs: append(slices.Clone(good), rq("a", "/other", 20, 21)), want: []string{"unexpected URL fetched 1 times: http://a/other"}},
		{name: "page on forbidden host", reqs: append(slices.Clone(good), rq("z", "/", 20, 21)), want: []string{"robots.txt is unavailable", "unexpected URL fetched 1 times: http://z/"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := exp.Check(tt.reqs, origin, 2)
			if len(got) != len(tt.want) {
				t.Fatalf("problems = %q, want %d matching %q", got, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("problem %d = %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}

// A crawl's span runs from its earliest start to its latest end, whichever requests they
// belong to: the log is ordered by start, and an early request may end last.
func TestSpan(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(start, end int) Request {
		return Request{Start: t0.Add(time.Duration(start) * time.Second), End: t0.Add(time.Duration(end) * time.Second)}
	}
	for _, tc := range []struct {
		name string
		reqs []Request
		want time.Duration
	}{
		{"none", nil, 0},
		{"one", []Request{at(2, 5)}, 3 * time.Second},
		{"the first ends last", []Request{at(0, 9), at(1, 2), at(3, 4)}, 9 * time.Second},
		{"the last ends last", []Request{at(0, 1), at(4, 7)}, 7 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Span(tc.reqs); got != tc.want {
				t.Errorf("Span = %v, want %v", got, tc.want)
			}
		})
	}
}
