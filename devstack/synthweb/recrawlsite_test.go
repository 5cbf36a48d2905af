package synthweb

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"
)

// TestRecrawlSite: each page behaves as its path promises.
func TestRecrawlSite(t *testing.T) {
	s, err := StartRecrawlSite(context.Background(), RecrawlConfig{Addr: "127.0.9.2", Change: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	get := func(path string, h map[string]string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, s.Origin()+path, nil)
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	lm := recrawlModified.Format(http.TimeFormat)
	for _, tc := range []struct {
		name, path string
		header     map[string]string
		status     int
	}{
		{"etag without validators", RecrawlETag, nil, 200},
		{"etag matched", RecrawlETag, map[string]string{"If-None-Match": `"etag-1"`}, 304},
		{"etag not matched", RecrawlETag, map[string]string{"If-None-Match": `"other"`}, 200},
		{"last-modified matched", RecrawlLastModified, map[string]string{"If-Modified-Since": lm}, 304},
		{"last-modified older", RecrawlLastModified, map[string]string{"If-Modified-Since": recrawlModified.Add(-time.Hour).Format(http.TimeFormat)}, 200},
		{"ignores validators", RecrawlIgnores, map[string]string{"If-None-Match": "*"}, 200},
		{"static", RecrawlStatic, map[string]string{"If-None-Match": "*"}, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := get(tc.path, tc.header)
			if resp.StatusCode != tc.status || (tc.status == 304) != (body == "") {
				t.Fatalf("status %d, %d body bytes; want %d", resp.StatusCode, len(body), tc.status)
			}
		})
	}
	_, a := get(RecrawlChanging, nil)
	_, b := get(RecrawlChanging, nil)
	if a != b || s.Version(time.Now()) != 0 {
		t.Fatal("the changing page changed within its period")
	}
	if n := len(s.Requests()); n != 9 || s.Requests()[1].IfNoneMatch != `"etag-1"` {
		t.Fatalf("request log %+v", s.Requests())
	}
}
