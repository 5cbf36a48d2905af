package frontier

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/trawl/trawl/shared/crawlmsg"
)

func TestErrorLine(t *testing.T) {
	long := strings.Repeat("é", 400) // 800 bytes
	for _, tc := range []struct {
		name string
		o    crawlmsg.Outcome
		want string // "" = not logged
	}{
		{"success is not logged", crawlmsg.Outcome{Kind: crawlmsg.OutcomeFetched, Status: 200, Host: "a.example", URL: "http://a.example/"}, ""},
		{"404 is an answer, not an error", crawlmsg.Outcome{Kind: crawlmsg.OutcomeFetched, Status: 404, Host: "a.example"}, ""},
		{"disallowed is not logged", crawlmsg.Outcome{Kind: crawlmsg.OutcomeDisallowed, Host: "a.example"}, ""},
		{"robots is not logged", crawlmsg.Outcome{Kind: crawlmsg.OutcomeRobots, Host: "a.example"}, ""},
		{"5xx", crawlmsg.Outcome{Kind: crawlmsg.OutcomeFetched, Status: 503, Host: "a.example", URL: "http://a.example/x"},
			"fetched\t503\ta.example\thttp://a.example/x\t"},
		{"network error", crawlmsg.Outcome{Kind: crawlmsg.OutcomeError, Host: "a.example", URL: "http://a.example/", Error: "dial tcp: refused"},
			"error\t0\ta.example\thttp://a.example/\tdial tcp: refused"},
		{"blocked", crawlmsg.Outcome{Kind: crawlmsg.OutcomeBlocked, Host: "10.0.0.1", URL: "http://10.0.0.1/", Error: "private address"},
			"blocked\t0\t10.0.0.1\thttp://10.0.0.1/\tprivate address"},
		{"separators and controls blanked", crawlmsg.Outcome{Kind: crawlmsg.OutcomeError, Host: "a\tb", URL: "http://a/\n", Error: "x\ty\r\nz\x00\x7f"},
			"error\t0\ta b\thttp://a/ \tx y  z  "},
		{"invalid UTF-8 replaced", crawlmsg.Outcome{Kind: crawlmsg.OutcomeError, Host: "a", URL: "http://a/", Error: "bad \xff byte"},
			"error\t0\ta\thttp://a/\tbad \uFFFD byte"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, ok := classify(tc.o)
			if !ok {
				t.Fatalf("classify(%+v) failed", tc.o)
			}
			if got := errorLine(tc.o, p); got != tc.want {
				t.Fatalf("errorLine = %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("long fields cut on a character boundary", func(t *testing.T) {
		o := crawlmsg.Outcome{Kind: crawlmsg.OutcomeError, Host: "a", URL: "http://a/" + long, Error: long}
		p, _ := classify(o)
		line := errorLine(o, p)
		f := strings.Split(line, "\t")
		if len(f) != 5 {
			t.Fatalf("%d fields in %q", len(f), line)
		}
		if len(f[3]) > maxLogURL || len(f[3]) < maxLogURL-4 || len(f[4]) > maxLogError || len(f[4]) < maxLogError-4 {
			t.Fatalf("url %d bytes (max %d), error %d bytes (max %d)", len(f[3]), maxLogURL, len(f[4]), maxLogError)
		}
		if !utf8.ValidString(line) {
			t.Fatal("cut inside a character")
		}
	})
}

func TestParseErrorRecord(t *testing.T) {
	for _, tc := range []struct {
		line string
		want ErrorRecord
		ok   bool
	}{
		{"1700000000123\tretry\tfetched\t503\ta.example\thttp://a.example/x\t", ErrorRecord{
			At: time.UnixMilli(1700000000123), Result: "retry", Kind: "fetched", Status: 503, Host: "a.example", URL: "http://a.example/x"}, true},
		{"5\tfailed\terror\t0\th\tu\tcut\tafter a tab", ErrorRecord{
			At: time.UnixMilli(5), Result: "failed", Kind: "error", Host: "h", URL: "u", Error: "cut\tafter a tab"}, true},
		{"x\tretry\tfetched\t503\th\tu\te", ErrorRecord{}, false},
		{"1\tretry\tfetched\tfive\th\tu\te", ErrorRecord{}, false},
		{"1\tretry\tfetched", ErrorRecord{}, false},
		{"", ErrorRecord{}, false},
	} {
		t.Run(tc.line, func(t *testing.T) {
			got, ok := ParseErrorRecord(tc.line)
			if ok != tc.ok || got != tc.want {
				t.Fatalf("ParseErrorRecord = %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
