package warc

import (
	"encoding/json"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Entry is one CDXJ line: where a capture's record is and what it holds, in the form pywb
// reads ("<surt> <timestamp> {json}"; pywb's JSON keys, values as strings).
type Entry struct {
	URL      string
	Date     time.Time
	Mime     string // media type of the response; "warc/revisit" for revisit records
	Status   int
	Digest   string // WARC-Payload-Digest
	Filename string
	Offset   int64 // of the record's gzip member in the file
	Length   int64 // of the gzip member
}

type entryJSON struct {
	URL      string `json:"url"`
	Mime     string `json:"mime"`
	Status   string `json:"status"`
	Digest   string `json:"digest"`
	Length   string `json:"length"`
	Offset   string `json:"offset"`
	Filename string `json:"filename"`
}

// Line is e's CDXJ line, without the newline.
func (e Entry) Line() string {
	mime := e.Mime
	if mime == "" {
		mime = "unk"
	}
	j, _ := json.Marshal(entryJSON{
		URL: e.URL, Mime: mime, Status: itoa(int64(e.Status)), Digest: e.Digest,
		Length: itoa(e.Length), Offset: itoa(e.Offset), Filename: e.Filename,
	})
	return SURT(e.URL) + " " + Timestamp14(e.Date) + " " + string(j)
}

// SortLines sorts CDXJ lines bytewise, the order replay tools search them in.
func SortLines(lines []string) { sort.Strings(lines) }

// SURT is the Sort-friendly URI Reordering Transform of a URL as pywb keys it: scheme
// dropped, host labels reversed and comma-joined without a leading "www.", the port kept
// when not the default, ")" and the path, query parameters sorted, all lowercased.
// "http://www.Example.com/a?b=2&a=1" gives "com,example)/a?a=1&b=2".
func SURT(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return strings.ToLower(raw)
	}
	host := strings.ToLower(u.Hostname())
	host = strings.TrimSuffix(host, ".")
	host = strings.TrimPrefix(host, "www.")
	var key string
	if strings.Contains(host, ":") { // IPv6 literal: not reversed
		key = "[" + host + "]"
	} else if isIPv4(host) {
		key = host
	} else {
		labels := strings.Split(host, ".")
		for i, j := 0, len(labels)-1; i < j; i, j = i+1, j-1 {
			labels[i], labels[j] = labels[j], labels[i]
		}
		key = strings.Join(labels, ",")
	}
	if p := u.Port(); p != "" && !(u.Scheme == "http" && p == "80") && !(u.Scheme == "https" && p == "443") {
		key += ":" + p
	}
	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	key += ")" + path
	if u.RawQuery != "" {
		args := strings.Split(u.RawQuery, "&")
		sort.Strings(args)
		key += "?" + strings.Join(args, "&")
	}
	return strings.ToLower(key)
}

func isIPv4(h string) bool {
	parts := strings.Split(h, ".")
	if len(parts) != 4 {
		return false
	}
	for _, p := range parts {
		if p == "" || len(p) > 3 || strings.Trim(p, "0123456789") != "" {
			return false
		}
	}
	return true
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
