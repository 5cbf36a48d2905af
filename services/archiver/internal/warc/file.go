package warc

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// A file being written is named <name>.open and ends, after a crash, wherever the write
// stopped. Sealing it (rotation, shutdown, or recovery at the next start) writes its
// sorted CDXJ beside it as <base>.cdxj and renames it to <name>; a sealed file is never
// written again.
const openSuffix = ".open"

// Options configure a Writer.
type Options struct {
	Dir     string
	ID      string // names the archiver in every file name; one writer per id and directory
	MaxSize int64  // a file is sealed before a record would take it past this
	Info    []Field
	Now     func() time.Time
	OnSeal  func(name string) // called after each file is sealed (metrics, logs)
	// BeforeSeal is called before a file is sealed. The archiver flushes its acks there:
	// a page whose records are in a sealed file must not be redelivered, because only
	// the ids of records in files left open are found again after a crash.
	BeforeSeal func() error
}

// Writer appends records to the current file of a directory, rotating at MaxSize. It is
// not safe for concurrent use.
type Writer struct {
	o          Options
	f          *os.File
	name       string // the sealed name, without openSuffix
	size       int64
	serial     int
	lines      []string // CDXJ lines of the current file, in write order
	warcinfoID string
}

// NewWriter returns a writer whose first file has the serial after the highest one in
// dir for o.ID. Files are opened on the first write.
func NewWriter(o Options) (*Writer, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	names, err := filesOf(o.Dir, o.ID, "")
	if err != nil {
		return nil, err
	}
	serial := 0
	for _, n := range names {
		if m := nameRE.FindStringSubmatch(n); m != nil {
			s, _ := strconv.Atoi(m[2])
			serial = max(serial, s)
		}
	}
	return &Writer{o: o, serial: serial}, nil
}

// FileName is the name of a file begun at t: the time first so that names sort by time,
// then a serial and the archiver's id.
func FileName(t time.Time, serial int, id string) string {
	t = t.UTC()
	return fmt.Sprintf("TRAWL-%s%03d-%05d-%s.warc.gz", t.Format("20060102150405"), t.Nanosecond()/1e6, serial, id)
}

var nameRE = regexp.MustCompile(`^TRAWL-(\d{17})-(\d{5,})-(.+)\.warc\.gz(\.open)?$`)

// CDXJName is the index file beside a WARC file.
func CDXJName(warcName string) string { return strings.TrimSuffix(warcName, ".warc.gz") + ".cdxj" }

// filesOf lists dir's WARC files of id whose names end in suffix ("" = all of id's).
func filesOf(dir, id, suffix string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("warc: list %s: %w", dir, err)
	}
	var out []string
	for _, e := range ents {
		m := nameRE.FindStringSubmatch(e.Name())
		if m == nil || m[3] != id || !strings.HasSuffix(e.Name(), suffix) {
			continue
		}
		out = append(out, e.Name())
	}
	return out, nil
}

// WriteBatch appends the records of a batch of exchanges as whole gzip members and
// returns each capture's index entry and the octets written. A batch never spans two
// files: when the current file already holds a capture and the batch would take it past
// MaxSize, the file is sealed first (so a file ends past MaxSize only when one batch alone
// is larger). The records are durable only after Sync.
func (w *Writer) WriteBatch(bs []*Built) ([]Entry, int64, error) {
	if w.f == nil {
		if err := w.open(); err != nil {
			return nil, 0, err
		}
	}
	members, total, err := w.members(bs)
	if err != nil {
		return nil, 0, err
	}
	if len(w.lines) > 0 && w.size+total > w.o.MaxSize {
		if err := w.Seal(); err != nil {
			return nil, 0, err
		}
		if err := w.open(); err != nil {
			return nil, 0, err
		}
		// The records name the new file's warcinfo.
		if members, total, err = w.members(bs); err != nil {
			return nil, 0, err
		}
	}
	entries := make([]Entry, len(bs))
	for i, b := range bs {
		e := b.Entry
		e.Filename = w.name
		for j, m := range members[i] {
			if j == len(members[i])-1 {
				e.Offset, e.Length = w.size, int64(len(m))
			}
			if _, err := w.f.Write(m); err != nil {
				// The file may now end inside a record: never write to it again.
				w.abandon()
				return nil, 0, fmt.Errorf("warc: write %s: %w", w.name, err)
			}
			w.size += int64(len(m))
		}
		w.lines = append(w.lines, e.Line())
		entries[i] = e
	}
	return entries, total, nil
}

