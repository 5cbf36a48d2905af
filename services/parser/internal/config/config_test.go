package config

import (
	"runtime"
	"strings"
	"testing"

	"github.com/trawl/trawl/services/parser/internal/scope"
	"github.com/trawl/trawl/shared/crawlscope"
	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/recrawl"
	"github.com/trawl/trawl/shared/renderconf"
)

func TestDefaults(t *testing.T) {
	c, err := Load(envconfig.FromMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	want := Config{
		Common: c.Common, MaxDepth: 20, Settings: crawlscope.Settings{Scope: "any", MaxURLLength: 2048}, MaxOutlinks: 1000, MaxRedirects: 5,
		MaxTextBytes: 256 << 10, ParseConcurrency: runtime.GOMAXPROCS(0), ParseBatch: 32,
		ParseInFlight: 4, RobotsAgent: "trawl",
		ContentDedup: true, NearDupDistance: 3, NearDupMinWords: 20, NearDupBucketCap: 64, ContentParts: 1, ContentExactCap: DefaultContentExactCap,
		Embeds: "auto", MaxEmbedHops: 2, EmbedScope: "any",
		SitemapMaxURLs: 50000, SitemapMaxBytes: 50 << 20,
		Recrawl: recrawl.Defaults, Policy: true, Rules: policy.Defaults, Render: renderconf.Defaults,
	}
	if c != want {
		t.Errorf("defaults = %+v\nwant %+v", c, want)
	}
	if c.Common.HTTPAddr != ":9103" {
		t.Errorf("http addr = %q", c.Common.HTTPAddr)
	}
}

func TestLoadAndValidate(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		loadErr string // substring of Load's error
		badVars []string
	}{
		{name: "all set", env: map[string]string{
			"TRAWL_MAX_DEPTH": "5", "TRAWL_SCOPE": "domain", "TRAWL_MAX_URL_LENGTH": "512", "TRAWL_MAX_OUTLINKS": "50",
			"TRAWL_MAX_TEXT_BYTES": "64KiB", "TRAWL_INCLUDE": `^https://example\.com/`, "TRAWL_EXCLUDE": `\.pdf$`,
			"TRAWL_PARSE_CONCURRENCY": "4", "TRAWL_PARSE_BATCH": "8", "TRAWL_ROBOTS_AGENT": "MyBot",
			"TRAWL_CONTENT_DEDUP": "false", "TRAWL_NEAR_DUP_DISTANCE": "0", "TRAWL_NEAR_DUP_MIN_WORDS": "50", "TRAWL_NEAR_DUP_BUCKET_CAP": "4096",
			"TRAWL_CONTENT_PARTS": "1024",
		}},
		{name: "unreadable dedup switch", env: map[string]string{"TRAWL_CONTENT_DEDUP": "maybe"}, loadErr: "TRAWL_CONTENT_DEDUP"},
		{name: "near-dup distance beyond the bands", env: map[string]string{"TRAWL_NEAR_DUP_DISTANCE": "4"}, badVars: []string{"TRAWL_NEAR_DUP_DISTANCE"}},
		{name: "near-dup settings out of range", env: map[string]string{
			"TRAWL_NEAR_DUP_DISTANCE": "-1", "TRAWL_NEAR_DUP_MIN_WORDS": "0", "TRAWL_NEAR_DUP_BUCKET_CAP": "5000",
		}, badVars: []string{"TRAWL_NEAR_DUP_DISTANCE", "TRAWL_NEAR_DUP_MIN_WORDS", "TRAWL_NEAR_DUP_BUCKET_CAP"}},
		{name: "no content partition", env: map[string]string{"TRAWL_CONTENT_PARTS": "0"}, badVars: []string{"TRAWL_CONTENT_PARTS"}},
		{name: "too many content partitions", env: map[string]string{"TRAWL_CONTENT_PARTS": "1025"}, badVars: []string{"TRAWL_CONTENT_PARTS"}},
		{name: "unreadable numbers", env: map[string]string{"TRAWL_MAX_DEPTH": "deep", "TRAWL_MAX_TEXT_BYTES": "lots"}, loadErr: "TRAWL_MAX_DEPTH"},
		{name: "out of range", env: map[string]string{
			"TRAWL_MAX_DEPTH": "-1", "TRAWL_MAX_URL_LENGTH": "10", "TRAWL_MAX_OUTLINKS": "0", "TRAWL_MAX_REDIRECTS": "21", "TRAWL_MAX_TEXT_BYTES": "64MiB",
			"TRAWL_PARSE_CONCURRENCY": "0", "TRAWL_PARSE_BATCH": "5000", "TRAWL_PARSE_INFLIGHT": "0",
		}, badVars: []string{"TRAWL_MAX_DEPTH", "TRAWL_MAX_URL_LENGTH", "TRAWL_MAX_OUTLINKS", "TRAWL_MAX_REDIRECTS", "TRAWL_MAX_TEXT_BYTES", "TRAWL_PARSE_CONCURRENCY", "TRAWL_PARSE_BATCH", "TRAWL_PARSE_INFLIGHT"}},
		{name: "bad scope", env: map[string]string{"TRAWL_SCOPE": "planet"}, badVars: []string{"TRAWL_SCOPE"}},
		{name: "sitemap limits below the protocol's", env: map[string]string{"TRAWL_SITEMAP_MAX_URLS": "1000", "TRAWL_SITEMAP_MAX_BYTES": "10MiB"}},
		{name: "sitemap limits beyond the protocol's", env: map[string]string{"TRAWL_SITEMAP_MAX_URLS": "50001", "TRAWL_SITEMAP_MAX_BYTES": "51MiB"},
			badVars: []string{"TRAWL_SITEMAP_MAX_URLS", "TRAWL_SITEMAP_MAX_BYTES"}},
		{name: "sitemap limits too small", env: map[string]string{"TRAWL_SITEMAP_MAX_URLS": "0", "TRAWL_SITEMAP_MAX_BYTES": "100"},
			badVars: []string{"TRAWL_SITEMAP_MAX_URLS", "TRAWL_SITEMAP_MAX_BYTES"}},
		{name: "requisites set", env: map[string]string{"TRAWL_EMBEDS": "ON", "TRAWL_MAX_EMBED_HOPS": "16", "TRAWL_EMBED_SCOPE": "crawl"}},
		{name: "bad requisite settings", env: map[string]string{"TRAWL_EMBEDS": "sometimes", "TRAWL_MAX_EMBED_HOPS": "0", "TRAWL_EMBED_SCOPE": "host"},
			badVars: []string{"TRAWL_EMBEDS", "TRAWL_MAX_EMBED_HOPS", "TRAWL_EMBED_SCOPE"}},
		{name: "requisite chain too long", env: map[string]string{"TRAWL_MAX_EMBED_HOPS": "17"}, badVars: []string{"TRAWL_MAX_EMBED_HOPS"}},
		{name: "bad regexps", env: map[string]string{"TRAWL_INCLUDE": "(", "TRAWL_EXCLUDE": "[a-"}, badVars: []string{"TRAWL_INCLUDE", "TRAWL_EXCLUDE"}},
		{name: "bad agent", env: map[string]string{"TRAWL_ROBOTS_AGENT": "my bot/1.0"}, badVars: []string{"TRAWL_ROBOTS_AGENT"}},
		// The fetcher refuses a digit (RFC 9309 product token): the parser must too.
		{name: "agent with a digit", env: map[string]string{"TRAWL_ROBOTS_AGENT": "trawl2"}, badVars: []string{"TRAWL_ROBOTS_AGENT"}},
		{name: "policy off: its settings unread", env: map[string]string{"TRAWL_PARSER_POLICY": "false", "TRAWL_POLICY_POLL": "5s"}},
		{name: "unreadable policy switch", env: map[string]string{"TRAWL_PARSER_POLICY": "sometimes"}, loadErr: "TRAWL_PARSER_POLICY"},
		{name: "policy poll out of range", env: map[string]string{"TRAWL_POLICY_POLL": "5s"}, badVars: []string{"TRAWL_POLICY_POLL"}},
		{name: "bad common", env: map[string]string{"TRAWL_NATS_URL": "::"}, badVars: []string{"TRAWL_NATS_URL"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(envconfig.FromMap(tt.env))
			if tt.loadErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.loadErr) {
					t.Fatalf("Load error = %v, want one naming %s", err, tt.loadErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			verr := c.Validate()
			if len(tt.badVars) == 0 {
				if verr != nil {
					t.Fatalf("Validate: %v", verr)
				}
				return
			}
			if verr == nil {
				t.Fatalf("Validate accepted %v", tt.env)
			}
			for _, v := range tt.badVars {
				if !strings.Contains(verr.Error(), v) {
					t.Errorf("error does not name %s: %v", v, verr)
				}
			}
		})
	}
}

func TestContentDedupOptions(t *testing.T) {
	c, err := Load(envconfig.FromMap(map[string]string{"TRAWL_NEAR_DUP_DISTANCE": "2", "TRAWL_NEAR_DUP_BUCKET_CAP": "16", "TRAWL_CONTENT_PARTS": "12"}))
	if err != nil {
		t.Fatal(err)
	}
	o := c.ContentDedupOptions()
	if o.MaxDistance != 2 || o.BucketCap != 16 || o.Parts != 12 {
		t.Errorf("options = %+v", o)
	}
	if err := o.Validate(); err != nil {
		t.Error(err)
	}
}

func TestScopeConfig(t *testing.T) {
	c, err := Load(envconfig.FromMap(map[string]string{
		"TRAWL_SCOPE": "host", "TRAWL_MAX_DEPTH": "3", "TRAWL_MAX_OUTLINKS": "7", "TRAWL_MAX_URL_LENGTH": "100", "TRAWL_EXCLUDE": `/x$`,
	}))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := c.ScopeConfig(4096)
	if err != nil {
		t.Fatal(err)
	}
	if sc.Mode != scope.Host || sc.MaxDepth != 3 || sc.MaxOutlinks != 7 || sc.MaxURLLength != 100 || sc.MaxBatchBytes != 4096 {
		t.Errorf("scope config = %+v", sc)
	}
	if sc.Include != nil || sc.Exclude == nil || !sc.Exclude.MatchString("http://h/x") {
		t.Errorf("regexps: include %v, exclude %v", sc.Include, sc.Exclude)
	}
}
