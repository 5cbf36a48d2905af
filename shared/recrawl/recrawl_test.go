package recrawl

import (
	"net/http"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/topology"
)

var testSettings = Settings{Min: 10 * time.Second, Max: 100 * time.Second, Default: 40 * time.Second, NearDistance: 3, Backlog: 10}

func TestJudge(t *testing.T) {
	prev := &crawlmsg.Recrawl{Digest: "d1", SimHash: "00000000000000ff", Interval: 40000}
	for _, tc := range []struct {
		name string
		prev *crawlmsg.Recrawl
		f    Fetch
		want Verdict
	}{
		{"first fetch", nil, Fetch{Status: 200, Digest: "d1"}, First},
		{"same text", prev, Fetch{Status: 200, Digest: "d1", SimHash: "ffffffffffffffff"}, Unchanged},
		{"new text within the SimHash distance", prev, Fetch{Status: 200, Digest: "d2", SimHash: "00000000000000f8"}, Unchanged},
		{"new text one bit beyond the distance", prev, Fetch{Status: 200, Digest: "d2", SimHash: "00000000000000f0"}, Changed},
		{"new body without text", prev, Fetch{Status: 200, Digest: "d2"}, Changed},
		{"304", prev, Fetch{Status: 304}, NotModified},
		{"404", prev, Fetch{Status: 404}, Gone},
		{"410", prev, Fetch{Status: 410}, Gone},
		{"503", prev, Fetch{Status: 503, Digest: "d2"}, Other},
		{"301", prev, Fetch{Status: 301, Digest: "d2"}, Other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := testSettings.Judge(tc.prev, tc.f); got != tc.want {
				t.Fatalf("Judge = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestNext(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 250e6, time.UTC)
	withIV := func(iv time.Duration, gone int) *crawlmsg.Recrawl {
		return &crawlmsg.Recrawl{Interval: iv.Milliseconds(), Gone: gone, Digest: "old", ETag: `"e0"`}
	}
	for _, tc := range []struct {
		name     string
		prev     *crawlmsg.Recrawl
		v        Verdict
		wantIV   time.Duration
		wantKeep bool
	}{
		{"first fetch starts at the default", nil, First, 40 * time.Second, true},
		{"unchanged waits half as long again", withIV(40*time.Second, 0), Unchanged, 60 * time.Second, true},
		{"304 counts as unchanged", withIV(40*time.Second, 0), NotModified, 60 * time.Second, true},
		{"unchanged is capped at the max", withIV(90*time.Second, 0), Unchanged, 100 * time.Second, true},
		{"changed waits half as long", withIV(40*time.Second, 0), Changed, 20 * time.Second, true},
		{"changed never below the min", withIV(12*time.Second, 0), Changed, 10 * time.Second, true},
		{"an interval outside new bounds is brought in", withIV(time.Hour, 0), Other, 100 * time.Second, true},
		{"first 404 keeps the URL", withIV(40*time.Second, 0), Gone, 40 * time.Second, true},
		{"second 404 in a row forgets it", withIV(40*time.Second, 1), Gone, 40 * time.Second, false},
		{"an answer between 404s resets the count", withIV(40*time.Second, 1), Unchanged, 60 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const took = 750 * time.Millisecond
			f := Fetch{Status: 200, Digest: "new", FetchedAt: at, Took: took, Header: http.Header{"Etag": {`"e1"`}}}
			st, keep := testSettings.Next(tc.prev, tc.v, f)
			if got := time.Duration(st.Interval) * time.Millisecond; got != tc.wantIV || keep != tc.wantKeep {
				t.Fatalf("Next = interval %s keep %v, want %s %v", got, keep, tc.wantIV, tc.wantKeep)
			}
			// Due an interval after the fetch's end; the last fetch is its start (the
			// WARC-Date a revisit record refers to).
			if due := time.UnixMilli(st.Due); !due.Equal(at.Add(took + tc.wantIV)) {
				t.Fatalf("due %s, want %s", due, at.Add(took+tc.wantIV))
			}
			if last := time.UnixMilli(st.LastFetch); !last.Equal(at) {
				t.Fatalf("last fetch %s, want the request's start %s", last, at)
			}
			switch tc.v {
			case First, Changed, Unchanged:
				if st.Digest != "new" || st.ETag != `"e1"` {
					t.Fatalf("a 2xx must keep its fingerprint and validators: %+v", st)
				}
			default:
				if tc.prev != nil && (st.Digest != "old" || (tc.v != NotModified && st.ETag != `"e0"`)) {
					t.Fatalf("an answer without content must keep the last fingerprint: %+v", st)
				}
			}
		})
	}
}

func TestSettingsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		ok   bool
	}{
		{"defaults", nil, true},
		{"seconds for tests", map[string]string{"TRAWL_RECRAWL_MIN": "1s", "TRAWL_RECRAWL_DEFAULT": "2s", "TRAWL_RECRAWL_MAX": "10s"}, true},
		{"max below min", map[string]string{"TRAWL_RECRAWL_MIN": "2h", "TRAWL_RECRAWL_MAX": "1h"}, false},
		{"default outside bounds", map[string]string{"TRAWL_RECRAWL_DEFAULT": "1m"}, false},
		{"zero min", map[string]string{"TRAWL_RECRAWL_MIN": "0s", "TRAWL_RECRAWL_DEFAULT": "1s"}, false},
		{"no backlog", map[string]string{"TRAWL_RECRAWL_BACKLOG": "0"}, false},
		{"all of dispatch", map[string]string{"TRAWL_RECRAWL_SHARE": "1"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := envconfig.FromMap(tc.env)
			s := Load(r)
			if err := r.Err(); err != nil {
				t.Fatal(err)
			}
			if err := s.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestSchedule(t *testing.T) {
	e := &crawlmsg.RecrawlEntry{URL: "http://a.test/x", State: crawlmsg.Recrawl{Interval: 1000, Due: time.Date(2026, 1, 2, 3, 4, 6, 250e6, time.UTC).UnixMilli()}}
	m, err := Schedule(3, e, "id1")
	if err != nil {
		t.Fatal(err)
	}
	if m.Subject != topology.ScheduleSubject(3, e.URL) || m.Header.Get("Nats-Schedule") != "@at 2026-01-02T03:04:06.25Z" ||
		m.Header.Get("Nats-Schedule-Target") != topology.DueSubject(3, e.URL) || m.Header.Get("Nats-Msg-Id") != "id1" {
		t.Fatalf("schedule message %s %v", m.Subject, m.Header)
	}
	back, err := crawlmsg.DecodeRecrawl(m.Data)
	if err != nil || back.URL != e.URL || back.State != e.State {
		t.Fatalf("DecodeRecrawl = %+v, %v", back, err)
	}
}

func TestBringForward(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	sched := func(lastFetch, due time.Time) History {
		return History{Where: "scheduled", RecrawlEntry: crawlmsg.RecrawlEntry{State: crawlmsg.Recrawl{LastFetch: lastFetch.UnixMilli(), Due: due.UnixMilli()}}}
	}
	for _, tc := range []struct {
		name    string
		h       History
		lastmod time.Time
		want    time.Time // zero: left alone
	}{
		{"changed after its last fetch: due now", sched(now.Add(-time.Hour), now.Add(time.Hour)), now.Add(-time.Minute), now},
		{"not before the floor after its last fetch", sched(now.Add(-2*time.Second), now.Add(time.Hour)), now.Add(-time.Second), now.Add(8 * time.Second)},
		{"fetched since the change", sched(now.Add(-time.Minute), now.Add(time.Hour)), now.Add(-time.Hour), time.Time{}},
		{"due by now anyway", sched(now.Add(-time.Hour), now), now.Add(-time.Minute), time.Time{}},
		{"already due", History{Where: "due"}, now.Add(-time.Minute), time.Time{}},
		{"no schedule", History{}, now.Add(-time.Minute), time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			due, ok := testSettings.BringForward(tc.h, tc.lastmod.Unix(), now)
			if ok != !tc.want.IsZero() || (ok && !due.Equal(tc.want)) {
				t.Fatalf("BringForward = %s %v, want %s", due, ok, tc.want)
			}
		})
	}
}

func TestPostpone(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		iv   time.Duration
		want time.Duration
	}{
		{"interval kept", 30 * time.Second, 30 * time.Second},
		{"no interval: the default", 0, testSettings.Default},
		{"below the minimum", time.Millisecond, testSettings.Min},
		{"above the maximum", 1000 * 24 * time.Hour, testSettings.Max},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prev := crawlmsg.Recrawl{ETag: `"e"`, Fetches: 3, LastFetch: at.Add(-time.Hour).UnixMilli(), Interval: tc.iv.Milliseconds()}
			got := testSettings.Postpone(prev, at)
			if got.Due != at.Add(tc.want).UnixMilli() || got.Interval != tc.want.Milliseconds() {
				t.Fatalf("due %s, interval %dms; want %s, %s", time.UnixMilli(got.Due).UTC(), got.Interval, at.Add(tc.want), tc.want)
			}
			if got.Fetches != 3 || got.ETag != `"e"` || got.LastFetch != prev.LastFetch {
				t.Fatalf("state %+v: want counters, validators and last fetch kept", got)
			}
		})
	}
}

func TestForBoundsByRule(t *testing.T) {
	d := func(v time.Duration) *policy.Duration { p := policy.Duration(v); return &p }
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name             string
		min, max         *policy.Duration
		prevIV           time.Duration // 0: a first fetch
		v                Verdict
		wantMin, wantMax time.Duration
		wantIV           time.Duration
	}{
		{"no rule: the process-wide bounds", nil, nil, 90 * time.Second, Unchanged, 10 * time.Second, 100 * time.Second, 100 * time.Second},
		{"a rule's max caps the growth", nil, d(50 * time.Second), 40 * time.Second, Unchanged, 10 * time.Second, 50 * time.Second, 50 * time.Second},
		{"a rule's min holds a changing page back", d(30 * time.Second), nil, 40 * time.Second, Changed, 30 * time.Second, 100 * time.Second, 30 * time.Second},
		{"both bounds", d(20 * time.Second), d(25 * time.Second), 40 * time.Second, Other, 20 * time.Second, 25 * time.Second, 25 * time.Second},
		{"a min past the process-wide max moves the max", d(200 * time.Second), nil, 40 * time.Second, Changed, 200 * time.Second, 200 * time.Second, 200 * time.Second},
		{"a max under the process-wide min moves the min", nil, d(5 * time.Second), 40 * time.Second, Unchanged, 5 * time.Second, 5 * time.Second, 5 * time.Second},
		{"the first interval is kept within a rule's bounds", nil, d(30 * time.Second), 0, First, 10 * time.Second, 30 * time.Second, 30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r policy.Resolved
			r.RecrawlMin, r.RecrawlMax = tc.min, tc.max
			s := testSettings.For(r)
			if s.Min != tc.wantMin || s.Max != tc.wantMax || s.Default < s.Min || s.Default > s.Max {
				t.Fatalf("For = min %s max %s default %s, want min %s max %s", s.Min, s.Max, s.Default, tc.wantMin, tc.wantMax)
			}
			var prev *crawlmsg.Recrawl
			if tc.prevIV > 0 {
				prev = &crawlmsg.Recrawl{Interval: tc.prevIV.Milliseconds(), Digest: "old"}
			}
			st, _ := s.Next(prev, tc.v, Fetch{Status: 200, Digest: "new", FetchedAt: at})
			if got := time.Duration(st.Interval) * time.Millisecond; got != tc.wantIV {
				t.Errorf("Next interval %s, want %s", got, tc.wantIV)
			}
			if p := s.Postpone(crawlmsg.Recrawl{Interval: time.Hour.Milliseconds()}, at); time.Duration(p.Interval)*time.Millisecond != s.Max {
				t.Errorf("Postpone interval %dms, want the max %s", p.Interval, s.Max)
			}
		})
	}
}
