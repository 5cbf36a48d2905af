// Package warccheck reads WARC files and their CDXJ indexes back for tests, written from
// the WARC 1.1 specification independently of the archiver's writer (it shares no code
// with it): a reader that repeats the writer's mistakes would prove nothing. It is strict
// where the archiver promises something: every file is a sequence of whole gzip members of
// one record each, every digest verifies, and every CDXJ line points at its record.
package warccheck

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha1"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Record is one WARC record as read.
type Record struct {
	File    string
	Offset  int64 // of its gzip member
	Length  int64 // of its gzip member
	Version string
	Fields  []Field // in file order
	Block   []byte
}

// Field is one named field of a record's header.
type Field struct{ Name, Value string }

// Get is the first value of a field, matched case-insensitively.
func (r *Record) Get(name string) string {
	for _, f := range r.Fields {
		if strings.EqualFold(f.Name, name) {
			return f.Value
		}
	}
	return ""
}

// All is every value of a field.
func (r *Record) All(name string) []string {
	var out []string
	for _, f := range r.Fields {
		if strings.EqualFold(f.Name, name) {
			out = append(out, f.Value)
		}
	}
	return out
}

// HTTP splits a request or response block into its head and its payload.
func (r *Record) HTTP() (head, payload []byte, err error) {
	i := bytes.Index(r.Block, []byte("\r\n\r\n"))
	n := 4
	if j := bytes.Index(r.Block, []byte("\n\n")); j >= 0 && (i < 0 || j < i) {
		i, n = j, 2
	}
	if i < 0 {
		return nil, nil, fmt.Errorf("%s@%d: block has no end of HTTP head", r.File, r.Offset)
	}
	return r.Block[:i+n], r.Block[i+n:], nil
}

// Response parses the HTTP head of a response or revisit block.
func (r *Record) Response() (*http.Response, error) {
	head, _, err := r.HTTP()
	if err != nil {
		return nil, err
	}
	return http.ReadResponse(bufio.NewReader(bytes.NewReader(head)), nil)
}

// sha1B32 is the WARC digest form.
func sha1B32(parts ...[]byte) string {
	h := sha1.New()
	for _, p := range parts {
		h.Write(p)
	}
	return "sha1:" + base32.StdEncoding.EncodeToString(h.Sum(nil))
}

// byteCounter lets the gzip reader stop exactly at a member's end (it reads an
// io.ByteReader no further than it needs) while counting the octets consumed.
type byteCounter struct {
	r *bufio.Reader
	n int64
}

func (b *byteCounter) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.n += int64(n)
	return n, err
}

func (b *byteCounter) ReadByte() (byte, error) {
	c, err := b.r.ReadByte()
	if err == nil {
		b.n++
	}
	return c, err
}

// ReadFile reads every record of a .warc.gz file; any octet that is not part of a whole
// member holding one whole record is an error.
func ReadFile(path string) ([]*Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	bc := &byteCounter{r: bufio.NewReader(f)}
	var out []*Record
	for {
		if _, err := bc.r.Peek(1); err == io.EOF {
			return out, nil
		}
		start := bc.n
		zr, err := gzip.NewReader(bc)
		if err != nil {
			return out, fmt.Errorf("%s@%d: gzip member header: %w", filepath.Base(path), start, err)
		}
		zr.Multistream(false)
		data, err := io.ReadAll(zr)
		if err != nil {
			return out, fmt.Errorf("%s@%d: gzip member: %w", filepath.Base(path), start, err)
		}
		rec, rest, err := parse(data)
		if err != nil {
			return out, fmt.Errorf("%s@%d: %w", filepath.Base(path), start, err)
		}
		if len(rest) != 0 {
			return out, fmt.Errorf("%s@%d: %d octets after the record in its member", filepath.Base(path), start, len(rest))
		}
		rec.File, rec.Offset, rec.Length = filepath.Base(path), start, bc.n-start
		out = append(out, rec)
	}
}

