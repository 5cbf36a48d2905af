package crawlscope

import (
	"strings"
	"testing"

	"github.com/trawl/trawl/shared/envconfig"
)

func TestLoadValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string // "" = valid
	}{
		{"defaults", nil, ""},
		{"scope any case", map[string]string{"TRAWL_SCOPE": " Host "}, ""},
		{"scope", map[string]string{"TRAWL_SCOPE": "planet"}, "TRAWL_SCOPE"},
		{"shortest length", map[string]string{"TRAWL_MAX_URL_LENGTH": "32"}, ""},
		{"length too short", map[string]string{"TRAWL_MAX_URL_LENGTH": "31"}, "TRAWL_MAX_URL_LENGTH=31"},
		{"length beyond urlnorm", map[string]string{"TRAWL_MAX_URL_LENGTH": "16385"}, "TRAWL_MAX_URL_LENGTH=16385"},
		{"include", map[string]string{"TRAWL_INCLUDE": "("}, "TRAWL_INCLUDE"},
		{"exclude", map[string]string{"TRAWL_EXCLUDE": "[a"}, "TRAWL_EXCLUDE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Load(envconfig.FromMap(tc.env))
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
}

func TestRegexps(t *testing.T) {
	inc, exc, err := Settings{Exclude: `\.pdf$`}.Regexps()
	if err != nil || inc != nil || exc == nil || !exc.MatchString("http://h/a.pdf") {
		t.Fatalf("Regexps = %v, %v, %v: want no include and a working exclude", inc, exc, err)
	}
	if got := (Settings{Scope: " DOMAIN"}).Mode(); got != Domain {
		t.Errorf("Mode = %q", got)
	}
}
