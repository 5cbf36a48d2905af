// Package wacz packages sealed WARC files and their CDXJ indexes as WACZ 1.1.1 (Web Archive
// Collection Zipped, https://specs.webrecorder.net/wacz/1.1.1/), the single file
// ReplayWeb.page, pywb and Browsertrix load: archive/ (the WARC files, stored: they are
// gzip already, and a replay tool reads a record by range from the zip only when its entry
// is not compressed again), indexes/index.cdxj (every line of every file's index, merged
// and sorted bytewise), pages/pages.jsonl (the HTML pages, the entry points a replay tool
// lists), datapackage.json (every resource's path, sha256 and size) and
// datapackage-digest.json (the sha256 of datapackage.json).
package wacz

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Version is the WACZ specification version written in datapackage.json.
const Version = "1.1.1"

// Paths of the package's fixed entries.
const (
	IndexPath        = "indexes/index.cdxj"
	PagesPath        = "pages/pages.jsonl"
	DataPackagePath  = "datapackage.json"
	DigestPath       = "datapackage-digest.json"
	archivePrefix    = "archive/"
	pagesHeaderTitle = "All Pages"
)

// Options describe the package.
type Options struct {
	Title    string    // datapackage.json "title"; "Trawl crawl" when empty
	Software string    // datapackage.json "software"
	Created  time.Time // datapackage.json "created"; now when zero
}

// Resource is one entry of datapackage.json's "resources".
type Resource struct {
	Name  string `json:"name"`
	Path  string `json:"path"`
	Hash  string `json:"hash"`
	Bytes int64  `json:"bytes"`
}

// DataPackage is datapackage.json (frictionless data package, WACZ profile).
type DataPackage struct {
	Profile      string     `json:"profile"`
	WACZVersion  string     `json:"wacz_version"`
	Title        string     `json:"title,omitempty"`
	Created      string     `json:"created"`
	Software     string     `json:"software,omitempty"`
	MainPageURL  string     `json:"mainPageURL,omitempty"`
	MainPageDate string     `json:"mainPageDate,omitempty"`
	Resources    []Resource `json:"resources"`
}

// Digest is datapackage-digest.json.
type Digest struct {
	Path string `json:"path"`
	Hash string `json:"hash"`
}

// Page is one line of pages/pages.jsonl after the header.
type Page struct {
	ID    string `json:"id"`
	URL   string `json:"url"`
	TS    string `json:"ts"` // RFC 3339, UTC, milliseconds
	Title string `json:"title,omitempty"`
}

// Summary is what Build packaged.
type Summary struct {
	WARCs   []string // base names, in archive/
	Records int      // CDXJ lines
	Pages   []Page
}

// SealedWARCs lists the sealed WARC files of dir (*.warc.gz; a file being written ends in
// .open and is left out), sorted by name, which is by the time each was begun.
func SealedWARCs(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.warc.gz"))
	if err != nil {
		return nil, fmt.Errorf("wacz: list %s: %w", dir, err)
	}
	sort.Strings(files)
	return files, nil
}

// IndexOf is the path of the CDXJ index the archiver writes beside the WARC file at path:
// TRAWL-….warc.gz has TRAWL-….cdxj.
func IndexOf(path string) string { return strings.TrimSuffix(path, ".warc.gz") + ".cdxj" }

// BuildFile writes the package of warcs (each with its CDXJ index beside it, IndexOf) to path: to a temporary name first, fsynced and renamed, so
// path is either absent or whole.
func BuildFile(ctx context.Context, path string, warcs []string, opts Options) (*Summary, error) {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return nil, fmt.Errorf("wacz: %w", err)
	}
	sum, err := Build(ctx, f, warcs, opts)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("wacz: write %s: %w", path, err)
	}
	return sum, nil
}

