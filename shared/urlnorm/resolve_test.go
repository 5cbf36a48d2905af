package urlnorm

import (
	"errors"
	"net/url"
	"testing"
)

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

// TestResolveBrowserForms: references read as a browser reads an href.
func TestResolveBrowserForms(t *testing.T) {
	base, _ := url.Parse("http://a.test/b/c")
	tests := []struct{ ref, want string }{
		{"http:g", "http://a.test/b/g"},
		{"http:/g", "http://a.test/g"},
		{"HTTP://g.test/x", "http://g.test/x"},
		{"https:g.test/x", "https://g.test/x"}, // another scheme: absolute, slashes optional
		{`\g`, "http://a.test/g"},
		{`\\g.test\x`, "http://g.test/x"},
		{":g", "http://a.test/b/:g"},
		{"g:h?x", ""},
		{"[x]:1", "http://a.test/b/%5Bx%5D:1"},
		{" \x00g\x1f ", "http://a.test/b/g"},
		{"g#frag<>", "http://a.test/b/g"},
		{"////g.test/x", "http://g.test/x"},
		{"//", "!"}, // no host: invalid, not the base
		{`\\\`, "!"},
	}
	for _, tc := range tests {
		t.Run(tc.ref, func(t *testing.T) {
			got, err := Resolve(base, tc.ref)
			switch tc.want {
			case "":
				if !errors.Is(err, ErrScheme) {
					t.Fatalf("Resolve(%q) = %q, %v; want ErrScheme", tc.ref, got, err)
				}
				return
			case "!":
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("Resolve(%q) = %q, %v; want ErrInvalid", tc.ref, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Resolve(%q) = %q, %v; want %q", tc.ref, got, err, tc.want)
			}
		})
	}
}

// FuzzResolve: resolving any href against an http base never panics, and what it gives is
// in normal form (the parser feeds it every href of every page).
func FuzzResolve(f *testing.F) {
	for _, s := range []string{"g", "../g?x#y", "//h.test/x", `\\h\x`, "http:g", "https:h.test", ":x", "[a]:b", "?", "#f", " \x00//h/%zz\x7f "} {
		f.Add(s)
	}
	base, _ := url.Parse("http://a.test/b/c;p?q")
	f.Fuzz(func(t *testing.T, ref string) {
		got, err := Resolve(base, ref)
		if err != nil {
			return
		}
		if n, err := Normalize(got); err != nil || n != got {
			t.Fatalf("Resolve(%q) = %q, not in normal form: %q, %v", ref, got, n, err)
		}
	})
}
