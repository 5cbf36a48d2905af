package renderconf

import (
	"strings"
	"testing"

	"github.com/trawl/trawl/shared/envconfig"
)

func TestLoadValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		mode string
		want string // "" = valid
	}{
		{"defaults", nil, Off, ""},
		{"auto any case", map[string]string{"TRAWL_RENDER": " Auto "}, Auto, ""},
		{"always", map[string]string{"TRAWL_RENDER": "always"}, Always, ""},
		{"never is a rule's value only", map[string]string{"TRAWL_RENDER": "never"}, "", "TRAWL_RENDER"},
		{"mode", map[string]string{"TRAWL_RENDER": "yes"}, "", "TRAWL_RENDER"},
		{"hosts", map[string]string{"TRAWL_RENDER": "auto", "TRAWL_RENDER_HOSTS": "App.Example.com., b.test"}, Auto, ""},
		{"host with a path", map[string]string{"TRAWL_RENDER_HOSTS": "a.test/x"}, Off, "TRAWL_RENDER_HOSTS"},
		{"urls", map[string]string{"TRAWL_RENDER_URLS": "("}, Off, "TRAWL_RENDER_URLS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Load(envconfig.FromMap(tc.env))
			if got := s.Canonical(); got != tc.mode {
				t.Errorf("Canonical = %q, want %q", got, tc.mode)
			}
			err := s.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want an error naming %s", err, tc.want)
			}
		})
	}
	if s := Load(envconfig.FromMap(map[string]string{"TRAWL_RENDER_HOSTS": "App.Example.com."})); s.HostList()[0] != "app.example.com" {
		t.Errorf("hosts = %q, want the canonical name", s.HostList())
	}
}

func TestModeOfRule(t *testing.T) {
	for v, want := range map[string]string{"always": Always, "NEVER": Never, "auto": Auto, "off": "", "": ""} {
		if got := ModeOf(v, true); got != want {
			t.Errorf("ModeOf(%q, rule) = %q, want %q", v, got, want)
		}
	}
}

func TestWhySlotBounded(t *testing.T) {
	keys := map[string]bool{}
	for i := range 5000 {
		k, f := WhySlot("trawl", "http://h.test/"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+strings.Repeat("y", i))
		keys[k+"/"+f] = true
		if !strings.HasPrefix(k, "trawl:render:why:{") {
			t.Fatalf("key %q", k)
		}
	}
	if len(keys) > WhyHashes*WhyFields {
		t.Fatal("more slots than the table has")
	}
}