// ReadAt reads the one record whose member starts at offset and is length octets long.
func ReadAt(path string, offset, length int64) (*Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, length)
	if _, err := f.ReadAt(buf, offset); err != nil {
		return nil, fmt.Errorf("read %d octets at %d: %w", length, offset, err)
	}
	br := bytes.NewReader(buf)
	zr, err := gzip.NewReader(br)
	if err != nil {
		return nil, err
	}
	zr.Multistream(false)
	data, err := io.ReadAll(zr)
	if err != nil {
		return nil, err
	}
	// The length must be exactly the member's: a bytes.Reader is an io.ByteReader, so
	// gzip read no further than the member's end.
	if br.Len() != 0 {
		return nil, fmt.Errorf("length %d runs %d octets past the member", length, br.Len())
	}
	rec, rest, err := parse(data)
	if err != nil {
		return nil, err
	}
	if len(rest) != 0 {
		return nil, errors.New("octets after the record")
	}
	rec.File, rec.Offset, rec.Length = filepath.Base(path), offset, length
	return rec, nil
}

// parse reads one record: "WARC/1.x" CRLF, fields up to an empty line, Content-Length
// octets of block, CRLF CRLF.
func parse(data []byte) (*Record, []byte, error) {
	line, rest, ok := bytes.Cut(data, []byte("\r\n"))
	if !ok || !bytes.HasPrefix(line, []byte("WARC/")) {
		return nil, nil, fmt.Errorf("no WARC version line")
	}
	rec := &Record{Version: string(line)}
	for {
		line, rest, ok = bytes.Cut(rest, []byte("\r\n"))
		if !ok {
			return nil, nil, fmt.Errorf("header not ended by an empty line")
		}
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return nil, nil, fmt.Errorf("header line %q has no colon", line)
		}
		rec.Fields = append(rec.Fields, Field{string(name), strings.TrimSpace(string(value))})
	}
	n, err := strconv.ParseInt(rec.Get("Content-Length"), 10, 64)
	if err != nil || n < 0 {
		return nil, nil, fmt.Errorf("bad Content-Length %q", rec.Get("Content-Length"))
	}
	if int64(len(rest)) < n+4 {
		return nil, nil, fmt.Errorf("block shorter than Content-Length %d", n)
	}
	rec.Block = rest[:n]
	if !bytes.Equal(rest[n:n+4], []byte("\r\n\r\n")) {
		return nil, nil, fmt.Errorf("block not followed by CRLF CRLF")
	}
	return rec, rest[n+4:], nil
}

// Verify checks one record's own promises: mandatory fields, its block digest, and for a
// response its payload digest over the entity body (the block after the HTTP head).
func Verify(r *Record) error {
	for _, name := range []string{"WARC-Type", "WARC-Record-ID", "WARC-Date", "Content-Length"} {
		if r.Get(name) == "" {
			return fmt.Errorf("%s@%d: no %s", r.File, r.Offset, name)
		}
	}
	if r.Version != "WARC/1.1" {
		return fmt.Errorf("%s@%d: version %q", r.File, r.Offset, r.Version)
	}
	if d := r.Get("WARC-Block-Digest"); d != sha1B32(r.Block) {
		return fmt.Errorf("%s@%d: WARC-Block-Digest %s, block hashes to %s", r.File, r.Offset, d, sha1B32(r.Block))
	}
	switch r.Get("WARC-Type") {
	case "response":
		_, payload, err := r.HTTP()
		if err != nil {
			return err
		}
		if d := r.Get("WARC-Payload-Digest"); d != sha1B32(payload) {
			return fmt.Errorf("%s@%d: WARC-Payload-Digest %s, payload hashes to %s", r.File, r.Offset, d, sha1B32(payload))
		}
		if _, err := r.Response(); err != nil {
			return fmt.Errorf("%s@%d: HTTP head: %w", r.File, r.Offset, err)
		}
	case "revisit":
		if r.Get("WARC-Profile") == "" || r.Get("WARC-Payload-Digest") == "" {
			return fmt.Errorf("%s@%d: revisit without profile or payload digest", r.File, r.Offset)
		}
		if _, err := r.Response(); err != nil {
			return fmt.Errorf("%s@%d: HTTP head: %w", r.File, r.Offset, err)
		}
	case "request":
		if _, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(r.Block))); err != nil {
			return fmt.Errorf("%s@%d: HTTP request: %w", r.File, r.Offset, err)
		}
	case "resource":
		// A rendered page's DOM: the block is the payload.
		if d := r.Get("WARC-Payload-Digest"); d != sha1B32(r.Block) {
			return fmt.Errorf("%s@%d: resource WARC-Payload-Digest %s, block hashes to %s", r.File, r.Offset, d, sha1B32(r.Block))
		}
		if !strings.HasPrefix(r.Get("WARC-Target-URI"), "urn:dom:http") || r.Get("Content-Type") == "" {
			return fmt.Errorf("%s@%d: resource of %q, Content-Type %q: want a urn:dom: of a page URL, typed", r.File, r.Offset, r.Get("WARC-Target-URI"), r.Get("Content-Type"))
		}
	}
	return nil
}

