package crawlmsg

import (
	stdjson "encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"
)

// Every fetched page's metadata is encoded once on the fetcher's hot path, and a reflective
// encoder spent about 6% of the fetcher's CPU on it. PageMeta is therefore written by
// hand, field by field, to exactly the bytes encoding/json writes for it (pinned by
// TestPageMetaAppenderMatchesEncodingJSON): readers keep decoding it with any JSON decoder.
// A field added to PageMeta, Capture, BodyRef or Recrawl must be added here too; the
// test's reflection check fails until it is.

// metaBufs holds scratch buffers for encoding a PageMeta; the encoded header is copied
// out as one string, so a buffer never escapes.
var metaBufs = sync.Pool{New: func() any { b := make([]byte, 0, 2<<10); return &b }}

// maxPooledMeta keeps a page with a huge header block from pinning its buffer.
const maxPooledMeta = 64 << 10

// pageVersion is the version a page's message is written in: PageCaptureVersion when it
// carries a capture, whose octets then travel in the payload.
func pageVersion(m *PageMeta) int {
	if m.Rendered != nil {
		return PageRenderedVersion
	}
	if m.Capture != nil {
		return PageCaptureVersion
	}
	return Version
}

// encodeMeta stamps the version on m and returns its JSON as a string.
func encodeMeta(m *PageMeta) string {
	m.V = pageVersion(m)
	bp := metaBufs.Get().(*[]byte)
	b := appendPageMeta((*bp)[:0], m)
	s := string(b)
	if cap(b) <= maxPooledMeta {
		*bp = b[:0]
		metaBufs.Put(bp)
	}
	return s
}

func appendPageMeta(b []byte, m *PageMeta) []byte {
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, int64(m.V), 10)
	b = append(b, `,"url":`...)
	b = appendJSONString(b, m.URL)
	b = append(b, `,"host":`...)
	b = appendJSONString(b, m.Host)
	b = append(b, `,"depth":`...)
	b = strconv.AppendInt(b, int64(m.Depth), 10)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(m.Status), 10)
	if len(m.Header) > 0 {
		b = append(b, `,"header":`...)
		b = appendHeader(b, m.Header)
	}
	b = appendOptString(b, `,"content_type":`, m.ContentType)
	b = appendOptString(b, `,"charset":`, m.Charset)
	b = append(b, `,"fetched_at":`...)
	b = strconv.AppendInt(b, m.FetchedAt, 10)
	b = append(b, `,"duration_ms":`...)
	b = strconv.AppendInt(b, m.DurationMs, 10)
	if m.Truncated {
		b = append(b, `,"truncated":true`...)
	}
	if len(m.Redirects) > 0 {
		b = append(b, `,"redirects":`...)
		b = appendStrings(b, m.Redirects)
	}
	b = appendOptString(b, `,"location":`, m.Location)
	b = appendOptInt(b, `,"hops":`, int64(m.Hops))
	b = appendOptString(b, `,"lease":`, m.Lease)
	b = appendOptString(b, `,"kind":`, string(m.Kind))
	b = appendOptInt(b, `,"embeds":`, int64(m.Embeds))
	if m.Recrawl != nil {
		b = append(b, `,"recrawl":`...)
		b = appendRecrawl(b, m.Recrawl)
	}
	b = appendOptString(b, `,"under":`, m.Under)
	if m.BodyRef != nil {
		b = append(b, `,"body_ref":`...)
		b = appendBodyRef(b, m.BodyRef)
	}
	if c := m.Capture; c != nil {
		// The wire form (wireCapture): the heads' lengths, their octets in the payload.
		b = append(b, `,"capture":{`...)
		start := len(b)
		b = appendOptInt(b, `,"request_size":`, headSize(c.Request, c.RequestSize))
		b = appendOptInt(b, `,"response_size":`, headSize(c.Response, c.ResponseSize))
		if c.Verbatim {
			b = append(b, `,"verbatim":true`...)
		}
		b = appendOptString(b, `,"ip":`, c.IP)
		b = appendOptInt(b, `,"raw_size":`, c.RawSize)
		if c.RawRef != nil {
			b = append(b, `,"raw_ref":`...)
			b = appendBodyRef(b, c.RawRef)
		}
		if len(b) > start {
			// Every field was written with a leading comma; the first one's is dropped.
			b = append(b[:start], b[start+1:]...)
		}
		b = append(b, '}')
	}
	if m.Rendered != nil {
		// Rendered pages are few beside fetched ones: the reflective encoder is fine here.
		b = append(b, `,"rendered":`...)
		r, err := stdjson.Marshal(wireRendered(m.Rendered))
		if err != nil {
			// Rendered holds strings, numbers and a map of strings: it always encodes.
			panic(fmt.Sprintf("crawlmsg: encode rendered: %v", err))
		}
		b = append(b, r...)
	}
	return append(b, '}')
}

