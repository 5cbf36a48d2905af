package warc

import (
	"time"
)

// TypeResource is the WARC type of a record whose block is a resource Trawl itself made
// rather than an HTTP exchange: a rendered page's DOM.
const TypeResource = "resource"

// DOMPrefix starts the WARC-Target-URI of a rendered page's DOM: "urn:dom:<page URL>", in
// the urn:<kind>:<URL> form Browsertrix Crawler gives the resources it makes of a page
// (urn:text:, urn:textFinal:, urn:view:), so that replay and analysis tools list it beside
// the page and never take it for the server's response.
const DOMPrefix = "urn:dom:"

// ContentTypeDOM is the DOM record's Content-Type: the renderer serialises the DOM as
// UTF-8.
const ContentTypeDOM = "text/html; charset=utf-8"

// Rendering is a page rendered in a browser as the archive records it: the DOM the scripts
// left, and the requests the browser made that Trawl answered.
type Rendering struct {
	Key       string    // the message's id: the records' ids derive from it
	URL       string    // the page's URL
	Date      time.Time // when the DOM was taken
	DOM       []byte
	Exchanges []*Exchange // Key is ignored: each takes its ids from the rendering's
	// NoDOM says no DOM was taken (the rendering failed): only the exchanges are written.
	NoDOM bool
}

// DOMRecordID is the id of the DOM record of the message key.
func DOMRecordID(key string) string { return RecordID(key + "/response") }

// BuildRendering makes the DOM's resource record and, for each exchange, a request and a
// response record naming each other in WARC-Concurrent-To, as a fetch's are, and naming
// the DOM record in a second WARC-Concurrent-To (WARC 1.1 §5.7 allows several): every
// record of one rendering is one capture event. Each is its own Built, so the writer
// indexes the DOM and every response. The DOM comes last: the last record's id is the
// message's capture (CaptureID of the last Built), and, the records of a message being
// written in order, a whole last record means the others are whole too.
func BuildRendering(r *Rendering) []*Built {
	domID := DOMRecordID(r.Key)
	digest := Digest(r.DOM)
	dom := &Record{
		Fields: []Field{
			{"WARC-Type", TypeResource},
			{"WARC-Record-ID", domID},
			{"WARC-Date", Date(r.Date)},
			{"WARC-Target-URI", DOMPrefix + r.URL},
			{"WARC-Payload-Digest", digest},
			{"Content-Type", ContentTypeDOM},
		},
		Block: [][]byte{r.DOM},
	}
	var out []*Built
	for i, x := range r.Exchanges {
		x.Key = r.Key + "/x/" + itoa(int64(i))
		b := Build(x)
		for _, rec := range b.Records {
			if r.NoDOM {
				break
			}
			// Before Content-Type, where every other WARC field of the record is.
			n := len(rec.Fields) - 1
			rec.Fields = append(rec.Fields[:n:n], Field{"WARC-Concurrent-To", domID}, rec.Fields[n])
		}
		out = append(out, b)
	}
	if !r.NoDOM {
		out = append(out, &Built{
			Records:       []*Record{dom},
			Entry:         Entry{URL: DOMPrefix + r.URL, Date: r.Date, Mime: "text/html", Status: 200, Digest: digest},
			PayloadDigest: digest,
			CaptureID:     domID,
		})
	}
	return out
}
