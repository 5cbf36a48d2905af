// Package sitemap reads sitemaps (sitemaps.org protocol 0.9): a <urlset> of page URLs, a
// <sitemapindex> of further sitemaps, or a text sitemap of one URL per line, gzipped or not.
//
// It is Trawl's own rather than a library's: the Go packages found either fetch over HTTP
// themselves (the crawler must fetch through its frontier, politely), drop <priority>, or
// are unmaintained; a streaming encoding/xml reader with the protocol's limits is short.
//
// Parse never panics on its input and never reads past the protocol's limits: at most
// MaxURLs entries and MaxBytes of uncompressed sitemap. What it read before a limit or an
// error is returned with it, so a sitemap cut short still yields its first URLs.
package sitemap

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The protocol's limits per sitemap file.
const (
	MaxURLs  = 50000
	MaxBytes = 50 << 20
)

// Format is what kind of sitemap a file is.
type Format string

const (
	URLSet Format = "urlset"       // lists pages
	Index  Format = "sitemapindex" // lists sitemaps
	Text   Format = "text"         // lists pages, one URL per line
)

// Namespaces a sitemap root may carry. The protocol's own, and Google's earlier ones,
// which old generators still write; no namespace at all is read too, as search engines do.
var namespaces = map[string]bool{
	"": true,
	"http://www.sitemaps.org/schemas/sitemap/0.9":  true,
	"https://www.sitemaps.org/schemas/sitemap/0.9": true,
	"http://www.google.com/schemas/sitemap/0.9":    true,
	"http://www.google.com/schemas/sitemap/0.84":   true,
	"http://www.google.com/schemas/sitemap/0.90":   true,
}

// Error kinds: the label of the parser's sitemap error counter.
var (
	ErrGzip      = errors.New("sitemap: bad gzip stream")
	ErrSyntax    = errors.New("sitemap: malformed XML")
	ErrRoot      = errors.New("sitemap: root element is neither urlset nor sitemapindex")
	ErrNamespace = errors.New("sitemap: root element in an unknown namespace")
	ErrEncoding  = errors.New("sitemap: text sitemap is not UTF-8")
)

// Kind is the short name of err's kind (gzip, syntax, root, namespace, encoding), or
// "other".
func Kind(err error) string {
	switch {
	case errors.Is(err, ErrGzip):
		return "gzip"
	case errors.Is(err, ErrSyntax):
		return "syntax"
	case errors.Is(err, ErrRoot):
		return "root"
	case errors.Is(err, ErrNamespace):
		return "namespace"
	case errors.Is(err, ErrEncoding):
		return "encoding"
	}
	return "other"
}

// Kinds lists every Kind (to initialise metric series).
var Kinds = []string{"gzip", "syntax", "root", "namespace", "encoding"}

// Entry is one <url> or <sitemap> entry (or one line of a text sitemap).
type Entry struct {
	Loc string // as written, spaces trimmed; the caller resolves and normalises it
	// Lastmod is <lastmod> in unix seconds, 0 when absent or not a W3C datetime.
	Lastmod int64
	// Priority is <priority>, nil when absent or outside 0..1.
	Priority *float64
}

// Limit names the limit a sitemap was cut at.
type Limit string

const (
	LimitURLs  Limit = "urls"
	LimitBytes Limit = "bytes"
)

// Result is what Parse read.
type Result struct {
	Format  Format
	Entries []Entry
	Gzip    bool  // the body was a gzip stream
	Cut     Limit // set when a limit stopped the reading
	// BadDates and BadPriorities count values that were present but unreadable (the entry
	// is kept without them).
	BadDates, BadPriorities int
}

// Options bound a parse; zero fields take the protocol's limits, larger ones are lowered
// to them.
type Options struct {
	MaxURLs  int
	MaxBytes int64
}

func (o Options) limits() (int, int64) {
	n, b := o.MaxURLs, o.MaxBytes
	if n <= 0 || n > MaxURLs {
		n = MaxURLs
	}
	if b <= 0 || b > MaxBytes {
		b = MaxBytes
	}
	return n, b
}

// gzipMagic opens every gzip stream (RFC 1952). The body is sniffed rather than trusted
// by its content type or name: servers send .xml.gz as application/gzip, application/
// x-gzip, application/octet-stream or with Content-Encoding: gzip (which the fetcher has
// already decoded), and the magic bytes tell each case apart.
var gzipMagic = []byte{0x1f, 0x8b}