// members serialises the batch's records, naming the current file's warcinfo record.
func (w *Writer) members(bs []*Built) ([][][]byte, int64, error) {
	out := make([][][]byte, len(bs))
	total := int64(0)
	for i, b := range bs {
		for _, r := range b.Records {
			fields := make([]Field, 0, len(r.Fields)+1)
			for _, f := range r.Fields {
				if f.Name == "Content-Type" {
					fields = append(fields, Field{"WARC-Warcinfo-ID", w.warcinfoID})
				}
				fields = append(fields, f)
			}
			m, err := Member(&Record{Fields: fields, Block: r.Block})
			if err != nil {
				return nil, 0, err
			}
			out[i] = append(out[i], m)
			total += int64(len(m))
		}
	}
	return out, total, nil
}

// Sync makes everything written so far durable.
func (w *Writer) Sync() error {
	if w.f == nil {
		return nil
	}
	if err := w.f.Sync(); err != nil {
		w.abandon()
		return fmt.Errorf("warc: sync %s: %w", w.name, err)
	}
	return nil
}

// Current is the name of the file being written ("" between files).
func (w *Writer) Current() string { return w.name }

func (w *Writer) open() error {
	w.serial++
	w.name = FileName(w.o.Now(), w.serial, w.o.ID)
	f, err := os.OpenFile(filepath.Join(w.o.Dir, w.name+openSuffix), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		w.name = ""
		return fmt.Errorf("warc: create: %w", err)
	}
	w.f, w.size, w.lines = f, 0, nil
	w.warcinfoID = RandomID()
	m, err := Member(Warcinfo(w.warcinfoID, w.name, w.o.Now(), w.o.Info))
	if err == nil {
		_, err = f.Write(m)
	}
	if err != nil {
		w.abandon()
		return fmt.Errorf("warc: write warcinfo: %w", err)
	}
	w.size = int64(len(m))
	return syncDir(w.o.Dir)
}

// Seal syncs and closes the current file, writes its index and gives it its final name.
func (w *Writer) Seal() error {
	if w.f == nil {
		return nil
	}
	if w.o.BeforeSeal != nil {
		if err := w.o.BeforeSeal(); err != nil {
			return fmt.Errorf("warc: before sealing %s: %w", w.name, err)
		}
	}
	if err := w.f.Sync(); err != nil {
		w.abandon()
		return fmt.Errorf("warc: sync %s: %w", w.name, err)
	}
	if err := w.f.Close(); err != nil {
		w.abandon()
		return fmt.Errorf("warc: close %s: %w", w.name, err)
	}
	name := w.name
	err := seal(w.o.Dir, name, w.lines)
	w.f, w.name, w.lines, w.size = nil, "", nil, 0
	if err == nil && w.o.OnSeal != nil {
		w.o.OnSeal(name)
	}
	return err
}

// abandon drops the current file without sealing it: the next start recovers it.
func (w *Writer) abandon() {
	if w.f != nil {
		_ = w.f.Close()
	}
	w.f, w.name, w.lines, w.size = nil, "", nil, 0
}

func seal(dir, name string, lines []string) error {
	SortLines(lines)
	var b bytes.Buffer
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	if err := writeFileSync(filepath.Join(dir, CDXJName(name)), b.Bytes()); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(dir, name+openSuffix), filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("warc: seal %s: %w", name, err)
	}
	return syncDir(dir)
}

