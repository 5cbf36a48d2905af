// Package cdxj reads CDXJ index lines, "<urlkey> <timestamp> {json}", the form the
// archiver writes beside each WARC file and pywb and Browsertrix write: JSON with "url",
// "mime", "status", "digest", "length", "offset", "filename" (pywb writes every value as
// a string; numbers are read too).
package cdxj

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Line is one capture of an index.
type Line struct {
	URLKey   string
	Date     time.Time // the timestamp, to the second
	URL      string
	Mime     string // "warc/revisit" for a revisit record
	Status   int    // 0 when absent ("-")
	Digest   string
	Filename string
	Offset   int64
	Length   int64 // of the record's gzip member
}

// ErrSyntax marks a line that is no CDXJ.
var ErrSyntax = errors.New("cdxj: malformed line")

// Parse reads one line (without its newline).
func Parse(s string) (Line, error) {
	key, rest, ok1 := strings.Cut(s, " ")
	ts, js, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || !strings.HasPrefix(js, "{") {
		return Line{}, fmt.Errorf("%w: %.80q", ErrSyntax, s)
	}
	date, err := timestamp(ts)
	if err != nil {
		return Line{}, fmt.Errorf("%w: timestamp %q", ErrSyntax, ts)
	}
	var f map[string]any
	if err := json.Unmarshal([]byte(js), &f); err != nil {
		return Line{}, fmt.Errorf("%w: %v", ErrSyntax, err)
	}
	str := func(k string) string {
		switch v := f[k].(type) {
		case string:
			return v
		case float64:
			return strconv.FormatInt(int64(v), 10)
		}
		return ""
	}
	num := func(k string) int64 { n, _ := strconv.ParseInt(str(k), 10, 64); return n }
	return Line{URLKey: key, Date: date, URL: str("url"), Mime: str("mime"), Status: int(num("status")),
		Digest: str("digest"), Filename: str("filename"), Offset: num("offset"), Length: num("length")}, nil
}

// timestamp reads a 14-digit timestamp, or a shorter one padded as Wayback does (the
// start of the period named).
func timestamp(ts string) (time.Time, error) {
	if len(ts) < 4 || len(ts) > 17 || strings.Trim(ts, "0123456789") != "" {
		return time.Time{}, ErrSyntax
	}
	if len(ts) > 14 {
		ts = ts[:14]
	}
	pad := "00000101000000"
	return time.Parse("20060102150405", ts+pad[len(ts):])
}

// Each calls fn with every line of r, in order, and stops at the first error fn returns or
// when ctx ends. A malformed line is passed to bad (and skipped) rather than ending the
// read. Blank lines and lines beginning with "!" (a CDX header) are skipped.
func Each(ctx context.Context, r io.Reader, fn func(Line) error, bad func(n int, err error)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		if n%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		t := strings.TrimRight(sc.Text(), "\r")
		if t == "" || strings.HasPrefix(t, "!") {
			continue
		}
		l, err := Parse(t)
		if err != nil {
			if bad != nil {
				bad(n, err)
			}
			continue
		}
		if err := fn(l); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("cdxj: read: %w", err)
	}
	return ctx.Err()
}
