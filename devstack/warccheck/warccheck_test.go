package warccheck

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// member gzips one record written by hand from the specification's grammar.
func member(t *testing.T, fields []string, block string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write([]byte("WARC/1.1\r\n" + strings.Join(fields, "\r\n") + "\r\nContent-Length: " + strconv.Itoa(len(block)) + "\r\n\r\n" + block + "\r\n\r\n"))
	zw.Close()
	return b.Bytes()
}

// The reader is only worth its independence if it refuses what is wrong: a digest that
// does not match, a member cut short, and a payload digest over the wrong octets.
func TestReaderRefuses(t *testing.T) {
	block := "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nhello"
	good := []string{"WARC-Type: response", "WARC-Record-ID: <urn:uuid:1>", "WARC-Date: 2026-01-01T00:00:00Z",
		"WARC-Block-Digest: " + sha1B32([]byte(block)), "WARC-Payload-Digest: " + sha1B32([]byte("hello"))}
	cases := []struct {
		name  string
		data  func() []byte
		wrong string // substring of the error; "" = reads and verifies
	}{
		{"whole and right", func() []byte { return member(t, good, block) }, ""},
		{"block digest wrong", func() []byte {
			f := append([]string(nil), good...)
			f[3] = "WARC-Block-Digest: " + sha1B32([]byte("other"))
			return member(t, f, block)
		}, "WARC-Block-Digest"},
		{"payload digest over the whole block", func() []byte {
			f := append([]string(nil), good...)
			f[4] = "WARC-Payload-Digest: " + sha1B32([]byte(block))
			return member(t, f, block)
		}, "WARC-Payload-Digest"},
		{"member cut short", func() []byte { m := member(t, good, block); return m[:len(m)-5] }, "gzip"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.warc.gz")
			if err := os.WriteFile(path, c.data(), 0o644); err != nil {
				t.Fatal(err)
			}
			recs, err := ReadFile(path)
			if err == nil {
				for _, r := range recs {
					if err = Verify(r); err != nil {
						break
					}
				}
			}
			switch {
			case c.wrong == "" && err != nil:
				t.Fatalf("refused a good record: %v", err)
			case c.wrong != "" && (err == nil || !strings.Contains(err.Error(), c.wrong)):
				t.Fatalf("error %v, want one about %s", err, c.wrong)
			}
		})
	}
}
