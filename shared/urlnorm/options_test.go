package urlnorm

import (
	"errors"
	"testing"
)

func TestNormalizeWith(t *testing.T) {
	strip := Options{StripSessionIDs: true}
	sorted := Options{SortQuery: true}
	both := Options{StripSessionIDs: true, SortQuery: true}
	tests := []struct {
		name string
		in   string
		opts Options
		want string
	}{
		{"zero options is Normalize", "HTTP://A.test/x?b=2&a=1&jsessionid=1#f", Options{}, "http://a.test/x?b=2&a=1&jsessionid=1"},
		{"jsessionid path parameter", "http://a.test/shop/cart;jsessionid=0A1B2C3D4E5F?item=7", strip, "http://a.test/shop/cart?item=7"},
		{"path parameter names are case-insensitive", "http://a.test/x;JSESSIONID=ab.node1;v=2/y", strip, "http://a.test/x;v=2/y"},
		{"path parameter in an inner segment", "http://a.test/a;jsessionid=1/b", strip, "http://a.test/a/b"},
		{"path parameter alone", "http://a.test/;jsessionid=1", strip, "http://a.test/"},
		{"stripping exposes a dot segment", "http://a.test/x/..;jsessionid=1/y", strip, "http://a.test/y"},
		{"phpsessid among other parameters", "http://a.test/?lang=en&PHPSESSID=r2t5uvjq435r4q7ib3vtdjq120&page=2", strip, "http://a.test/?lang=en&page=2"},
		{"only parameter: query dropped", "http://a.test/p?sessionid=42", strip, "http://a.test/p"},
		{"session_id, cfid, cftoken", "http://a.test/p?session_id=x&CFID=123&CFTOKEN=456&q=1", strip, "http://a.test/p?q=1"},
		{"ASP session id", "http://a.test/default.asp?ASPSESSIONIDQQGGGNCG=LKJHGFDSAPOIUYTREWQMNBVC&x=1", strip, "http://a.test/default.asp?x=1"},
		{"sid that looks like a token", "http://a.test/p?sid=9f86d081884c7d659a2feaa0c55ad015", strip, "http://a.test/p"},
		{"short sid is kept (section ids)", "http://a.test/p?sid=7", strip, "http://a.test/p?sid=7"},
		{"sid with punctuation is kept", "http://a.test/p?sid=abc-def-ghi-jkl-mno", strip, "http://a.test/p?sid=abc-def-ghi-jkl-mno"},
		{"names that merely contain a session name are kept", "http://a.test/p?mysid=9f86d081884c7d659a2feaa0c55ad015&jsessionidx=1", strip, "http://a.test/p?mysid=9f86d081884c7d659a2feaa0c55ad015&jsessionidx=1"},
		{"utm parameters are not session ids", "http://a.test/p?utm_source=x", strip, "http://a.test/p?utm_source=x"},
		{"untouched query keeps its empty pieces", "http://a.test/p?a=1&&b=2", strip, "http://a.test/p?a=1&&b=2"},
		{"percent-encoded name decoded first", "http://a.test/p?%6Asessionid=1&q=2", strip, "http://a.test/p?q=2"},
		{"sort by name", "http://a.test/p?b=2&c=3&a=1", sorted, "http://a.test/p?a=1&b=2&c=3"},
		{"sort is stable for repeated names", "http://a.test/p?x=2&a=0&x=1", sorted, "http://a.test/p?a=0&x=2&x=1"},
		{"sort drops empty pieces", "http://a.test/p?b=2&&a=1&", sorted, "http://a.test/p?a=1&b=2"},
		{"sort leaves the session id alone", "http://a.test/p?sessionid=1&a=1", sorted, "http://a.test/p?a=1&sessionid=1"},
		{"strip then sort", "http://a.test/p?z=1&jsessionid=2&a=3", both, "http://a.test/p?a=3&z=1"},
		{"no query", "http://a.test/p", both, "http://a.test/p"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NormalizeWith(tt.in, tt.opts)
			if err != nil || got != tt.want {
				t.Fatalf("NormalizeWith(%q, %+v) = %q, %v; want %q", tt.in, tt.opts, got, err, tt.want)
			}
			again, err := NormalizeWith(got, tt.opts)
			if err != nil || again != got {
				t.Fatalf("not idempotent: %q -> %q, %v", got, again, err)
			}
			if n, err := Normalize(got); err != nil || n != got {
				t.Fatalf("result %q is not in normal form: %q, %v", got, n, err)
			}
		})
	}
}

func TestNormalizeWithErrors(t *testing.T) {
	for _, in := range []string{"", "ftp://a.test/;jsessionid=1", "http://exa mple.com/?sid=1"} {
		if _, err := NormalizeWith(in, Options{StripSessionIDs: true, SortQuery: true}); !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrScheme) {
			t.Errorf("NormalizeWith(%q) = %v, want ErrInvalid or ErrScheme", in, err)
		}
	}
}