// Build writes the package of warcs to w.
func Build(ctx context.Context, w io.Writer, warcs []string, opts Options) (*Summary, error) {
	if len(warcs) == 0 {
		return nil, errors.New("wacz: no WARC files to package")
	}
	if opts.Title == "" {
		opts.Title = "Trawl crawl"
	}
	if opts.Created.IsZero() {
		opts.Created = time.Now()
	}
	sum := &Summary{}
	byName := map[string]string{}
	var lines []string
	for _, p := range warcs {
		name := filepath.Base(p)
		if byName[name] != "" {
			return nil, fmt.Errorf("wacz: two WARC files named %s", name)
		}
		byName[name] = p
		sum.WARCs = append(sum.WARCs, name)
		l, err := readIndex(IndexOf(p))
		if err != nil {
			return nil, err
		}
		lines = append(lines, l...)
	}
	sort.Strings(lines)
	sum.Records = len(lines)
	pages, err := findPages(ctx, byName, lines)
	if err != nil {
		return nil, err
	}
	sum.Pages = pages

	zw := zip.NewWriter(w)
	var res []Resource
	for _, p := range warcs {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("wacz: %w", err)
		}
		r, err := addStoredFile(zw, archivePrefix+filepath.Base(p), p)
		if err != nil {
			return nil, err
		}
		res = append(res, r)
	}
	var idx bytes.Buffer
	for _, l := range lines {
		idx.WriteString(l)
		idx.WriteByte('\n')
	}
	r, err := addBytes(zw, IndexPath, idx.Bytes(), zip.Deflate)
	if err != nil {
		return nil, err
	}
	res = append(res, r)
	pj, err := pagesJSONL(pages)
	if err != nil {
		return nil, err
	}
	if r, err = addBytes(zw, PagesPath, pj, zip.Deflate); err != nil {
		return nil, err
	}
	res = append(res, r)

	dp := DataPackage{
		Profile: "data-package", WACZVersion: Version, Title: opts.Title,
		Created: opts.Created.UTC().Format(time.RFC3339), Software: opts.Software, Resources: res,
	}
	if len(pages) > 0 {
		dp.MainPageURL, dp.MainPageDate = pages[0].URL, pages[0].TS
	}
	dpJSON, err := json.MarshalIndent(dp, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("wacz: %w", err)
	}
	if _, err := addBytes(zw, DataPackagePath, dpJSON, zip.Deflate); err != nil {
		return nil, err
	}
	dgJSON, err := json.MarshalIndent(Digest{Path: DataPackagePath, Hash: sha256Of(dpJSON)}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("wacz: %w", err)
	}
	if _, err := addBytes(zw, DigestPath, dgJSON, zip.Deflate); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("wacz: finish zip: %w", err)
	}
	return sum, nil
}

func readIndex(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("wacz: the index of a sealed WARC file: %w", err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out, nil
}

func pagesJSONL(pages []Page) ([]byte, error) {
	var b bytes.Buffer
	hdr, _ := json.Marshal(map[string]string{"format": "json-pages-1.0", "id": "pages", "title": pagesHeaderTitle})
	b.Write(hdr)
	b.WriteByte('\n')
	for _, p := range pages {
		j, err := json.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("wacz: page %s: %w", p.URL, err)
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.Bytes(), nil
}

// addStoredFile adds the file at src as an uncompressed entry. Its CRC-32 and size are
// known before the entry is written (a first pass also takes its sha256), so the local
// header carries them and no data descriptor follows: readers that seek into the zip by
// range, as ReplayWeb.page does, find each record at the entry's offset plus its own.
func addStoredFile(zw *zip.Writer, name, src string) (Resource, error) {
	f, err := os.Open(src)
	if err != nil {
		return Resource{}, fmt.Errorf("wacz: %w", err)
	}
	defer f.Close()
	crc, sh := crc32.NewIEEE(), sha256.New()
	n, err := io.Copy(io.MultiWriter(crc, sh), bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return Resource{}, fmt.Errorf("wacz: read %s: %w", src, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return Resource{}, fmt.Errorf("wacz: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		return Resource{}, fmt.Errorf("wacz: %w", err)
	}
	fh := &zip.FileHeader{Name: name, Method: zip.Store, CRC32: crc.Sum32(),
		CompressedSize64: uint64(n), UncompressedSize64: uint64(n)}
	// CreateRaw writes the header's MS-DOS date and time as given and, unlike
	// CreateHeader, does not derive them from Modified: without this every WARC in the
	// package would be dated 1980. The WARC's own modification time is when it was sealed.
	fh.ModifiedDate, fh.ModifiedTime = msdosTime(st.ModTime())
	fh.Modified = st.ModTime()
	out, err := zw.CreateRaw(fh)
	if err != nil {
		return Resource{}, fmt.Errorf("wacz: %s: %w", name, err)
	}
	// The second pass is checked against the first: a file changed in between would give
	// an entry whose recorded hash is wrong.
	sh2 := sha256.New()
	m, err := io.Copy(io.MultiWriter(out, sh2), bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return Resource{}, fmt.Errorf("wacz: copy %s: %w", src, err)
	}
	if m != n || !bytes.Equal(sh.Sum(nil), sh2.Sum(nil)) {
		return Resource{}, fmt.Errorf("wacz: %s changed while being packaged", src)
	}
	return Resource{Name: filepath.Base(name), Path: name, Hash: "sha256:" + hex.EncodeToString(sh.Sum(nil)), Bytes: n}, nil
}

func addBytes(zw *zip.Writer, name string, b []byte, method uint16) (Resource, error) {
	out, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: method, Modified: time.Now()})
	if err == nil {
		_, err = out.Write(b)
	}
	if err != nil {
		return Resource{}, fmt.Errorf("wacz: %s: %w", name, err)
	}
	return Resource{Name: filepath.Base(name), Path: name, Hash: sha256Of(b), Bytes: int64(len(b))}, nil
}

func sha256Of(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// msdosTime is the zip header's date and time fields for t in UTC, two-second resolution,
// clamped to the format's 1980 start.
func msdosTime(t time.Time) (date, clock uint16) {
	t = t.UTC()
	if t.Year() < 1980 {
		t = time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	date = uint16(t.Day() + int(t.Month())<<5 + (t.Year()-1980)<<9)
	clock = uint16(t.Second()/2 + t.Minute()<<5 + t.Hour()<<11)
	return date, clock
}
