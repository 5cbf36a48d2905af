package wacz

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/textproto"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/net/html"

	"github.com/trawl/trawl/shared/contentcoding"
)

// titleScan is how much of a page's content is read looking for its <title>.
const titleScan = 256 << 10

// indexLine is the part of a CDXJ line's JSON a page is made from.
type indexLine struct {
	URL      string `json:"url"`
	Mime     string `json:"mime"`
	Status   string `json:"status"`
	Offset   string `json:"offset"`
	Length   string `json:"length"`
	Filename string `json:"filename"`
}

// ParseLine splits a CDXJ line into its key, 14-digit timestamp and JSON.
func ParseLine(l string) (key, ts, js string, err error) {
	key, rest, ok := strings.Cut(l, " ")
	if !ok {
		return "", "", "", fmt.Errorf("wacz: CDXJ line without timestamp: %.80q", l)
	}
	ts, js, ok = strings.Cut(rest, " ")
	if !ok || !strings.HasPrefix(js, "{") {
		return "", "", "", fmt.Errorf("wacz: CDXJ line without JSON: %.80q", l)
	}
	return key, ts, js, nil
}

// findPages makes a page of the first capture of every URL fetched whole as HTML with
// status 200 (a replay tool's entry points: Browsertrix lists the pages it crawled, not
// their requisites), in the order of the sorted index; its ts is the record's WARC-Date,
// its title the document's <title> when it has one.
func findPages(ctx context.Context, files map[string]string, lines []string) ([]Page, error) {
	var pages []Page
	seen := map[string]bool{}
	for _, l := range lines {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("wacz: %w", err)
		}
		_, _, js, err := ParseLine(l)
		if err != nil {
			return nil, err
		}
		var e indexLine
		if err := json.Unmarshal([]byte(js), &e); err != nil {
			return nil, fmt.Errorf("wacz: CDXJ line %.80q: %w", l, err)
		}
		mt, _, _ := mime.ParseMediaType(e.Mime)
		if e.Status != "200" || (mt != "text/html" && mt != "application/xhtml+xml") || seen[e.URL] ||
			!(strings.HasPrefix(e.URL, "http://") || strings.HasPrefix(e.URL, "https://")) {
			continue
		}
		path, ok := files[e.Filename]
		if !ok {
			return nil, fmt.Errorf("wacz: the index names %s, which is not among the files packaged", e.Filename)
		}
		off, err1 := strconv.ParseInt(e.Offset, 10, 64)
		n, err2 := strconv.ParseInt(e.Length, 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("wacz: CDXJ line %.80q: bad offset or length", l)
		}
		date, title, err := readPage(path, off, n)
		if err != nil {
			return nil, fmt.Errorf("wacz: %s at %d: %w", e.Filename, off, err)
		}
		seen[e.URL] = true
		id := sha256.Sum256([]byte(e.Filename + "#" + e.Offset))
		pages = append(pages, Page{ID: hex.EncodeToString(id[:16]), URL: e.URL,
			TS: date.UTC().Format("2006-01-02T15:04:05.000Z"), Title: title})
	}
	return pages, nil
}

// readPage reads the response record whose gzip member is at off (n octets) in the file at
// path: its WARC-Date and the title of the HTML it holds.
func readPage(path string, off, n int64) (time.Time, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return time.Time{}, "", err
	}
	defer f.Close()
	zr, err := gzip.NewReader(io.NewSectionReader(f, off, n))
	if err != nil {
		return time.Time{}, "", fmt.Errorf("record member: %w", err)
	}
	zr.Multistream(false)
	br := bufio.NewReader(zr)
	if _, err := br.ReadString('\n'); err != nil { // WARC/1.1
		return time.Time{}, "", fmt.Errorf("record version line: %w", err)
	}
	tp := textproto.NewReader(br)
	wh, err := tp.ReadMIMEHeader()
	if err != nil {
		return time.Time{}, "", fmt.Errorf("record header: %w", err)
	}
	date, err := time.Parse(time.RFC3339Nano, wh.Get("WARC-Date"))
	if err != nil {
		return time.Time{}, "", fmt.Errorf("WARC-Date: %w", err)
	}
	// The HTTP head is read as fields, not by net/http: a "Transfer-Encoding: chunked"
	// line may precede a body stored de-chunked.
	if _, err := br.ReadString('\n'); err != nil { // status line
		return date, "", nil
	}
	hh, err := tp.ReadMIMEHeader()
	if err != nil {
		return date, "", nil //nolint:nilerr // a page without a readable head still is a page, untitled
	}
	codings, err := contentcoding.Codings(contentcoding.Header(hh))
	if err != nil {
		return date, "", nil //nolint:nilerr // an unknown coding leaves the title unknown
	}
	body, release, err := contentcoding.NewReader(br, codings)
	if err != nil {
		return date, "", nil //nolint:nilerr
	}
	defer release()
	return date, htmlTitle(io.LimitReader(body, titleScan)), nil
}

// htmlTitle is the text of the first <title> of r, spaces collapsed; "" when there is none
// before <body>.
func htmlTitle(r io.Reader) string {
	z := html.NewTokenizer(r)
	for {
		switch z.Next() {
		case html.ErrorToken:
			return ""
		case html.StartTagToken:
			name, _ := z.TagName()
			switch string(name) {
			case "body":
				return ""
			case "title":
				var b strings.Builder
				for z.Next() == html.TextToken {
					b.Write(z.Text())
				}
				t := strings.Join(strings.Fields(b.String()), " ")
				if !utf8.ValidString(t) {
					t = strings.ToValidUTF8(t, "\uFFFD")
				}
				return t
			}
		}
	}
}
