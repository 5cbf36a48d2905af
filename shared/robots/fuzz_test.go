package robots

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FuzzParse: any robots.txt body and path is decided without panicking, and the cached
// form of the entry decides every path exactly as the parsed file does.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.txt"))
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "/example/page.html")
	}
	f.Add([]byte("user-agent: *\ndisallow: /a*b$\nallow: /a%2Fb\n"), "/a/x/b")
	f.Add([]byte("\xef\xbb\xbfUser-agent: trawl\r\nDisallow: /%zz*$$\r"), "/%zz$")
	f.Fuzz(func(t *testing.T, body []byte, path string) {
		if len(path) == 0 || path[0] != '/' {
			path = "/" + path
		}
		full := Parse(body, DefaultMaxBytes)
		e := NewEntry("trawl", 200, body, DefaultMaxBytes, time.UnixMilli(0))
		raw, err := e.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		dec, err := UnmarshalEntry(raw)
		if err != nil {
			t.Fatalf("cached form unreadable: %v\n%q", err, raw)
		}
		want := full.Allowed("trawl", path)
		if got := e.Decide(path); got.Allowed != want {
			t.Errorf("entry says %v, file says %v", got.Allowed, want)
		}
		if got := dec.Decide(path); got.Allowed != want || got.CrawlDelay != full.CrawlDelay("trawl") {
			t.Errorf("cached entry says %+v, file says %v (delay %v)\n%q", got, want, full.CrawlDelay("trawl"), raw)
		}
	})
}