func writeFileSync(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("warc: %w", err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		return fmt.Errorf("warc: write %s: %w", path, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("warc: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("warc: sync %s: %w", dir, err)
	}
	return nil
}

// Recovered is what Recover found in the files a stopped writer left open.
type Recovered struct {
	Files   []string        // files sealed
	Records map[string]bool // WARC-Record-IDs of every whole record in them
	Cut     int64           // octets of partial records removed
}

// Recover seals every file of id left open in dir (a crash): each is cut after its last
// whole record, so no reader meets a partial one and nothing is ever appended after it,
// and its index is rebuilt from its records. The ids of the records kept are returned, so
// that a message whose records are already whole in a file (its ack was lost) is not
// written again.
func Recover(dir, id string) (*Recovered, error) {
	names, err := filesOf(dir, id, openSuffix)
	if err != nil {
		return nil, err
	}
	out := &Recovered{Records: map[string]bool{}}
	for _, open := range names {
		name := strings.TrimSuffix(open, openSuffix)
		path := filepath.Join(dir, open)
		recs, end, size, err := scanFile(path)
		if err != nil {
			return nil, err
		}
		out.Cut += size - end
		if len(recs) == 0 || (len(recs) == 1 && recs[0].Type == TypeWarcinfo) {
			// Nothing but (part of) a warcinfo: the file never held a capture.
			if err := os.Remove(path); err != nil {
				return nil, fmt.Errorf("warc: remove %s: %w", open, err)
			}
			continue
		}
		if end < size {
			if err := os.Truncate(path, end); err != nil {
				return nil, fmt.Errorf("warc: cut %s: %w", open, err)
			}
		}
		if err := syncFile(path); err != nil {
			return nil, err
		}
		var lines []string
		for _, r := range recs {
			out.Records[r.ID] = true
			if e, ok := r.Entry(name); ok {
				lines = append(lines, e.Line())
			}
		}
		if err := seal(dir, name, lines); err != nil {
			return nil, err
		}
		out.Files = append(out.Files, name)
	}
	return out, nil
}

func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("warc: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("warc: sync %s: %w", path, err)
	}
	return nil
}

// scanned is a whole record found by scanFile.
type scanned struct {
	Type, ID, URI, Date, Digest, ContentType string
	Offset, Length                           int64
	Block                                    []byte
}

// Entry is the CDXJ entry of a response, revisit or resource record in file name.
func (r *scanned) Entry(name string) (Entry, bool) {
	if r.Type != TypeResponse && r.Type != TypeRevisit && r.Type != TypeResource {
		return Entry{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, r.Date)
	if err != nil {
		return Entry{}, false
	}
	if r.Type == TypeResource {
		mt, _, _ := strings.Cut(r.ContentType, ";")
		return Entry{URL: r.URI, Date: t, Mime: strings.ToLower(strings.TrimSpace(mt)), Status: 200, Digest: r.Digest, Filename: name, Offset: r.Offset, Length: r.Length}, true
	}
	status, mt := ParseHead(r.Block)
	if r.Type == TypeRevisit {
		mt = "warc/revisit"
	}
	return Entry{URL: r.URI, Date: t, Mime: mt, Status: status, Digest: r.Digest, Filename: name, Offset: r.Offset, Length: r.Length}, true
}

// countingReader counts the octets the gzip reader consumed; being an io.ByteReader, it
// keeps gzip from reading past the end of a member.
type countingReader struct {
	br *bufio.Reader
	n  int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.br.Read(p)
	c.n += int64(n)
	return n, err
}

func (c *countingReader) ReadByte() (byte, error) {
	b, err := c.br.ReadByte()
	if err == nil {
		c.n++
	}
	return b, err
}

// scanFile reads the whole records at the start of a file and returns them, the offset
// just after the last one, and the file's size.
func scanFile(path string) (recs []*scanned, end, size int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("warc: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, 0, fmt.Errorf("warc: %w", err)
	}
	cr := &countingReader{br: bufio.NewReaderSize(f, 64<<10)}
	var zr *gzip.Reader
	for {
		start := cr.n
		if zr == nil {
			zr, err = gzip.NewReader(cr)
		} else {
			err = zr.Reset(cr)
		}
		if err != nil {
			break // end of file, or a member cut in its header
		}
		zr.Multistream(false)
		data, err := io.ReadAll(zr)
		if err != nil {
			break // a member cut short or corrupt: the records end before it
		}
		r, ok := parseRecord(data)
		if !ok {
			break
		}
		r.Offset, r.Length = start, cr.n-start
		recs = append(recs, r)
		end = cr.n
	}
	return recs, end, st.Size(), nil
}

// parseRecord reads a decompressed record: version line, fields, block of
// Content-Length octets, and the two CRLFs.
func parseRecord(data []byte) (*scanned, bool) {
	head, rest, ok := bytes.Cut(data, []byte("\r\n\r\n"))
	if !ok || !bytes.HasPrefix(head, []byte("WARC/1.")) {
		return nil, false
	}
	r := &scanned{}
	length := int64(-1)
	for _, l := range strings.Split(string(head), "\r\n")[1:] {
		name, value, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		value = strings.TrimSpace(value)
		switch strings.ToLower(name) {
		case "warc-type":
			r.Type = value
		case "warc-record-id":
			r.ID = value
		case "warc-target-uri":
			r.URI = value
		case "warc-date":
			r.Date = value
		case "warc-payload-digest":
			r.Digest = value
		case "content-type":
			r.ContentType = value
		case "content-length":
			length, _ = strconv.ParseInt(value, 10, 64)
		}
	}
	if length < 0 || int64(len(rest)) != length+4 || !bytes.HasSuffix(rest, []byte("\r\n\r\n")) || r.ID == "" {
		return nil, false
	}
	r.Block = rest[:length]
	return r, true
}
