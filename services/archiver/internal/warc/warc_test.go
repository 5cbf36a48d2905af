package warc

import (
	"sort"
	"testing"
	"time"
)

func TestSURT(t *testing.T) {
	cases := []struct{ in, want string }{
		{"http://www.Example.com/a?b=2&a=1", "com,example)/a?a=1&b=2"},
		{"https://example.com/", "com,example)/"},
		{"http://a.b.example.org:8080/P/Q", "org,example,b,a:8080)/p/q"},
		{"https://example.com:443/x", "com,example)/x"},
		{"http://127.0.0.1:9000/p/1", "127.0.0.1:9000)/p/1"},
		{"http://example.com", "com,example)/"},
		{"http://[2001:db8::1]/", "[2001:db8::1])/"},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			if got := SURT(c.in); got != c.want {
				t.Errorf("SURT(%q) = %q, want %q", c.in, got, c.want)
			}
		})
	}
}

// File names sort by the time their file was begun, whatever the serial and id.
func TestFileNamesSortByTime(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 23, 59, 59, 999e6, time.UTC)
	names := []string{
		FileName(t0.Add(2*time.Millisecond), 1, "a"),
		FileName(t0, 99999, "z"),
		FileName(t0.Add(time.Millisecond), 100000, "b"),
	}
	want := []string{names[1], names[2], names[0]}
	sort.Strings(names)
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("sorted %v, want %v", names, want)
		}
	}
	if names[1] != "TRAWL-20261124000000000-100000-b.warc.gz" {
		t.Errorf("name %q", names[1])
	}
	if m := nameRE.FindStringSubmatch(names[1] + openSuffix); m == nil || m[2] != "100000" || m[3] != "b" {
		t.Errorf("open name not recognised: %v", m)
	}
}

func TestParseHead(t *testing.T) {
	cases := []struct {
		head   string
		status int
		mt     string
	}{
		{"HTTP/1.1 200 OK\r\ncontent-type: Text/HTML; charset=utf-8\r\n\r\n", 200, "text/html"},
		{"HTTP/1.1 304 Not Modified\r\n\r\n", 304, ""},
		{"HTTP/1.0 404\nContent-Type: text/plain\n\n", 404, "text/plain"},
	}
	for _, c := range cases {
		status, mt := ParseHead([]byte(c.head))
		if status != c.status || mt != c.mt {
			t.Errorf("ParseHead(%q) = %d %q, want %d %q", c.head, status, mt, c.status, c.mt)
		}
	}
}

// Record ids derive from the message: the same page written again gets the same ids.
func TestRecordIDStable(t *testing.T) {
	a, b := RecordID("CRAWL_PAGES:7:abc/response"), RecordID("CRAWL_PAGES:7:abc/response")
	if a != b || a == RecordID("CRAWL_PAGES:7:abc/request") || len(a) != len("<urn:uuid:>")+36 || a[len("<urn:uuid:")+14] != '5' {
		t.Errorf("ids %s %s", a, b)
	}
}
