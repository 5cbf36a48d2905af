package urlnorm

import (
	"errors"
	"net/url"
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
		{"  http://example.com/x  ", "http://example.com/x", nil},
		{"http://exa\nmple.com/", "http://example.com/", nil},
		{"mailto:a@example.com", "", ErrScheme},
		{"javascript:alert(1)", "", ErrScheme},
		{"ftp://example.com/", "", ErrScheme},
		{"/relative", "", ErrInvalid},
		{"", "", ErrInvalid},
		{"http:///nohost", "", ErrInvalid},
		{"http://example.com:99999999999/", "http://example.com:99999999999/", nil},
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

// RFC 3986 §5.4: every normal and abnormal example, resolved against http://a/b/c/d;p?q.
// Results are the RFC's, normalised (so "http://a/b/c/g?" style empties are dropped and
// fragments removed).
func TestResolveRFC3986(t *testing.T) {
	base, _ := url.Parse("http://a/b/c/d;p?q")
	tests := []struct{ ref, want string }{
		{"g", "http://a/b/c/g"},
		{"./g", "http://a/b/c/g"},
		{"g/", "http://a/b/c/g/"},
		{"/g", "http://a/g"},
		{"//g", "http://g/"},
		{"?y", "http://a/b/c/d;p?y"},
		{"g?y", "http://a/b/c/g?y"},
		{"#s", "http://a/b/c/d;p?q"},
		{"g#s", "http://a/b/c/g"},
		{"g?y#s", "http://a/b/c/g?y"},
		{";x", "http://a/b/c/;x"},
		{"g;x", "http://a/b/c/g;x"},
		{"g;x?y#s", "http://a/b/c/g;x?y"},
		{"", "http://a/b/c/d;p?q"},
		{".", "http://a/b/c/"},
		{"./", "http://a/b/c/"},
		{"..", "http://a/b/"},
		{"../", "http://a/b/"},
		{"../g", "http://a/b/g"},
		{"../..", "http://a/"},
		{"../../", "http://a/"},
		{"../../g", "http://a/g"},
		// abnormal
		{"../../../g", "http://a/g"},
		{"../../../../g", "http://a/g"},
		{"/./g", "http://a/g"},
		{"/../g", "http://a/g"},
		{"g.", "http://a/b/c/g."},
		{".g", "http://a/b/c/.g"},
		{"g..", "http://a/b/c/g.."},
		{"..g", "http://a/b/c/..g"},
		{"./../g", "http://a/b/g"},
		{"./g/.", "http://a/b/c/g/"},
		{"g/./h", "http://a/b/c/g/h"},
		{"g/../h", "http://a/b/c/h"},
		{"g;x=1/./y", "http://a/b/c/g;x=1/y"},
		{"g;x=1/../y", "http://a/b/c/y"},
		{"g?y/./x", "http://a/b/c/g?y/./x"},
		{"g?y/../x", "http://a/b/c/g?y/../x"},
		{"g#s/./x", "http://a/b/c/g"},
		{"g#s/../x", "http://a/b/c/g"},
		{"http:g", "http://a/b/c/g"},
	}
	for _, tc := range tests {
		t.Run(tc.ref, func(t *testing.T) {
			got, err := Resolve(base, tc.ref)
			if err != nil || got != tc.want {
				t.Fatalf("Resolve(%q) = %q, %v; want %q", tc.ref, got, err, tc.want)
			}
		})
	}
}

func TestHostOrigin(t *testing.T) {
	h, err := Host("http://Example.com:8080/x")
	if err != nil || h != "example.com" {
		t.Fatalf("Host = %q, %v", h, err)
	}
	o, err := Origin("http://example.com:8080/x")
	if err != nil || o != "http://example.com:8080" {
		t.Fatalf("Origin = %q, %v", o, err)
	}
}

func FuzzNormalize(f *testing.F) {
	for _, s := range []string{"http://a/b/../c", "HTTP://X.com:80/%7e?q#f", "https://[::1]:443/", "http://ü.de/ä b", "http://a/%zz%", "http://a/./../."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := Normalize(s)
		if err != nil {
			return
		}
		n2, err := Normalize(n)
		if err != nil {
			t.Fatalf("normal form %q of %q does not normalise: %v", n, s, err)
		}
		if n2 != n {
			t.Fatalf("not idempotent: %q -> %q -> %q", s, n, n2)
		}
	})
}
