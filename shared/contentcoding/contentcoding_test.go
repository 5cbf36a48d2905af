package contentcoding

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"io"
	"strings"
	"testing"
)

func encode(t *testing.T, coding string, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.WriteCloser
	switch coding {
	case "gzip":
		w = gzip.NewWriter(&buf)
	case "zlib":
		w = zlib.NewWriter(&buf)
	case "flate":
		w, _ = flate.NewWriter(&buf, flate.DefaultCompression)
	}
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// stacked is b gzipped n times, and the Content-Encoding that says so.
func stacked(t *testing.T, n int, b []byte) ([]byte, string) {
	t.Helper()
	for range n {
		b = encode(t, "gzip", b)
	}
	return b, strings.TrimSuffix(strings.Repeat("gzip, ", n), ", ")
}

func TestRead(t *testing.T) {
	text := []byte(strings.Repeat("the content of the page. ", 40))
	gz := encode(t, "gzip", text)
	atLimit, atLimitHeader := stacked(t, MaxCodings, text)
	overLimit, overLimitHeader := stacked(t, MaxCodings+1, text)
	bomb := encode(t, "gzip", make([]byte, 1<<20)) // 1 MiB of zeros in about 1 KiB
	// Incompressible octets: encoded, they are a little longer than the content.
	noise := make([]byte, 200<<10)
	for i := range noise {
		noise[i] = byte(i*7919 + i>>8*31)
	}
	tests := []struct {
		name      string
		header    string
		wire      []byte
		maxBody   int64
		content   []byte
		raw       []byte // nil: no coding, the body is its content
		truncated bool
		err       error
	}{
		{name: "identity", header: "", wire: text, maxBody: 1 << 20, content: text},
		{name: "identity named", header: "identity", wire: text, maxBody: 1 << 20, content: text},
		{name: "identity over the cap", header: "", wire: text, maxBody: 100, content: text[:100], truncated: true},
		{name: "gzip", header: "gzip", wire: gz, maxBody: 1 << 20, content: text, raw: gz},
		{name: "x-gzip, any case", header: " X-GZip ", wire: gz, maxBody: 1 << 20, content: text, raw: gz},
		{name: "deflate (zlib)", header: "deflate", wire: encode(t, "zlib", text), maxBody: 1 << 20, content: text, raw: encode(t, "zlib", text)},
		{name: "deflate sent raw", header: "deflate", wire: encode(t, "flate", text), maxBody: 1 << 20, content: text, raw: encode(t, "flate", text)},
		{name: "two codings, in the order applied", header: "deflate, gzip", wire: encode(t, "gzip", encode(t, "zlib", text)), maxBody: 1 << 20,
			content: text, raw: encode(t, "gzip", encode(t, "zlib", text))},
		{name: "empty gzip body", header: "gzip", wire: nil, maxBody: 1 << 20, content: []byte{}, raw: []byte{}},
		{name: "decoded past the cap", header: "gzip", wire: bomb, maxBody: 64 << 10, content: make([]byte, 64<<10), truncated: true},
		{name: "incompressible within the wire cap", header: "gzip", wire: encode(t, "gzip", noise), maxBody: 200 << 10, content: noise,
			raw: encode(t, "gzip", noise)},
		{name: "incompressible past the cap", header: "gzip", wire: encode(t, "gzip", noise), maxBody: 1 << 10, content: nil, truncated: true},
		{name: "cut short", header: "gzip", wire: gz[:len(gz)/2], maxBody: 1 << 20, err: io.ErrUnexpectedEOF},
		{name: "not gzip", header: "gzip", wire: text, maxBody: 1 << 20, err: gzip.ErrHeader},
		{name: "br", header: "br", wire: text, maxBody: 1 << 20, err: ErrUnsupported},
		{name: "gzip then zstd", header: "gzip, zstd", wire: text, maxBody: 1 << 20, err: ErrUnsupported},
		{name: "as many codings as decoded", header: atLimitHeader, wire: atLimit, maxBody: 1 << 20, content: text, raw: atLimit},
		// Each coding costs a decoder before a body octet is read: a header may not buy
		// thousands of them.
		{name: "one coding too many", header: overLimitHeader, wire: overLimit, maxBody: 1 << 20, err: ErrUnsupported},
		{name: "identity is no coding", header: "identity, " + atLimitHeader + ", identity", wire: atLimit, maxBody: 1 << 20, content: text, raw: atLimit},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Read(bytes.NewReader(tc.wire), tc.header, tc.maxBody)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b.Truncated != tc.truncated {
				t.Errorf("truncated %t, want %t", b.Truncated, tc.truncated)
			}
			if tc.content != nil && !bytes.Equal(b.Content, tc.content) {
				t.Errorf("content %d octets %.40q, want %d octets %.40q", len(b.Content), b.Content, len(tc.content), tc.content)
			}
			if int64(len(b.Content)) > tc.maxBody {
				t.Errorf("content of %d octets passes the cap of %d", len(b.Content), tc.maxBody)
			}
			if tc.raw != nil && !bytes.Equal(b.Raw, tc.raw) {
				t.Errorf("raw %d octets, want the %d as received", len(b.Raw), len(tc.raw))
			}
			if tc.raw == nil && tc.header == "" && b.Raw != nil {
				t.Errorf("raw %d octets for a body without coding, want none", len(b.Raw))
			}
			if int64(len(b.Raw)) > WireCap(tc.maxBody) {
				t.Errorf("read %d octets, past the wire cap of %d", len(b.Raw), WireCap(tc.maxBody))
			}
		})
	}
}

// untouched fails the test when read: a refusal must come before a decoder reads the body.
type untouched struct{ t *testing.T }

func (u untouched) Read([]byte) (int, error) {
	u.t.Error("the body was read")
	return 0, io.EOF
}

// TestTooManyCodings: a stack past MaxCodings is refused by Codings, and by NewReader for
// a caller that did not ask Codings, before any decoder, which would read the body's first
// octets, is built.
func TestTooManyCodings(t *testing.T) {
	header := strings.TrimSuffix(strings.Repeat("gzip,", 10000), ",")
	tests := []struct {
		name string
		do   func() error
	}{
		{"Codings", func() error { _, err := Codings(header); return err }},
		{"Read", func() error { _, err := Read(untouched{t}, header, 1<<20); return err }},
		{"NewReader", func() error {
			_, _, err := NewReader(untouched{t}, strings.Split(header, ","))
			return err
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.do(); !errors.Is(err, ErrUnsupported) {
				t.Fatalf("err %v, want %v", err, ErrUnsupported)
			}
		})
	}
}

// A coding on a second field line, or under a key in another case, is part of the value:
// missed, a body still coded would be taken for its content.
func TestHeader(t *testing.T) {
	tests := []struct {
		name string
		h    map[string][]string
		want string
	}{
		{"none", map[string][]string{"Content-Type": {"text/html"}}, ""},
		{"one line", map[string][]string{"Content-Encoding": {"gzip"}}, "gzip"},
		{"two lines", map[string][]string{"Content-Encoding": {"gzip", "br"}}, "gzip,br"},
		{"lower-case key after the canonical one", map[string][]string{"Content-Encoding": {"gzip"}, "content-encoding": {"br"}}, "gzip,br"},
		{"lower-case key alone", map[string][]string{"content-encoding": {"deflate"}}, "deflate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Header(tc.h); got != tc.want {
				t.Errorf("Header(%v) = %q, want %q", tc.h, got, tc.want)
			}
		})
	}
}
