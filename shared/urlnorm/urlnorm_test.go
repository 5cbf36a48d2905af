package urlnorm

import (
	"errors"
	"testing"
)

func TestNormalize(t *testing.T) {
	tests := []struct {
		in, want string
		err      error
	}{
		{"HTTP://Example.COM/", "http://example.com/", nil},
		{"http://example.com", "http://example.com/", nil},
		{"http://example.com:80/a", "http://example.com/a", nil},
		{"https://example.com:443/a", "https://example.com/a", nil},
		{"http://example.com:8080/a", "http://example.com:8080/a", nil},
		{"http://example.com:/a", "http://example.com/a", nil},
		{"http://example.com/a/./b/../c", "http://example.com/a/c", nil},
		{"http://example.com/../../a", "http://example.com/a", nil},
		{"http://example.com/a#frag", "http://example.com/a", nil},
		{"http://example.com/a?", "http://example.com/a", nil},
		{"http://example.com/%7euser/%41%2f", "http://example.com/~user/A%2F", nil},
		{"http://example.com/a%2fb", "http://example.com/a%2Fb", nil},
		{"http://example.com/a b", "http://example.com/a%20b", nil},
		{"http://example.com/ü", "http://example.com/%C3%BC", nil},
		{"http://example.com/?q=a b&x=%7e", "http://example.com/?q=a%20b&x=~", nil},
		{"http://Bücher.example/", "http://xn--bcher-kva.example/", nil},
		{"http://example.com./", "http://example.com/", nil},
		{"http://127.000.000.001/", "http://127.0.0.1/", nil},
		{"http://0x7f.1/", "http://127.0.0.1/", nil},
		{"http://2130706433/", "http://127.0.0.1/", nil},
		{"http://256.0.0.1/", "", ErrInvalid},
		{"http://1.2.3.4.5/", "", ErrInvalid},
		{"http://127.0.1.5:8080/p/1", "http://127.0.1.5:8080/p/1", nil},
		{"http://[::1]:80/", "http://[::1]/", nil},
		{"http://[2001:DB8::1]/", "http://[2001:db8::1]/", nil},
		{"http://[::ffff:1.2.3.4]/", "http://1.2.3.4/", nil}, // see DEVIATIONS.md
		{"  http://example.com/x  ", "http://example.com/x", nil},
		{"http://exa\nmple.com/", "http://example.com/", nil},
		{"mailto:a@example.com", "", ErrScheme},
		{"javascript:alert(1)", "", ErrScheme},
		{"ftp://example.com/", "", ErrScheme},
		{"/relative", "", ErrInvalid},
		{"", "", ErrInvalid},
		// A special scheme takes any number of slashes before the authority (WHATWG).
		{"http:///nohost", "http://nohost/", nil},
		{"http:example.com/a", "http://example.com/a", nil},
		{"http://", "", ErrInvalid},
		{"http://example.com:65535/", "http://example.com:65535/", nil},
		{"http://example.com:65536/", "", ErrInvalid},
		{"http://example.com:99999999999/", "", ErrInvalid},
		{"http://example.com:0/", "", ErrInvalid},
		// Backslashes before the query are slashes for http(s), as in browsers.
		{`http:\\example.com\a\b?q=\`, "http://example.com/a/b?q=%5C", nil},
		// Empty password and empty userinfo dropped; userinfo bytes net/url refuses encoded.
		{"http://user:@example.com/", "http://user@example.com/", nil},
		{"http://:@example.com/", "http://example.com/", nil},
		{"http://u:p]w@example.com/", "http://u:p%5Dw@example.com/", nil},
		// Percent-encoded hosts are decoded, then read as IPv4 when they end in a number.
		{"http://%65xample.com/", "http://example.com/", nil},
		{"http://%30x7f.1/", "http://127.0.0.1/", nil},
		{"http://ex%2Fample.com/", "", ErrInvalid},
		{"http://1.2.3.08/", "", ErrInvalid},
		{"http://foo.09/", "", ErrInvalid},
		{"http://10000000000/", "", ErrInvalid},
		// C0 controls and spaces around the URL are ignored; inside it they are encoded.
		{"\x00 http://example.com/a\x7fb \x1f", "http://example.com/a%7Fb", nil},
		// The fragment goes before parsing, so junk in it cannot reject the URL.
		{"http://example.com/a#b c<\x7f>", "http://example.com/a", nil},
		{"http://exa mple.com/", "", ErrInvalid},
		{"http://example.com/100%", "http://example.com/100%25", nil},
		{"http://example.com/%zz", "http://example.com/%25zz", nil},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := Normalize(tc.in)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("Normalize(%q) = %q, %v; want error %v", tc.in, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Normalize(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
			again, err := Normalize(got)
			if err != nil || again != got {
				t.Fatalf("not idempotent: %q -> %q, %v", got, again, err)
			}
		})
	}
}

func FuzzNormalize(f *testing.F) {
	for _, s := range []string{"http://a/b/../c", "HTTP://X.com:80/%7e?q#f", "https://[::1]:443/", "http://ü.de/ä b", "http://a/%zz%", "http://a/./../.",
		"http://a/x;jsessionid=1/..;sid=0123456789abcdef/y?b=1&&a=2&PHPSESSID=x", `http:\\a\b`, "http://u:@%41.com:0080/?z&y"} {
		f.Add(s)
	}
	optionSets := []Options{{}, {StripSessionIDs: true}, {SortQuery: true}, {StripSessionIDs: true, SortQuery: true}}
	f.Fuzz(func(t *testing.T, s string) {
		for _, o := range optionSets {
			n, err := NormalizeWith(s, o)
			if err != nil {
				continue
			}
			n2, err := NormalizeWith(n, o)
			if err != nil {
				t.Fatalf("%+v: normal form %q of %q does not normalise: %v", o, n, s, err)
			}
			if n2 != n {
				t.Fatalf("%+v: not idempotent: %q -> %q -> %q", o, s, n, n2)
			}
			if o == (Options{}) {
				if plain, err := Normalize(s); err != nil || plain != n {
					t.Fatalf("NormalizeWith(%q, {}) = %q, Normalize = %q, %v", s, n, plain, err)
				}
			}
		}
	})
}
