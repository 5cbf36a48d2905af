package docsweb

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"os"
	"time"

	"github.com/trawl/trawl/devstack/synthweb"
)

// Entry is one request as nginx logged it (testdata/nginx.conf.tmpl, log_format judge).
type Entry struct {
	Start, End   time.Time // the request occupied [Start, End] on the server
	Host         string    // from the Host header, port dropped
	Addr         string    // the server address it arrived on
	Port         int
	Method       string
	URI          string // as sent: path and query, percent-encoded
	Status       int
	Bytes        int64 // body bytes sent (compressed when Encoding is gzip)
	Type         string
	Encoding     string
	Agent        string
	Conn         int64 // nginx's connection serial number
	ConnRequests int   // requests made on that connection so far, this one included
}

type logLine struct {
	Msec         float64 `json:"msec"`
	RequestTime  float64 `json:"request_time"`
	Host         string  `json:"host"`
	Addr         string  `json:"addr"`
	Port         int     `json:"port"`
	Method       string  `json:"method"`
	URI          string  `json:"uri"`
	Status       int     `json:"status"`
	Bytes        int64   `json:"bytes"`
	Type         string  `json:"type"`
	Encoding     string  `json:"encoding"`
	Agent        string  `json:"agent"`
	Conn         int64   `json:"conn"`
	ConnRequests int     `json:"conn_requests"`
}

// ms turns nginx's seconds with millisecond resolution into a time, rounded to the ms so
// that float noise does not invent microseconds nginx never measured.
func ms(sec float64) time.Duration {
	return time.Duration(math.Round(sec*1000)) * time.Millisecond
}

// ParseLog reads an access log; a line that is not one of the judge's JSON objects is an
// error naming it.
func ParseLog(b []byte) ([]Entry, error) {
	var out []Entry
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var l logLine
		if err := json.Unmarshal(line, &l); err != nil {
			return nil, fmt.Errorf("docsweb: access log line %d %q: %w", n, line, err)
		}
		end := time.UnixMilli(0).Add(ms(l.Msec))
		out = append(out, Entry{
			Start: end.Add(-ms(l.RequestTime)), End: end,
			Host: l.Host, Addr: l.Addr, Port: l.Port, Method: l.Method, URI: l.URI,
			Status: l.Status, Bytes: l.Bytes, Type: l.Type, Encoding: l.Encoding, Agent: l.Agent,
			Conn: l.Conn, ConnRequests: l.ConnRequests,
		})
	}
	return out, sc.Err()
}

// ReadLog reads the access log file; a log not yet written is empty.
func ReadLog(path string) ([]Entry, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return ParseLog(b)
}

// Path is the request's path decoded, without its query.
func (e Entry) Path() string {
	u, err := url.ParseRequestURI(e.URI)
	if err != nil {
		return e.URI
	}
	return u.Path
}

// Key names the resource: host, decoded path and query. Two requests of one key are two
// fetches of one URL whatever their percent-encoding.
func (e Entry) Key() string {
	u, err := url.ParseRequestURI(e.URI)
	if err != nil {
		return e.Host + e.URI
	}
	k := e.Host + u.Path
	if u.RawQuery != "" {
		k += "?" + u.RawQuery
	}
	return k
}

// Requests are the entries in synthweb's form, for its politeness checks.
func Requests(entries []Entry) []synthweb.Request {
	out := make([]synthweb.Request, 0, len(entries))
	for _, e := range entries {
		out = append(out, synthweb.Request{
			Host: e.Host, Addr: e.Addr, Path: e.URI, Start: e.Start, End: e.End,
			Status: e.Status, Bytes: int(e.Bytes),
		})
	}
	return out
}
