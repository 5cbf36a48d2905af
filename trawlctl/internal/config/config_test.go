package config

import (
	"strings"
	"testing"

	"github.com/trawl/trawl/shared/envconfig"
)

func TestLoadValidate(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string // substring of the error; "" = valid
	}{
		{"defaults", nil, ""},
		{"everything set", map[string]string{"TRAWL_NATS_URL": "nats://n:4222", "TRAWL_REDIS_URL": "redis://r:6379/2", "TRAWL_REDIS_PREFIX": "c2",
			"TRAWL_SHARDS": "4", "TRAWL_FRONT_QUEUES": "16", "TRAWL_ROBOTS_AGENT": "my-bot", "TRAWL_SCOPE": "domain", "TRAWL_EXCLUDE": `\.pdf$`}, ""},
		{"shards", map[string]string{"TRAWL_SHARDS": "2000"}, "TRAWL_SHARDS (-shards)=2000"},
		{"front queues", map[string]string{"TRAWL_FRONT_QUEUES": "65"}, "TRAWL_FRONT_QUEUES=65"},
		{"redis url", map[string]string{"TRAWL_REDIS_URL": "localhost"}, "TRAWL_REDIS_URL (-redis)"},
		{"agent", map[string]string{"TRAWL_ROBOTS_AGENT": "bot 1"}, "TRAWL_ROBOTS_AGENT"},
		{"scope", map[string]string{"TRAWL_SCOPE": "planet"}, "TRAWL_SCOPE"},
		{"regexp", map[string]string{"TRAWL_INCLUDE": "("}, "TRAWL_INCLUDE"},
		{"two at once", map[string]string{"TRAWL_MAX_DEPTH": "-1", "TRAWL_MAX_URL_LENGTH": "-5"}, "TRAWL_MAX_DEPTH=-1"},
		// The services' bound: explain must not accept a depth no scheduler runs with.
		{"depth beyond the frontier's bound", map[string]string{"TRAWL_MAX_DEPTH": "10001"}, "TRAWL_MAX_DEPTH=10001"},
		{"negative front queues", map[string]string{"TRAWL_FRONT_QUEUES": "-1"}, "TRAWL_FRONT_QUEUES=-1"},
		// The fetcher refuses it; robots check must not send a header the fetcher would not.
		{"user agent with a line break", map[string]string{"TRAWL_USER_AGENT": "bot\r\nX: 1"}, "TRAWL_USER_AGENT"},
		// The parser's rules: a length it refuses is refused, a scope it reads is read.
		{"url length below the parser's bound", map[string]string{"TRAWL_MAX_URL_LENGTH": "10"}, "TRAWL_MAX_URL_LENGTH=10"},
		{"scope as the parser reads it", map[string]string{"TRAWL_SCOPE": "Host"}, ""},
		// robots check dials and parses as the fetchers do: what they refuse, it refuses.
		{"allowed ranges", map[string]string{"TRAWL_ALLOW_CIDRS": "10.0.0.0/8,intranet"}, "TRAWL_ALLOW_CIDRS"},
		{"robots.txt limit below RFC 9309's", map[string]string{"TRAWL_ROBOTS_MAX_BYTES": "100KiB"}, "TRAWL_ROBOTS_MAX_BYTES"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := envconfig.FromMap(tt.env)
			c := Load(r)
			if err := r.Err(); err != nil {
				t.Fatal(err)
			}
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want %q", err, tt.want)
			}
		})
	}
	c := Load(envconfig.FromMap(nil))
	if c.NATSURL != "nats://127.0.0.1:4222" || c.RedisURL != "redis://127.0.0.1:6379/0" || c.RedisPrefix != "trawl" || c.Shards != 1 || c.FrontQueues != 0 || c.RobotsAgent != "trawl" || c.MaxURLLength != 2048 {
		t.Errorf("defaults %+v", c)
	}
}