// headSize is a head's length on the wire: its octets', or, for a capture decoded from the
// metadata alone (no payload to cut them from), the length the metadata gave.
func headSize(head []byte, size int64) int64 {
	if head == nil {
		return size
	}
	return int64(len(head))
}

// wireCapture is c as a version 2 page's metadata carries it: the heads' lengths and not
// their octets, which travel in the payload.
func wireCapture(c *Capture) *Capture {
	w := *c
	w.RequestSize, w.ResponseSize = headSize(c.Request, c.RequestSize), headSize(c.Response, c.ResponseSize)
	w.Request, w.Response = nil, nil
	return &w
}

func appendRecrawl(b []byte, r *Recrawl) []byte {
	b = append(b, '{')
	start := len(b)
	b = appendOptString(b, `,"etag":`, r.ETag)
	b = appendOptString(b, `,"lm":`, r.LastModified)
	b = appendOptString(b, `,"d":`, r.Digest)
	b = appendOptString(b, `,"sh":`, r.SimHash)
	b = append(b, `,"iv":`...)
	b = strconv.AppendInt(b, r.Interval, 10)
	b = appendOptInt(b, `,"g":`, int64(r.Gone))
	b = appendOptInt(b, `,"n":`, int64(r.Fetches))
	b = appendOptInt(b, `,"c":`, int64(r.Changes))
	b = appendOptInt(b, `,"nm":`, int64(r.NotModified))
	b = appendOptInt(b, `,"lf":`, r.LastFetch)
	b = appendOptInt(b, `,"due":`, r.Due)
	// Every field was written with a leading comma; the first one's is dropped.
	b = append(b[:start], b[start+1:]...)
	return append(b, '}')
}

func appendBodyRef(b []byte, r *BodyRef) []byte {
	b = append(b, `{"bucket":`...)
	b = appendJSONString(b, r.Bucket)
	b = append(b, `,"name":`...)
	b = appendJSONString(b, r.Name)
	b = append(b, `,"size":`...)
	b = strconv.AppendInt(b, r.Size, 10)
	return append(b, '}')
}

// appendHeader writes a header map with its keys sorted, as encoding/json does.
func appendHeader(b []byte, h map[string][]string) []byte {
	var small [32]string
	keys := small[:0]
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		b = append(b, ':')
		b = appendStrings(b, h[k])
	}
	return append(b, '}')
}

// appendStrings writes a string slice; nil is null, as encoding/json writes it.
func appendStrings(b []byte, ss []string) []byte {
	if ss == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, s)
	}
	return append(b, ']')
}

func appendOptString(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	b = append(b, key...)
	return appendJSONString(b, s)
}

func appendOptInt(b []byte, key string, n int64) []byte {
	if n == 0 {
		return b
	}
	b = append(b, key...)
	return strconv.AppendInt(b, n, 10)
}

const hexDigits = "0123456789abcdef"

// jsonSafe marks the ASCII octets encoding/json writes as they are (HTML-escaping on:
// '<', '>' and '&' are escaped, as are '"', '\\' and control characters).
var jsonSafe = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = true
	}
	for _, c := range `"\<>&` {
		t[c] = false
	}
	return t
}()

// appendJSONString writes s as encoding/json does: invalid UTF-8 becomes U+FFFD, U+2028
// and U+2029 are escaped, and so are the HTML characters.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if jsonSafe[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