// Parse reads one sitemap file. The error, when not nil, wraps one of the Err values and
// comes with what was read before it.
func Parse(body []byte, o Options) (*Result, error) {
	maxURLs, maxBytes := o.limits()
	res := &Result{}
	var r io.Reader = bytes.NewReader(body)
	if bytes.HasPrefix(body, gzipMagic) {
		res.Gzip = true
		zr, err := gzip.NewReader(r)
		if err != nil {
			return res, fmt.Errorf("%w: %v", ErrGzip, err)
		}
		r = gzReader{zr}
	}
	lr := &limitReader{r: r, left: maxBytes}
	br := bufio.NewReaderSize(lr, 64<<10)
	text, err := isText(br)
	if err != nil {
		return res, wrapRead(err)
	}
	if text {
		res.Format = Text
		err = parseText(br, res, maxURLs)
	} else {
		err = parseXML(br, res, maxURLs)
	}
	if lr.cut && res.Cut == "" {
		res.Cut = LimitBytes
		// The file goes on past the limit: a syntax error at the cut is the cut itself.
		if errors.Is(err, ErrSyntax) {
			err = nil
		}
	}
	return res, err
}

// wrapRead classifies an error of the byte stream: the gzip layer's, or a cut one.
func wrapRead(err error) error {
	if err == nil || errors.Is(err, errCut) {
		return nil
	}
	var ge gzipErr
	if errors.As(err, &ge) {
		return fmt.Errorf("%w: %v", ErrGzip, ge.error)
	}
	return fmt.Errorf("%w: %v", ErrSyntax, err)
}

// gzipErr marks an error of the gzip layer, so that a corrupt stream is told apart from
// the XML it carries.
type gzipErr struct{ error }

type gzReader struct{ zr *gzip.Reader }

func (g gzReader) Read(p []byte) (int, error) {
	n, err := g.zr.Read(p)
	if err != nil && err != io.EOF {
		err = gzipErr{err}
	}
	return n, err
}

// errCut ends the stream at MaxBytes.
var errCut = errors.New("sitemap: size limit")

// limitReader reads up to left octets, then reports errCut (and cut) if more follow.
type limitReader struct {
	r    io.Reader
	left int64
	cut  bool
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		var one [1]byte
		n, err := l.r.Read(one[:])
		if n > 0 {
			l.cut = true
			return 0, errCut
		}
		if err == nil {
			return 0, nil
		}
		return 0, err
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

// isText reports a body whose first non-blank character (after a BOM) is not '<'.
func isText(br *bufio.Reader) (bool, error) {
	for {
		r, _, err := br.ReadRune()
		if err == io.EOF {
			return false, nil // empty: read as XML, which reports it
		}
		if err != nil {
			return false, err
		}
		switch r {
		case '\ufeff', ' ', '\t', '\r', '\n':
			continue
		}
		return r != '<', br.UnreadRune()
	}
}

// parseText reads a text sitemap: one URL per line, UTF-8, blank lines skipped.
func parseText(br *bufio.Reader, res *Result, maxURLs int) error {
	sc := bufio.NewScanner(br)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		line := strings.TrimSpace(strings.TrimPrefix(sc.Text(), "\ufeff"))
		if line == "" {
			continue
		}
		if !utf8.ValidString(line) {
			return fmt.Errorf("%w: line %d", ErrEncoding, len(res.Entries)+1)
		}
		if len(res.Entries) >= maxURLs {
			res.Cut = LimitURLs
			return nil
		}
		res.Entries = append(res.Entries, Entry{Loc: line})
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("%w: a line longer than 64 KiB", ErrSyntax)
		}
		return wrapRead(err)
	}
	return nil
}

// parseXML streams the document: only the root, its entries and their loc, lastmod and
// priority children are kept; elements of other namespaces (image, video, news, xhtml
// extensions) are skipped.
func parseXML(br *bufio.Reader, res *Result, maxURLs int) error {
	d := xml.NewDecoder(br)
	// Sitemaps must be UTF-8; a declared other charset is read as is rather than refused
	// (URLs are ASCII in practice).
	d.CharsetReader = func(_ string, in io.Reader) (io.Reader, error) { return in, nil }
	root, err := nextStart(d)
	if err != nil {
		return err
	}
	switch root.Name.Local {
	case "urlset":
		res.Format = URLSet
	case "sitemapindex":
		res.Format = Index
	default:
		return fmt.Errorf("%w: <%s>", ErrRoot, root.Name.Local)
	}
	if !namespaces[root.Name.Space] {
		return fmt.Errorf("%w: %q", ErrNamespace, root.Name.Space)
	}
	entryName := "url"
	if res.Format == Index {
		entryName = "sitemap"
	}
	for {
		tok, err := d.Token()
		if err != nil {
			if err == io.EOF {
				return fmt.Errorf("%w: <%s> not closed", ErrSyntax, root.Name.Local)
			}
			return xmlErr(err)
		}
		switch t := tok.(type) {
		case xml.EndElement:
			return nil // the root's end: nothing after it is read
		case xml.StartElement:
			if t.Name.Local != entryName || t.Name.Space != root.Name.Space {
				if err := d.Skip(); err != nil {
					return xmlErr(err)
				}
				continue
			}
			if len(res.Entries) >= maxURLs {
				res.Cut = LimitURLs
				return nil
			}
			e, err := readEntry(d, root.Name.Space, res)
			if err != nil {
				return err
			}
			if e.Loc != "" {
				res.Entries = append(res.Entries, e)
			}
		}
	}
}

