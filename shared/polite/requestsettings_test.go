package polite_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/polite"
)

func TestRequestSettingsDefaults(t *testing.T) {
	r := envconfig.FromMap(nil)
	s := polite.LoadRequestSettings(r)
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	if s.DialTimeout != 10*time.Second || s.BodyInlineMax != 1<<20 || len(s.AllowCIDRs) != 0 || len(s.Resolve) != 0 {
		t.Errorf("defaults %+v", s)
	}
}

// Each error names the variable an operator has to change: the fetcher's and the
// renderer's configs report these errors as they are.
func TestRequestSettingsValidate(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want string // the variable the error names; "" = valid
	}{
		{"dial timeout zero", map[string]string{"TRAWL_DIAL_TIMEOUT": "0s"}, "TRAWL_DIAL_TIMEOUT"},
		{"dial timeout negative", map[string]string{"TRAWL_DIAL_TIMEOUT": "-1s"}, "TRAWL_DIAL_TIMEOUT"},
		{"every body by reference", map[string]string{"TRAWL_BODY_INLINE_MAX": "0"}, ""},
		{"inline body at the ceiling", map[string]string{"TRAWL_BODY_INLINE_MAX": "4MiB"}, ""},
		{"inline body too big for a message", map[string]string{"TRAWL_BODY_INLINE_MAX": "4100KiB"}, "TRAWL_BODY_INLINE_MAX"},
		{"allow list", map[string]string{"TRAWL_ALLOW_CIDRS": "127.0.0.0/8, ::1"}, ""},
		{"bad cidr", map[string]string{"TRAWL_ALLOW_CIDRS": "127.0.0.0/8,10.0.0.0/99"}, "TRAWL_ALLOW_CIDRS"},
		{"static names on allowed addresses", map[string]string{"TRAWL_ALLOW_CIDRS": "127.0.0.0/8", "TRAWL_RESOLVE": "a.test=127.0.2.1, b.test=127.0.2.1"}, ""},
		{"static name on a refused address", map[string]string{"TRAWL_RESOLVE": "a.test=127.0.2.1"}, "TRAWL_RESOLVE"},
		{"static name unreadable", map[string]string{"TRAWL_ALLOW_CIDRS": "127.0.0.0/8", "TRAWL_RESOLVE": "a.test"}, "TRAWL_RESOLVE"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := envconfig.FromMap(tc.env)
			s := polite.LoadRequestSettings(r)
			if err := r.Err(); err != nil {
				t.Fatalf("load: %v", err)
			}
			err := s.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
				t.Fatalf("Validate = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

// The parsed lists are what the dialer is built with.
func TestRequestSettingsParsed(t *testing.T) {
	r := envconfig.FromMap(map[string]string{"TRAWL_ALLOW_CIDRS": "127.0.0.0/8,::1", "TRAWL_RESOLVE": "a.test=127.0.2.1,a.test=127.0.2.2"})
	s := polite.LoadRequestSettings(r)
	want := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	if len(s.AllowCIDRs) != 2 || s.AllowCIDRs[0] != want[0] || s.AllowCIDRs[1] != want[1] {
		t.Errorf("AllowCIDRs = %v, want %v", s.AllowCIDRs, want)
	}
	if a := s.Resolve["a.test"]; len(a) != 2 || a[0] != netip.MustParseAddr("127.0.2.1") || a[1] != netip.MustParseAddr("127.0.2.2") {
		t.Errorf("Resolve = %v", s.Resolve)
	}
}
