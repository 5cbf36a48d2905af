package envconfig

import (
	"slices"
	"strings"
	"testing"
)

// TestUnknownWarning: a misspelt setting is named, with the setting it most likely means
// when one is a slip away; a setting another program reads (one environment is given to
// every service) and a name the tests reserve are not; a value is never shown.
func TestUnknownWarning(t *testing.T) {
	for _, tc := range []struct {
		name    string
		environ []string
		want    []Unknown // nil: no warning
	}{
		{"a slip gets a guess", []string{"TRAWL_MAX_PAGE_PER_HOST=60"}, []Unknown{{"TRAWL_MAX_PAGE_PER_HOST", "TRAWL_MAX_PAGES_PER_HOST"}}},
		{"other words get none", []string{"TRAWL_HOST_BUDGET=60"}, []Unknown{{"TRAWL_HOST_BUDGET", ""}}},
		{"a transposition", []string{"TRAWL_FETCH_CONCURRNECY=8"}, []Unknown{{"TRAWL_FETCH_CONCURRNECY", "TRAWL_FETCH_CONCURRENCY"}}},
		{"several, sorted, each once", []string{"TRAWL_SHARD=2", "TRAWL_HOST_BUDGET=60", "TRAWL_SHARD=3"},
			[]Unknown{{"TRAWL_HOST_BUDGET", ""}, {"TRAWL_SHARD", "TRAWL_SHARDS"}}},
		{"every service's and trawlctl's settings", []string{
			"TRAWL_BLOOM_CAPACITY=1",     // dedup
			"TRAWL_FETCH_CONCURRENCY=1",  // fetcher
			"TRAWL_RENDER_TABS=1",        // renderer
			"TRAWL_ARCHIVE_DIR=/w",       // archiver
			"TRAWL_MAX_PAGES_PER_HOST=1", // scheduler
			"TRAWL_NATS_URL=nats://x",    // all
			"TRAWL_RECRAWL_PLACEMENT=a",  // all, the newest
		}, nil},
		{"compose's and the tests' variables", []string{"TRAWL_BIND=0.0.0.0", "TRAWL_NATS_PASSWORD=p", "TRAWL_BENCH_ROUNDS=3", "TRAWL_TEST_WEB_PAGES=4"}, nil},
		{"not Trawl's", []string{"PATH=/bin", "GOGC=400", "TRAWLX=1", "HOME=/root"}, nil},
		{"an empty value is still set", []string{"TRAWL_SEED="}, []Unknown{{"TRAWL_SEED", "TRAWL_SEEDS"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := FindUnknown(tc.environ)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("FindUnknown = %v, want %v", got, tc.want)
			}
			w := UnknownWarning(tc.environ)
			if (w == "") != (tc.want == nil) {
				t.Fatalf("UnknownWarning = %q, want a warning: %v", w, tc.want != nil)
			}
			for _, u := range tc.want {
				if !strings.Contains(w, u.Name) || (u.Closest != "") != strings.Contains(w, "did you mean "+u.Closest+"?") {
					t.Errorf("UnknownWarning = %q: want %s named, with guess %q", w, u.Name, u.Closest)
				}
			}
		})
	}
}

// TestUnknownWarningShowsNoValue: values may be secrets (a password in a URL), so the
// warning names the variables only.
func TestUnknownWarningShowsNoValue(t *testing.T) {
	const secret = "s3cr3t-Pa55"
	for _, kv := range []string{
		"TRAWL_NATS_PASSWROD=" + secret,
		"TRAWL_NATS_URLS=nats://u:" + secret + "@h:4222",
		"TRAWL_X=a=" + secret,
	} {
		t.Run(kv[:strings.IndexByte(kv, '=')], func(t *testing.T) {
			w := UnknownWarning([]string{kv})
			if w == "" {
				t.Fatal("no warning")
			}
			if v := kv[strings.IndexByte(kv, '=')+1:]; strings.Contains(w, v) {
				t.Errorf("UnknownWarning = %q shows the value %q", w, v)
			}
		})
	}
}

// TestKnownComesFromTheReference: the registry holds the reference's rows, including
// settings of programs other than any one service (trawlctl, compose.yaml) and reserved
// prefixes; envdoc's TestKnownIsTheReference holds known_gen.go to docs/configuration.md.
func TestKnownComesFromTheReference(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"TRAWL_NATS_URL", true},
		{"TRAWL_RECRAWL_STREAMS", true},
		{"TRAWL_GO_IMAGE", true},
		{"TRAWL_STATUS_PORT", true},
		{"TRAWL_BENCH_ANYTHING", true},
		{"TRAWL_BENCH", false},
		{"TRAWL_HOST_BUDGET", false},
		{"GOGC", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Known(tc.name); got != tc.want {
				t.Errorf("Known(%s) = %v, want %v", tc.name, got, tc.want)
			}
		})
	}
	if !slices.IsSorted(knownNames[:]) {
		t.Error("knownNames is not sorted: Known's binary search misses names")
	}
}