// nextStart returns the first start element, skipping the prolog.
func nextStart(d *xml.Decoder) (xml.StartElement, error) {
	for {
		tok, err := d.Token()
		if err != nil {
			if err == io.EOF {
				return xml.StartElement{}, fmt.Errorf("%w: no root element", ErrSyntax)
			}
			return xml.StartElement{}, xmlErr(err)
		}
		if s, ok := tok.(xml.StartElement); ok {
			return s, nil
		}
	}
}

// xmlErr classifies a decoder error: a gzip stream that broke mid-way, a cut, or XML.
func xmlErr(err error) error {
	if errors.Is(err, errCut) {
		return fmt.Errorf("%w: %v", ErrSyntax, err) // Parse forgives it when the cut is known
	}
	var se *xml.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("%w: line %d: %s", ErrSyntax, se.Line, se.Msg)
	}
	return wrapRead(err)
}

// maxField bounds the text of one loc, lastmod or priority (a URL beyond it is no URL
// the crawler follows).
const maxField = 16 << 10

// readEntry reads one <url> or <sitemap> element after its start.
func readEntry(d *xml.Decoder, space string, res *Result) (Entry, error) {
	var e Entry
	for {
		tok, err := d.Token()
		if err != nil {
			return e, xmlErr(err)
		}
		switch t := tok.(type) {
		case xml.EndElement:
			return e, nil
		case xml.StartElement:
			if t.Name.Space != space {
				if err := d.Skip(); err != nil {
					return e, xmlErr(err)
				}
				continue
			}
			switch t.Name.Local {
			case "loc", "lastmod", "priority":
			default:
				if err := d.Skip(); err != nil {
					return e, xmlErr(err)
				}
				continue
			}
			v, err := text(d)
			if err != nil {
				return e, err
			}
			switch t.Name.Local {
			case "loc":
				e.Loc = v
			case "lastmod":
				if e.Lastmod, err = ParseLastmod(v); err != nil {
					res.BadDates++
				}
			case "priority":
				p, err := strconv.ParseFloat(v, 64)
				if err != nil || p < 0 || p > 1 {
					res.BadPriorities++
					continue
				}
				e.Priority = &p
			}
		}
	}
}

// text reads the character data of a simple element up to its end, trimmed.
func text(d *xml.Decoder) (string, error) {
	var b strings.Builder
	for {
		tok, err := d.Token()
		if err != nil {
			return "", xmlErr(err)
		}
		switch t := tok.(type) {
		case xml.CharData:
			if b.Len()+len(t) <= maxField {
				b.Write(t)
			}
		case xml.StartElement:
			if err := d.Skip(); err != nil {
				return "", xmlErr(err)
			}
		case xml.EndElement:
			return strings.TrimSpace(b.String()), nil
		}
	}
}

// w3cLayouts are the W3C datetime profile's forms (https://www.w3.org/TR/NOTE-datetime)
// the protocol names for lastmod, longest first.
var w3cLayouts = []string{
	time.RFC3339Nano,         // YYYY-MM-DDThh:mm:ss.sTZD
	"2006-01-02T15:04Z07:00", // YYYY-MM-DDThh:mmTZD
	"2006-01-02",
	"2006-01",
	"2006",
}

// lenientLayouts are common departures from the profile: a time without a zone (read as
// UTC) and a space instead of the T.
var lenientLayouts = []string{
	"2006-01-02T15:04:05",
	"2006-01-02T15:04",
	"2006-01-02 15:04:05Z07:00",
	"2006-01-02 15:04:05",
}

// ParseLastmod reads a lastmod value into unix seconds. Dates without a time are the
// start of that day (month, year) in UTC.
func ParseLastmod(v string) (int64, error) {
	for _, l := range w3cLayouts {
		if t, err := time.Parse(l, v); err == nil {
			return t.Unix(), nil
		}
	}
	for _, l := range lenientLayouts {
		if t, err := time.ParseInLocation(l, v, time.UTC); err == nil {
			return t.Unix(), nil
		}
	}
	return 0, fmt.Errorf("sitemap: lastmod %q is not a W3C datetime", v)
}
