package wacz

import (
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// record is one WARC response record, its own gzip member, as the archiver writes them.
func record(t *testing.T, uri, date, httpHead string, body []byte) []byte {
	t.Helper()
	block := append([]byte(httpHead+"\r\n"), body...)
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	fmt.Fprintf(zw, "WARC/1.1\r\nWARC-Type: response\r\nWARC-Target-URI: %s\r\nWARC-Date: %s\r\n"+
		"Content-Type: application/http;msgtype=response\r\nContent-Length: %d\r\n\r\n", uri, date, len(block))
	zw.Write(block)
	io.WriteString(zw, "\r\n\r\n")
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func gz(t *testing.T, s string) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	io.WriteString(zw, s)
	zw.Close()
	return b.Bytes()
}

type capture struct {
	uri, mime, head string
	status          int
	body            []byte
}

// writeWARC writes a sealed WARC file and its CDXJ index (lines in the archiver's form).
func writeWARC(t *testing.T, dir, name string, caps []capture) string {
	t.Helper()
	var file bytes.Buffer
	var idx []string
	for i, c := range caps {
		date := time.Date(2026, 11, 28, 12, 0, i, 123e6, time.UTC)
		rec := record(t, c.uri, date.Format("2006-01-02T15:04:05.000Z"), c.head, c.body)
		js, _ := json.Marshal(map[string]string{"url": c.uri, "mime": c.mime, "status": fmt.Sprint(c.status),
			"digest": "sha1:X", "length": fmt.Sprint(len(rec)), "offset": fmt.Sprint(file.Len()), "filename": name})
		idx = append(idx, c.uri+" "+date.Format("20060102150405")+" "+string(js))
		file.Write(rec)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, file.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(IndexOf(p), []byte(strings.Join(idx, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func fixture(t *testing.T) (string, []string) {
	dir := t.TempDir()
	a := writeWARC(t, dir, "A.warc.gz", []capture{
		{uri: "http://a.test/", mime: "text/html", status: 200,
			head: "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n",
			body: gz(t, "<html><head><title> Home &amp;\n page </title></head><body>hi</body></html>")},
		{uri: "http://a.test/s.css", mime: "text/css", status: 200, head: "HTTP/1.1 200 OK\r\nContent-Type: text/css\r\n", body: []byte("p{}")},
	})
	b := writeWARC(t, dir, "B.warc.gz", []capture{
		{uri: "http://a.test/x", mime: "text/html; charset=utf-8", status: 200, head: "HTTP/1.1 200 OK\r\n", body: []byte("<p>no title</p>")},
		{uri: "http://a.test/gone", mime: "text/html", status: 404, head: "HTTP/1.1 404 Not Found\r\n", body: []byte("<title>404</title>")},
		{uri: "http://a.test/", mime: "text/html", status: 200, head: "HTTP/1.1 200 OK\r\n", body: []byte("<title>again</title>")},
	})
	return dir, []string{a, b}
}

func TestBuildAndVerify(t *testing.T) {
	dir, warcs := fixture(t)
	out := filepath.Join(dir, "crawl.wacz")
	sum, err := BuildFile(context.Background(), out, warcs, Options{Software: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(out); err != nil {
		t.Fatalf("the package does not verify:\n%v", err)
	}
	if sum.Records != 5 {
		t.Errorf("%d index lines, want 5", sum.Records)
	}
	got := map[string]string{}
	for _, p := range sum.Pages {
		got[p.URL] = p.Title
	}
	want := map[string]string{"http://a.test/": "Home & page", "http://a.test/x": ""}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("pages %v, want %v (one per HTML URL fetched whole with 200, its first capture)", got, want)
	}
	zr, err := zip.OpenReader(out)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	for _, f := range zr.File {
		if strings.HasPrefix(f.Name, "archive/") && f.Flags&0x8 != 0 {
			t.Errorf("%s has a data descriptor: its size is not in its local header", f.Name)
		}
		// Archive tools list and unpack by the entry's date; a WARC's is when it was sealed.
		if strings.HasPrefix(f.Name, "archive/") {
			st, err := os.Stat(filepath.Join(dir, filepath.Base(f.Name)))
			if err != nil {
				t.Fatal(err)
			}
			if d := f.Modified.Sub(st.ModTime().UTC()); d < -2*time.Second || d > 2*time.Second {
				t.Errorf("%s is dated %v, want its WARC's %v", f.Name, f.Modified, st.ModTime().UTC())
			}
		}
	}
	pj, _ := readEntry(find(zr, PagesPath))
	if first, _, _ := strings.Cut(string(pj), "\n"); first != `{"format":"json-pages-1.0","id":"pages","title":"All Pages"}` {
		t.Errorf("pages.jsonl header %s", first)
	}
}

func find(zr *zip.ReadCloser, name string) *zip.File {
	for _, f := range zr.File {
		if f.Name == name {
			return f
		}
	}
	return nil
}

// TestVerifyFinds rewrites one entry of a good package at a time and expects Verify to
// name the problem.
func TestVerifyFinds(t *testing.T) {
	dir, warcs := fixture(t)
	good := filepath.Join(dir, "good.wacz")
	if _, err := BuildFile(context.Background(), good, warcs, Options{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		change func(name string, b []byte) (string, []byte, uint16)
		want   string
	}{
		{"a WARC byte changed", func(n string, b []byte) (string, []byte, uint16) {
			if n == "archive/A.warc.gz" {
				b = bytes.Clone(b)
				b[len(b)/2] ^= 1
			}
			return n, b, zip.Store
		}, "resource archive/A.warc.gz: datapackage.json says"},
		{"datapackage.json edited", func(n string, b []byte) (string, []byte, uint16) {
			if n == DataPackagePath {
				b = bytes.Replace(b, []byte("Trawl crawl"), []byte("Other"), 1)
			}
			return n, b, zip.Deflate
		}, "datapackage-digest.json names"},
		{"a WARC compressed", func(n string, b []byte) (string, []byte, uint16) {
			return n, b, zip.Deflate
		}, "must be stored"},
		{"an entry not listed", func(n string, b []byte) (string, []byte, uint16) {
			if n == "archive/B.warc.gz" {
				n = "archive/C.warc.gz"
			}
			return n, b, zip.Store
		}, "is not a resource"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := filepath.Join(t.TempDir(), "bad.wacz")
			rewrite(t, good, bad, tc.change)
			err := Verify(bad)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Verify: %v; want an error saying %q", err, tc.want)
			}
		})
	}
}

func rewrite(t *testing.T, src, dst string, change func(string, []byte) (string, []byte, uint16)) {
	t.Helper()
	zr, err := zip.OpenReader(src)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	f, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zw := zip.NewWriter(f)
	for _, e := range zr.File {
		b, err := readEntry(e)
		if err != nil {
			t.Fatal(err)
		}
		name, b, method := change(e.Name, b)
		w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: method})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(b)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
}
