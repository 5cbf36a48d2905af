package frontierconf

import (
	"strings"
	"testing"

	"github.com/trawl/trawl/shared/envconfig"
)

func TestLoadDefaults(t *testing.T) {
	r := envconfig.FromMap(nil)
	if got := Load(r); got != Defaults {
		t.Fatalf("Load with nothing set = %+v, want %+v", got, Defaults)
	}
	if err := Defaults.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	if got := LoadMaxDepth(r); got != Defaults.MaxDepth {
		t.Errorf("LoadMaxDepth = %d, want %d", got, Defaults.MaxDepth)
	}
	if got := LoadFrontQueuesIfSet(r); got != 0 {
		t.Errorf("LoadFrontQueuesIfSet unset = %d, want 0", got)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string // "" = valid
	}{
		{map[string]string{"TRAWL_MAX_DEPTH": "0"}, ""},
		{map[string]string{"TRAWL_MAX_DEPTH": "10000"}, ""},
		{map[string]string{"TRAWL_MAX_DEPTH": "10001"}, "TRAWL_MAX_DEPTH=10001"},
		{map[string]string{"TRAWL_MAX_DEPTH": "-1"}, "TRAWL_MAX_DEPTH=-1"},
		{map[string]string{"TRAWL_FRONT_QUEUES": "64"}, ""},
		{map[string]string{"TRAWL_FRONT_QUEUES": "65"}, "TRAWL_FRONT_QUEUES=65"},
		{map[string]string{"TRAWL_BACK_QUEUES": "0"}, "TRAWL_BACK_QUEUES"},
		{map[string]string{"TRAWL_PRIORITY_BIAS": "1.5"}, "TRAWL_PRIORITY_BIAS"},
		{map[string]string{"TRAWL_MAX_RETRIES": "101"}, "TRAWL_MAX_RETRIES"},
		{map[string]string{"TRAWL_MAX_PAGES": "-1"}, "TRAWL_MAX_PAGES"},
		{map[string]string{"TRAWL_MAX_PAGES_PER_HOST": "-1"}, "TRAWL_MAX_PAGES_PER_HOST"},
		{map[string]string{"TRAWL_RETIRE_AFTER": "0"}, ""},
		{map[string]string{"TRAWL_RETIRE_AFTER": "10001"}, "TRAWL_RETIRE_AFTER"},
		{map[string]string{"TRAWL_HOST_STATE_TTL": "0"}, ""},
		{map[string]string{"TRAWL_HOST_STATE_TTL": "30s"}, "TRAWL_HOST_STATE_TTL"},
		{map[string]string{"TRAWL_BACKLINK_HOSTS": "0"}, "TRAWL_BACKLINK_HOSTS"},
	} {
		name := ""
		for k, v := range tc.env {
			name = k + "=" + v
		}
		t.Run(name, func(t *testing.T) {
			r := envconfig.FromMap(tc.env)
			s := Load(r)
			if err := r.Err(); err != nil {
				t.Fatal(err)
			}
			err := s.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}
