package crawlmsg

import (
	stdjson "encoding/json"
	"errors"
	"reflect"
	"testing"
)

func TestDecodeOutcomes(t *testing.T) {
	good := `{"shard":0,"host":"a","url":"http://a/","lease":"l1","attempt":0,"kind":"fetched","requested":true,"status":200}`
	tests := []struct {
		name        string
		data        string
		wantLeases  []string
		wantInvalid int
		wantErr     error
	}{
		{"batch", `{"v":2,"outcomes":[` + good + `,{"host":"b","lease":"l2","kind":"error"}]}`, []string{"l1", "l2"}, 0, nil},
		// A fetcher of the earlier release writes single outcomes during a rolling upgrade.
		{"single outcome of version 1", `{"v":1,"host":"a","lease":"l1","kind":"fetched"}`, []string{"l1"}, 0, nil},
		{"single outcome without lease", `{"v":1,"host":"a","kind":"fetched"}`, nil, 0, ErrMalformed},
		{"bad entries skipped, others kept", `{"v":2,"outcomes":[{"host":"a","kind":"fetched"},` + good + `,{"lease":"x","kind":"error"},{"host":"c","lease":"y"}]}`, []string{"l1"}, 3, nil},
		{"only bad entries", `{"v":2,"outcomes":[{"host":"a"}]}`, nil, 1, nil},
		{"empty batch", `{"v":2,"outcomes":[]}`, nil, 0, ErrMalformed},
		{"no outcomes field", `{"v":2}`, nil, 0, ErrMalformed},
		{"outcomes not a list", `{"v":2,"outcomes":{}}`, nil, 0, ErrMalformed},
		{"future version", `{"v":3,"outcomes":[` + good + `]}`, nil, 0, ErrVersion},
		{"missing version", `{"outcomes":[` + good + `]}`, nil, 0, ErrVersion},
		{"not json", `{"v":2,`, nil, 0, ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			outs, invalid, err := DecodeOutcomes([]byte(tc.data))
			if !errors.Is(err, tc.wantErr) || (err != nil) != (tc.wantErr != nil) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			var leases []string
			for _, o := range outs {
				leases = append(leases, o.Lease)
				if o.V != 0 {
					t.Errorf("outcome %s has v=%d, want 0 inside a batch", o.Lease, o.V)
				}
			}
			if !reflect.DeepEqual(leases, tc.wantLeases) || invalid != tc.wantInvalid {
				t.Fatalf("leases %v, invalid %d; want %v, %d", leases, invalid, tc.wantLeases, tc.wantInvalid)
			}
		})
	}
}

// A batch is written as encoding/json writes it (taps read it with the standard library),
// its outcomes carry no version of their own, and it decodes back to the same outcomes.
func TestOutcomeBatchWire(t *testing.T) {
	b := &OutcomeBatch{Outcomes: []Outcome{
		{V: 1, Shard: 1, Host: "a.example", URL: "http://a.example/", Lease: "1-2-3", Attempt: 1, Kind: OutcomeFetched,
			Requested: true, Status: 503, StartedAt: 1790000000000, DurationMs: 1234, Bytes: 99, CrawlDelay: 1.5, RetryAfter: 0.25,
			Location: "https://a.example/", Error: `dial "x": <refused>`, Permanent: true},
		{Shard: 1, Host: "b.example", URL: "http://b.example/", Lease: "1-2-4", Kind: OutcomeRobots},
	}}
	got, err := Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if b.V != OutcomeBatchVersion || b.Outcomes[0].V != 0 {
		t.Fatalf("stamped v=%d, first outcome v=%d; want %d, 0", b.V, b.Outcomes[0].V, OutcomeBatchVersion)
	}
	want, err := stdjson.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("Marshal wrote\n%s\nencoding/json writes\n%s", got, want)
	}
	var probe struct {
		V        int              `json:"v"`
		Outcomes []map[string]any `json:"outcomes"`
	}
	if err := stdjson.Unmarshal(got, &probe); err != nil || probe.V != OutcomeBatchVersion {
		t.Fatalf("batch %s: v=%d, %v", got, probe.V, err)
	}
	if _, ok := probe.Outcomes[0]["v"]; ok {
		t.Fatalf("an outcome inside a batch carries a version: %s", got)
	}
	outs, invalid, err := DecodeOutcomes(want)
	if err != nil || invalid != 0 || !reflect.DeepEqual(outs, b.Outcomes) {
		t.Fatalf("decoded %+v (%d invalid, %v), want %+v", outs, invalid, err, b.Outcomes)
	}
}