// Line is one CDXJ line.
type Line struct {
	SURT, Timestamp string
	URL             string `json:"url"`
	Mime            string `json:"mime"`
	Status          string `json:"status"`
	Digest          string `json:"digest"`
	Length          string `json:"length"`
	Offset          string `json:"offset"`
	Filename        string `json:"filename"`
}

// ReadCDXJ reads an index file, checking that its lines are sorted.
func ReadCDXJ(path string) ([]Line, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []Line
	prev := ""
	for i, l := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if l == "" {
			continue
		}
		if l < prev {
			return nil, fmt.Errorf("%s:%d: not sorted", path, i+1)
		}
		prev = l
		key, rest, ok1 := strings.Cut(l, " ")
		ts, js, ok2 := strings.Cut(rest, " ")
		if !ok1 || !ok2 || len(ts) != 14 {
			return nil, fmt.Errorf("%s:%d: not \"<surt> <14 digits> {json}\"", path, i+1)
		}
		ln := Line{SURT: key, Timestamp: ts}
		if err := json.Unmarshal([]byte(js), &ln); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, i+1, err)
		}
		out = append(out, ln)
	}
	return out, nil
}

// Archive is what Check read from a directory.
type Archive struct {
	Files   []string
	Records []*Record
	Index   []Line
}

// Captures are the response, revisit and resource records: the ones indexed.
func (a *Archive) Captures() []*Record {
	var out []*Record
	for _, r := range a.Records {
		if t := r.Get("WARC-Type"); t == "response" || t == "revisit" || t == "resource" {
			out = append(out, r)
		}
	}
	return out
}

// Check reads every sealed WARC file in dir with its CDXJ and verifies: each file starts
// with a warcinfo record, every record verifies, record ids are unique within a file,
// every record names the file's warcinfo, every request and capture name each other in
// WARC-Concurrent-To, every capture has
// exactly one index line and every index line points at a capture with its URL, date and
// digest. Files still open (.open) are not read.
func Check(dir string) (*Archive, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.warc.gz"))
	if err != nil {
		return nil, err
	}
	a := &Archive{}
	var errs []error
	for _, path := range names {
		base := filepath.Base(path)
		a.Files = append(a.Files, base)
		recs, err := ReadFile(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if len(recs) == 0 || recs[0].Get("WARC-Type") != "warcinfo" {
			errs = append(errs, fmt.Errorf("%s: does not start with a warcinfo record", base))
		}
		ids := map[string]*Record{}
		for i, r := range recs {
			if i > 0 && r.Get("WARC-Warcinfo-ID") != recs[0].Get("WARC-Record-ID") {
				errs = append(errs, fmt.Errorf("%s@%d: WARC-Warcinfo-ID %q does not name the file's warcinfo", base, r.Offset, r.Get("WARC-Warcinfo-ID")))
			}
			if err := Verify(r); err != nil {
				errs = append(errs, err)
			}
			id := r.Get("WARC-Record-ID")
			if ids[id] != nil {
				errs = append(errs, fmt.Errorf("%s: record id %s twice in one file", base, id))
			}
			ids[id] = r
		}
		for _, r := range recs {
			t := r.Get("WARC-Type")
			if t != "request" && t != "response" && t != "revisit" {
				continue
			}
			peer := ids[r.Get("WARC-Concurrent-To")]
			if peer == nil || peer.Get("WARC-Target-URI") != r.Get("WARC-Target-URI") || peer.Get("WARC-Concurrent-To") != r.Get("WARC-Record-ID") {
				errs = append(errs, fmt.Errorf("%s@%d: %s record not linked with its pair by WARC-Concurrent-To", base, r.Offset, t))
			}
			// A browser's exchange also names its page's DOM record, in the same file.
			for _, c := range r.All("WARC-Concurrent-To")[1:] {
				if dom := ids[c]; dom == nil || dom.Get("WARC-Type") != "resource" {
					errs = append(errs, fmt.Errorf("%s@%d: %s record's WARC-Concurrent-To %s names no resource record of the file", base, r.Offset, t, c))
				}
			}
		}
		idx, err := ReadCDXJ(strings.TrimSuffix(path, ".warc.gz") + ".cdxj")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		indexed := map[int64]bool{}
		for _, l := range idx {
			off, _ := strconv.ParseInt(l.Offset, 10, 64)
			n, _ := strconv.ParseInt(l.Length, 10, 64)
			r, err := ReadAt(path, off, n)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: index line for %s at %d+%d: %w", base, l.URL, off, n, err))
				continue
			}
			date := strings.NewReplacer("-", "", "T", "", ":", "").Replace(r.Get("WARC-Date"))
			switch {
			case l.Filename != base:
				errs = append(errs, fmt.Errorf("%s: index line names file %s", base, l.Filename))
			case r.Get("WARC-Target-URI") != l.URL || r.Get("WARC-Payload-Digest") != l.Digest:
				errs = append(errs, fmt.Errorf("%s: index line %s %s points at a record of %s %s", base, l.URL, l.Digest, r.Get("WARC-Target-URI"), r.Get("WARC-Payload-Digest")))
			case !strings.HasPrefix(date, l.Timestamp):
				errs = append(errs, fmt.Errorf("%s: index timestamp %s, record date %s", base, l.Timestamp, r.Get("WARC-Date")))
			}
			indexed[off] = true
		}
		for _, r := range recs {
			if t := r.Get("WARC-Type"); (t == "response" || t == "revisit" || t == "resource") && !indexed[r.Offset] {
				errs = append(errs, fmt.Errorf("%s@%d: %s of %s has no index line", base, r.Offset, t, r.Get("WARC-Target-URI")))
			}
		}
		a.Records = append(a.Records, recs...)
		a.Index = append(a.Index, idx...)
	}
	return a, errors.Join(errs...)
}

