package docsweb

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/warccheck"
)

// unitSite is testdata/unit, with testdata/robots/unit.txt.
var unitSite = Site{Name: "unit", Root: "testdata/unit"}

func TestExpected(t *testing.T) {
	pages, err := Expected(unitSite)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for p := range pages {
		got = append(got, p)
	}
	slices.Sort(got)
	// Not: /private/p.html (robots.txt), /nofollow.html (rel=nofollow), /hidden.html (on a
	// nofollow page), /notes.txt (not HTML), /missing.html (no file), elsewhere.test.
	want := []string{"/", "/a.html", "/b.html?x=1", "/c.html", "/stop.html", "/sub/", "/sub/index.html"}
	if !slices.Equal(got, want) {
		t.Fatalf("expected pages %q, want %q", got, want)
	}
	if from := pages["/c.html"].From; from != "/sub/" {
		t.Errorf("/c.html found from %q, want /sub/", from)
	}
}

func TestDisallowed(t *testing.T) {
	for _, s := range append(slices.Clone(Sites), unitSite) {
		if _, err := s.Disallowed(); err != nil {
			t.Errorf("%s: %v", s.Name, err)
		}
	}
	bad := Site{Name: "bad"}
	if _, err := bad.Disallowed(); err == nil {
		t.Error("a site with no robots.txt in testdata: no error")
	}
}

func TestParseLog(t *testing.T) {
	line := `{"msec":1764136263.323,"request_time":0.012,"host":"python.docs.test","addr":"127.0.0.2","port":36425,"method":"GET","uri":"/library/os%2Epath.html?x=%41","status":200,"bytes":52000,"type":"text/html","encoding":"gzip","agent":"trawl","conn":3,"conn_requests":2}`
	es, err := ParseLog([]byte(line + "\n\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 1 {
		t.Fatalf("%d entries, want 1", len(es))
	}
	e := es[0]
	if got := e.End.Sub(e.Start); got != 12*time.Millisecond {
		t.Errorf("request took %s, want 12ms", got)
	}
	if want := time.UnixMilli(1764136263323); !e.End.Equal(want) {
		t.Errorf("end %s, want %s", e.End, want)
	}
	if e.Key() != "python.docs.test/library/os.path.html?x=%41" || e.Path() != "/library/os.path.html" {
		t.Errorf("key %q path %q", e.Key(), e.Path())
	}
	if e.Encoding != "gzip" || e.Bytes != 52000 || e.ConnRequests != 2 {
		t.Errorf("entry %+v", e)
	}
	_, err = ParseLog([]byte(line + "\n127.0.0.1 - - [26/Nov/2026] \"GET / HTTP/1.1\" 200\n"))
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("a line in another format: error %v, want one naming line 2", err)
	}
}

// correctCrawl is a log of a right crawl of the unit site: robots.txt, then every expected
// page and two links that are not pages, 200 ms apart.
func correctCrawl(t *testing.T) []Entry {
	t.Helper()
	host := unitSite.Host()
	at := time.UnixMilli(1764136263000)
	var out []Entry
	add := func(uri string, status int) {
		out = append(out, Entry{Start: at, End: at.Add(5 * time.Millisecond), Host: host, Addr: "127.0.0.2", URI: uri, Status: status})
		at = at.Add(200 * time.Millisecond)
	}
	add(RobotsPath, 200)
	for _, p := range []string{"/", "/a.html", "/sub/", "/notes.txt", "/b.html?x=1", "/stop.html", "/sub/index.html", "/c.html"} {
		add(p, 200)
	}
	add("/missing.html", 404)
	return out
}

func TestJudge(t *testing.T) {
	rules := Rules{MinDelay: 100 * time.Millisecond, Tolerance: 5 * time.Millisecond}
	tests := []struct {
		name   string
		change func([]Entry) []Entry
		want   []string // substrings, one per problem; none = a right crawl
	}{
		{name: "right", change: func(es []Entry) []Entry { return es }},
		{name: "gap short by less than the tolerance", change: func(es []Entry) []Entry {
			es[2].Start = es[1].End.Add(97 * time.Millisecond)
			return es
		}},
		{name: "a page fetched twice", change: func(es []Entry) []Entry {
			e := es[len(es)-1]
			e.URI, e.Status = "/a.html", 200
			e.Start, e.End = e.Start.Add(time.Second), e.End.Add(time.Second)
			return append(es, e)
		}, want: []string{"fetched 2 times, want once: unit.docs.test/a.html"}},
		{name: "a page never fetched", change: func(es []Entry) []Entry {
			return slices.DeleteFunc(es, func(e Entry) bool { return e.URI == "/c.html" })
		}, want: []string{"never fetched: unit.docs.test/c.html, linked from /sub/"}},
		{name: "the seed never fetched", change: func(es []Entry) []Entry {
			return slices.DeleteFunc(es, func(e Entry) bool { return e.URI == "/" })
		}, want: []string{"never fetched: unit.docs.test/, the seed"}},
		{name: "a page answered 404", change: func(es []Entry) []Entry {
			es[2].Status = 404
			return es
		}, want: []string{"answered 404, want 200: unit.docs.test/a.html"}},
		{name: "a disallowed path requested", change: func(es []Entry) []Entry {
			es[len(es)-1].URI = "/private/p.html"
			return es
		}, want: []string{"robots.txt disallows it, yet requested: unit.docs.test/private/p.html"}},
		{name: "robots.txt twice", change: func(es []Entry) []Entry {
			es[len(es)-1].URI = RobotsPath
			return es
		}, want: []string{"robots.txt of unit.docs.test requested 2 times, want once"}},
		{name: "another host", change: func(es []Entry) []Entry {
			es[len(es)-1].Host = "elsewhere.test"
			return es
		}, want: []string{"request for a host not served: elsewhere.test /missing.html"}},
		{name: "two requests at once", change: func(es []Entry) []Entry {
			es[3].Start = es[2].End.Add(-time.Millisecond)
			return es
		}, want: []string{"politeness: overlapping requests: host unit.docs.test: /a.html", "politeness: requests too close: host unit.docs.test: /a.html"}},
		{name: "a gap below the delay", change: func(es []Entry) []Entry {
			es[4].Start = es[3].End.Add(90 * time.Millisecond)
			return es
		}, want: []string{"politeness: requests too close: host unit.docs.test: /sub/ [" + es3(t) + " .. "}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			problems, err := Judge(tc.change(correctCrawl(t)), []Site{unitSite}, rules)
			if err != nil {
				t.Fatal(err)
			}
			if len(problems) != len(tc.want) {
				t.Fatalf("problems %q, want %d: %q", problems, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(problems[i], w) {
					t.Errorf("problem %q lacks %q", problems[i], w)
				}
			}
		})
	}
}

