package policy

import (
	"strings"
	"testing"
)

func TestParseScope(t *testing.T) {
	tests := []struct {
		in, want string // want "" with err: refused, and the error says err
		err      string
	}{
		{in: "host:WWW.Example.COM.", want: "host:www.example.com"},
		{in: "host:[2001:DB8::1]", want: "host:2001:db8::1"},
		{in: "host:bücher.de", want: "host:xn--bcher-kva.de"},
		{in: "host:example.com:8080", err: "no port"},
		{in: "domain:Example.CO.UK", want: "domain:example.co.uk"},
		{in: "domain:www.example.com", want: "domain:www.example.com"},
		{in: "domain:co.uk", err: "public suffix"},
		{in: "domain:com", err: "public suffix"},
		{in: "domain:github.io", err: "public suffix"},
		{in: "domain:192.0.2.1", err: "address"},
		{in: "cidr:192.0.2.7/24", want: "cidr:192.0.2.0/24"},
		{in: "cidr:192.0.2.7", want: "cidr:192.0.2.7/32"},
		{in: "cidr:::ffff:192.0.2.0/120", want: "cidr:192.0.2.0/24"},
		{in: "cidr:2001:db8::/32", want: "cidr:2001:db8::/32"},
		{in: "cidr:300.0.0.0/8", err: "ParsePrefix"},
		// SURT prefixes that stop at the authority are the host or domain rule they equal.
		{in: "surt:http://(com,example,)", want: "host:example.com"},
		{in: "surt:http://(com,example,)/", want: "host:example.com"},
		{in: "surt:http://(com,example,", want: "domain:example.com"},
		{in: "surt:http://(uk,co,", err: "public suffix"},
		{in: "surt:http://(com,exam", err: "trailing comma"},
		{in: "surt:https://(com,example,www,:443)/a", want: "surt:http://(com,example,www,)/a"},
		{in: "surt:http://(com,example,www,:8080)/a", want: "surt:http://(com,example,www,:8080)/a"},
		{in: "surt:http://(com,example,www,:8080)/", want: "surt:http://(com,example,www,:8080)/"},
		{in: "surt:http://(192.0.2.1)/x", want: "surt:http://(192.0.2.1)/x"},
		{in: "surt:http://([2001:db8::1]:8080)/x", want: "surt:http://([2001:db8::1]:8080)/x"},
		{in: "surt:ftp://(com,example,)/", err: "http"},
		{in: "surt:http://(com,example,)private", err: "starts with"},
		// Plain URL prefixes, as Heritrix reads them: no path at all stays open.
		{in: "https://example.com", want: "domain:example.com"},
		{in: "https://Example.com/", want: "host:example.com"},
		{in: "https://example.com/private/", want: "surt:http://(com,example,)/private/"},
		{in: "http://example.com/private/", want: "surt:http://(com,example,)/private/"},
		{in: "https://example.com:443/a?b=1#frag", want: "surt:http://(com,example,)/a?b=1"},
		{in: "http://example.com:8080", want: "surt:http://(com,example,:8080)/"},
		{in: "http://192.0.2.1", want: "host:192.0.2.1"},
		{in: "https://user@example.com/", err: "user information"},
		{in: "example.com", err: "want host:NAME"},
		{in: "site:example.com", err: "unknown kind"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			sc, err := ParseScope(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ParseScope(%q) = %v, %v; want an error saying %q", tt.in, sc, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseScope(%q): %v", tt.in, err)
			}
			if sc.String() != tt.want {
				t.Fatalf("ParseScope(%q) = %s, want %s", tt.in, sc, tt.want)
			}
			again, err := ParseScope(sc.String())
			if err != nil || again != sc {
				t.Fatalf("the canonical form %s reads back as %v, %v", sc, again, err)
			}
		})
	}
}