// ResolveRevisits checks what a replay tool does with each identical-payload-digest
// revisit of the archives (several directories, e.g. crawls sharing a digest index): it
// must resolve to its original, a response record of the set whose WARC-Target-URI is
// the revisit's WARC-Refers-To-Target-URI, whose WARC-Date falls in the same second as
// its WARC-Refers-To-Date (the precision of the CDXJ timestamps replay tools look up),
// whose payload digest is the revisit's, and, when the revisit names WARC-Refers-To,
// whose record id it is. It returns every revisit that does not resolve, and how many
// did.
func ResolveRevisits(archives ...*Archive) (resolved int, err error) {
	type at struct{ uri, second string }
	originals := map[at][]*Record{}
	for _, a := range archives {
		for _, r := range a.Records {
			if r.Get("WARC-Type") == "response" {
				k := at{r.Get("WARC-Target-URI"), second(r.Get("WARC-Date"))}
				originals[k] = append(originals[k], r)
			}
		}
	}
	var errs []error
	for _, a := range archives {
		for _, r := range a.Records {
			if r.Get("WARC-Type") != "revisit" || !strings.HasSuffix(r.Get("WARC-Profile"), "/identical-payload-digest") {
				continue
			}
			where := fmt.Sprintf("%s@%d (%s)", r.File, r.Offset, r.Get("WARC-Target-URI"))
			uri, date := r.Get("WARC-Refers-To-Target-URI"), r.Get("WARC-Refers-To-Date")
			if uri == "" || date == "" {
				errs = append(errs, fmt.Errorf("%s: revisit without WARC-Refers-To-Target-URI and -Date", where))
				continue
			}
			found := false
			for _, o := range originals[at{uri, second(date)}] {
				if o.Get("WARC-Payload-Digest") == r.Get("WARC-Payload-Digest") &&
					(r.Get("WARC-Refers-To") == "" || r.Get("WARC-Refers-To") == o.Get("WARC-Record-ID")) {
					found = true
					break
				}
			}
			if !found {
				errs = append(errs, fmt.Errorf("%s: refers to %s at %s (record %q): no response record with that URI, second, payload digest and id", where, uri, date, r.Get("WARC-Refers-To")))
				continue
			}
			resolved++
		}
	}
	return resolved, errors.Join(errs...)
}

// second is a WARC-Date to the second ("2026-01-02T03:04:05").
func second(d string) string {
	if len(d) >= 19 {
		return d[:19]
	}
	return d
}