// es3 is how a violation names the start of the fourth request of correctCrawl.
func es3(t *testing.T) string { return correctCrawl(t)[3].Start.Format("15:04:05.000000") }

func capture(t *testing.T, uri string, status int, encoding string, body []byte) *warccheck.Record {
	t.Helper()
	head := fmt.Sprintf("HTTP/1.1 %d X\r\nContent-Type: text/html\r\n", status)
	if encoding == "gzip" {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		zw.Write(body)
		zw.Close()
		body = b.Bytes()
		head += "Content-Encoding: gzip\r\n"
	}
	return &warccheck.Record{File: "t.warc.gz", Fields: []warccheck.Field{
		{Name: "WARC-Type", Value: "response"}, {Name: "WARC-Target-URI", Value: "http://unit.docs.test:8080" + uri},
	}, Block: append([]byte(head+"\r\n"), body...)}
}

func TestJudgeArchive(t *testing.T) {
	file := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(unitSite.Root, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	entries := []Entry{
		{Host: unitSite.Host(), URI: RobotsPath, Status: 200},
		{Host: unitSite.Host(), URI: "/a.html", Status: 200, Encoding: "gzip"},
		{Host: unitSite.Host(), URI: "/b.html?x=1", Status: 200},
		{Host: unitSite.Host(), URI: "/missing.html", Status: 404},
	}
	right := func() []*warccheck.Record {
		return []*warccheck.Record{
			capture(t, "/a.html", 200, "gzip", file("a.html")),
			capture(t, "/b.html?x=1", 200, "", file("b.html")),
			capture(t, "/missing.html", 404, "", []byte("not found")),
		}
	}
	tests := []struct {
		name   string
		change func([]*warccheck.Record) []*warccheck.Record
		want   string // "" = no problem
	}{
		{name: "right", change: func(r []*warccheck.Record) []*warccheck.Record { return r }},
		{name: "a response not archived", change: func(r []*warccheck.Record) []*warccheck.Record { return r[1:] },
			want: "unit.docs.test/a.html: 0 capture(s) of 1 response(s)"},
		{name: "archived twice", change: func(r []*warccheck.Record) []*warccheck.Record { return append(r, r[2]) },
			want: "unit.docs.test/missing.html: 2 capture(s) of 1 response(s)"},
		{name: "other octets", change: func(r []*warccheck.Record) []*warccheck.Record {
			r[0] = capture(t, "/a.html", 200, "gzip", file("c.html"))
			return r
		}, want: "unit.docs.test/a.html: archived payload decodes to"},
		{name: "content coding lost", change: func(r []*warccheck.Record) []*warccheck.Record {
			r[0] = capture(t, "/a.html", 200, "", file("a.html"))
			return r
		}, want: `unit.docs.test/a.html: archived Content-Encoding "", nginx sent "gzip"`},
		{name: "other status", change: func(r []*warccheck.Record) []*warccheck.Record {
			r[2] = capture(t, "/missing.html", 200, "", nil)
			return r
		}, want: "unit.docs.test/missing.html: archived status 200, nginx logged 404"},
		{name: "archived, never served", change: func(r []*warccheck.Record) []*warccheck.Record {
			return append(r, capture(t, "/c.html", 200, "", file("c.html")))
		}, want: "unit.docs.test/c.html: 1 capture(s), nginx never served it"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			problems := JudgeArchive(entries, []Site{unitSite}, &warccheck.Archive{Records: tc.change(right())})
			switch {
			case tc.want == "" && len(problems) != 0:
				t.Fatalf("problems %q, want none", problems)
			case tc.want != "" && (len(problems) != 1 || !strings.Contains(problems[0], tc.want)):
				t.Fatalf("problems %q, want one with %q", problems, tc.want)
			}
		})
	}
}

func TestSummary(t *testing.T) {
	es := correctCrawl(t)
	es = append(es, es[2])
	got := Summary(es, []Site{unitSite}, es[len(es)-1].End.Add(time.Second))
	for _, want := range []string{"nginx served 11 requests", "unit.docs.test: 11 requests of 10 URLs", "status 10×200 1×404", "closest gap -5ms", "2× unit.docs.test/a.html"} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
}
