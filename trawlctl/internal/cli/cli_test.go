package cli

import (
	"fmt"
	"net"
	"strings"
	"testing"
)

func TestUsageErrors(t *testing.T) {
	inv := invocation{env: map[string]string{}}
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"no command", nil, nil, ""},
		{"unknown command", nil, []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"unknown subcommand", nil, []string{"robots", "fetch"}, `unknown command "robots fetch"`},
		{"unknown policy subcommand", nil, []string{"policy", "bogus"}, `unknown command "policy bogus"`},
		{"unknown flag", nil, []string{"status", "-bogus"}, "flag provided but not defined: -bogus"},
		{"bad flag value", nil, []string{"tap", "-n", "many", "crawl.docs"}, `invalid value "many" for flag -n`},
		{"tap without subject", nil, []string{"tap"}, "want one SUBJECT"},
		{"seed without urls", nil, []string{"seed"}, "no URLs"},
		{"seed priority", nil, []string{"seed", "-priority", "1", "http://a.test/"}, "derives priority from depth"},
		{"seed negative depth", nil, []string{"seed", "-depth", "-1", "http://a.test/"}, "-depth -1"},
		{"explain two urls", nil, []string{"explain", "http://a.test/", "http://b.test/"}, "want one URL"},
		{"url normalize nothing", nil, []string{"url", "normalize"}, "want at least one URL"},
		{"robots check without source", nil, []string{"robots", "check", "http://a.test/"}, "want (-file"},
		{"robots check bad status", nil, []string{"robots", "check", "-status", "42", "http://a.test/"}, "-status 42"},
		{"pause shard out of range", map[string]string{"TRAWL_SHARDS": "2"}, []string{"pause", "-shard", "2"}, "-shard 2: want 0..1"},
		{"bad TRAWL_SHARDS", map[string]string{"TRAWL_SHARDS": "lots"}, []string{"status"}, "TRAWL_SHARDS"},
		{"TRAWL_SHARDS out of range", map[string]string{"TRAWL_SHARDS": "0"}, []string{"status"}, "TRAWL_SHARDS (-shards)=0"},
		{"bad nats flag", nil, []string{"tap", "-nats", "::", "crawl.docs"}, "TRAWL_NATS_URL (-nats)"},
		{"bad agent", map[string]string{"TRAWL_ROBOTS_AGENT": "Bot/1.0"}, []string{"robots", "check", "-file", "x", "http://a.test/"}, "TRAWL_ROBOTS_AGENT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv.env = tt.env
			r := inv.run(t, tt.args...)
			if tt.args == nil {
				// The bare command prints the help (several lines) and fails.
				if r.code != ExitUsage || !strings.Contains(r.stderr, "commands:") {
					t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
				}
				return
			}
			expectOneLine(t, r, ExitUsage, tt.want)
			if r.stdout != "" {
				t.Errorf("stdout %q, want nothing", r.stdout)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	inv := invocation{}
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"help"}, []string{"commands:", "seed", "status", "pause", "resume", "tap", "robots check", "url normalize", "explain", "Exit status"}},
		{[]string{"-h"}, []string{"commands:"}},
		{[]string{"seed", "-h"}, []string{"usage: trawlctl seed", "-depth", "-file", "min(depth, F-1)"}},
		{[]string{"help", "robots", "check"}, []string{"usage: trawlctl robots check", "-agent", "-status"}},
		{[]string{"tap", "-help"}, []string{"-from-start", "-durable", "work"}},
		// A group of commands answers -h with its commands.
		{[]string{"policy", "-h"}, []string{"usage: trawlctl policy <command>", "policy set", "policy apply", "policy log"}},
		{[]string{"robots", "-h"}, []string{"robots check"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r := inv.run(t, tt.args...)
			if r.code != ExitOK {
				t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(r.stdout, w) {
					t.Errorf("help lacks %q:\n%s", w, r.stdout)
				}
			}
		})
	}
}

func TestURLNormalize(t *testing.T) {
	inv := invocation{}
	tests := []struct {
		name   string
		args   []string
		out    []string
		code   int
		stderr string
	}{
		{
			name: "normal forms",
			args: []string{"HTTP://Example.COM:80/a/./b/../c?", "https://例え.jp/%7euser#frag", "http://127.000.000.001/"},
			out:  []string{"http://example.com/a/c", "https://xn--r8jz45g.jp/~user", "http://127.0.0.1/"},
		},
		{
			name:   "one invalid among valid",
			args:   []string{"http://a.test/x", "ftp://a.test/", "http://b.test"},
			out:    []string{"http://a.test/x", "http://b.test/"},
			code:   ExitFailure,
			stderr: `invalid URL "ftp://a.test/"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := inv.run(t, append([]string{"url", "normalize"}, tt.args...)...)
			if got := lines(r.stdout); strings.Join(got, "\n") != strings.Join(tt.out, "\n") {
				t.Errorf("stdout %q, want %q", got, tt.out)
			}
			if tt.code == 0 {
				if r.code != 0 || r.stderr != "" {
					t.Errorf("exit %d, stderr %q", r.code, r.stderr)
				}
				return
			}
			expectOneLine(t, r, tt.code, tt.stderr)
		})
	}
}

// closedPort returns an address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestUnreachable(t *testing.T) {
	addr := closedPort(t)
	inv := invocation{env: map[string]string{
		"TRAWL_NATS_URL":  "nats://" + addr,
		"TRAWL_REDIS_URL": "redis://" + addr + "/0",
	}}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"seed", "http://a.test/"}, "NATS at nats://" + addr + " unreachable"},
		{[]string{"tap", "crawl.docs"}, "NATS at nats://" + addr + " unreachable"},
		{[]string{"status"}, "Redis at " + addr + " unreachable"},
		{[]string{"pause"}, "Redis at " + addr + " unreachable"},
		{[]string{"resume", "-shard", "0"}, "Redis at " + addr + " unreachable"},
		{[]string{"explain", "http://a.test/"}, "Redis at " + addr + " unreachable"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r := inv.run(t, tt.args...)
			expectOneLine(t, r, ExitFailure, tt.want)
			if !strings.HasPrefix(r.stderr, fmt.Sprintf("trawlctl %s: ", tt.args[0])) {
				t.Errorf("stderr %q does not name the command", r.stderr)
			}
		})
	}
}

func TestInvalidURLs(t *testing.T) {
	// Input errors are found before any server is contacted (none is running here).
	addr := closedPort(t)
	inv := invocation{env: map[string]string{"TRAWL_NATS_URL": "nats://" + addr, "TRAWL_REDIS_URL": "redis://" + addr}}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"seed", "http://a.test/", "mailto:x@y"}, `seed "mailto:x@y"`},
		{[]string{"explain", "not a url"}, `invalid URL "not a url"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			expectOneLine(t, inv.run(t, tt.args...), ExitFailure, tt.want)
		})
	}
}
