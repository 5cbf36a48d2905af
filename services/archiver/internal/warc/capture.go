package warc

import (
	"bytes"
	"mime"
	"strconv"
	"strings"
	"time"
)

// Exchange is one fetch as the archive records it.
type Exchange struct {
	Key          string // the message's id: the records' ids derive from it
	URL          string
	Date         time.Time // when the request started
	IP           string
	RequestHead  []byte // request line and headers, ending in the blank line
	ResponseHead []byte // status line and headers, ending in the blank line
	Payload      []byte // the body as received: content coding intact, transfer coding removed
	Truncated    bool   // the body was cut at the fetcher's cap
	// Revisit, when set, makes the response a revisit record: its block is the head only.
	Revisit *Revisit
}

// Revisit says what an earlier capture a revisit record refers to.
type Revisit struct {
	Profile    string // ProfileIdenticalPayload or ProfileServerNotModified
	RefersURI  string // WARC-Refers-To-Target-URI ("" if unknown)
	RefersDate time.Time
	RefersID   string // WARC-Refers-To: the original's record id ("" if unknown)
}

// Built is an exchange's records and the index entry of its capture (the second record).
type Built struct {
	Records       []*Record // request, then response or revisit
	Entry         Entry     // Filename, Offset and Length are the writer's to fill
	PayloadDigest string
	CaptureID     string // WARC-Record-ID of the response or revisit record
}

// Build makes the request record and the response (or revisit) record of x, each naming
// the other in WARC-Concurrent-To.
func Build(x *Exchange) *Built {
	date := Date(x.Date)
	reqID := RecordID(x.Key + "/request")
	capID := RecordID(x.Key + "/response")
	digest := Digest(x.Payload)
	status, mt := ParseHead(x.ResponseHead)

	common := func(typ, id string) []Field {
		f := []Field{
			{"WARC-Type", typ},
			{"WARC-Record-ID", id},
			{"WARC-Date", date},
			{"WARC-Target-URI", x.URL},
		}
		if x.IP != "" {
			f = append(f, Field{"WARC-IP-Address", x.IP})
		}
		return f
	}
	req := &Record{
		Fields: append(common(TypeRequest, reqID),
			Field{"WARC-Concurrent-To", capID},
			Field{"Content-Type", ContentTypeRequest}),
		Block: [][]byte{x.RequestHead},
	}
	var capRec *Record
	entry := Entry{URL: x.URL, Date: x.Date, Status: status, Mime: mt, Digest: digest}
	if x.Revisit == nil {
		f := append(common(TypeResponse, capID),
			Field{"WARC-Concurrent-To", reqID},
			Field{"WARC-Payload-Digest", digest})
		if x.Truncated {
			f = append(f, Field{"WARC-Truncated", "length"})
		}
		f = append(f, Field{"Content-Type", ContentTypeResponse})
		capRec = &Record{Fields: f, Block: [][]byte{x.ResponseHead, x.Payload}}
	} else {
		f := append(common(TypeRevisit, capID),
			Field{"WARC-Concurrent-To", reqID},
			Field{"WARC-Profile", x.Revisit.Profile})
		if x.Revisit.RefersURI != "" {
			f = append(f, Field{"WARC-Refers-To-Target-URI", x.Revisit.RefersURI},
				Field{"WARC-Refers-To-Date", Date(x.Revisit.RefersDate)})
		}
		if x.Revisit.RefersID != "" {
			f = append(f, Field{"WARC-Refers-To", x.Revisit.RefersID})
		}
		f = append(f, Field{"WARC-Payload-Digest", digest})
		if x.Truncated {
			f = append(f, Field{"WARC-Truncated", "length"})
		}
		f = append(f, Field{"Content-Type", ContentTypeResponse})
		// The block is the HTTP head alone: the payload is the one already archived.
		capRec = &Record{Fields: f, Block: [][]byte{x.ResponseHead}}
		entry.Mime = "warc/revisit"
	}
	return &Built{Records: []*Record{req, capRec}, Entry: entry, PayloadDigest: digest, CaptureID: capID}
}

// Warcinfo is a file's first record.
func Warcinfo(id, filename string, now time.Time, fields []Field) *Record {
	var b bytes.Buffer
	for _, f := range fields {
		if f.Value != "" {
			b.WriteString(f.Name + ": " + f.Value + "\r\n")
		}
	}
	return &Record{
		Fields: []Field{
			{"WARC-Type", TypeWarcinfo},
			{"WARC-Record-ID", id},
			{"WARC-Date", Date(now)},
			{"WARC-Filename", filename},
			{"Content-Type", ContentTypeFields},
		},
		Block: [][]byte{b.Bytes()},
	}
}

// ParseHead reads the status code and the media type (lowercased, without parameters)
// from an HTTP response head; 0 and "" when absent.
func ParseHead(head []byte) (status int, mediaType string) {
	lines := strings.Split(strings.ReplaceAll(string(head), "\r\n", "\n"), "\n")
	if len(lines) == 0 {
		return 0, ""
	}
	if parts := strings.SplitN(lines[0], " ", 3); len(parts) >= 2 {
		status, _ = strconv.Atoi(parts[1])
	}
	for _, l := range lines[1:] {
		name, value, ok := strings.Cut(l, ":")
		if !ok || !strings.EqualFold(strings.TrimSpace(name), "Content-Type") {
			continue
		}
		value = strings.TrimSpace(value)
		if mt, _, err := mime.ParseMediaType(value); err == nil {
			return status, mt
		}
		mt, _, _ := strings.Cut(value, ";")
		return status, strings.ToLower(strings.TrimSpace(mt))
	}
	return status, ""
}
