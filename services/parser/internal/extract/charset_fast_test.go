package extract

import (
	"io"
	"testing"
)

// decode's shortcut for "; charset=utf-8" must read every body as the detection does:
// same encoding name, same bytes, whatever the body's marks and declarations.
func TestDeclaredUTF8ShortcutMatchesDetection(t *testing.T) {
	types := []string{"text/html; charset=utf-8", "text/html; charset=UTF-8", "application/xhtml+xml; charset=utf-8",
		"text/html; charset=utf8", "text/html;charset=utf-8", "text/html; charset=\"utf-8\"", "text/html; charset=utf-8; x=y",
		"Text/HTML; charset=utf-8", "text/html ; charset=utf-8", "text; charset=utf-8", "/html; charset=utf-8",
		"text/; charset=utf-8", "text/html; charset=latin1", "text/html", ""}
	bodies := []string{"<p>plain</p>", "\xef\xbb\xbf<p>bom</p>", "\xfe\xff\x00<\x00p", "\xff\xfe<\x00p\x00",
		`<meta charset="windows-1252"><p>caf` + "\xe9", `<meta charset="shift_jis"><p>x`, "<p>caf\xc3\xa9</p>", "", "\xfe", "\xff"}
	shortcuts := 0
	for _, ct := range types {
		for _, body := range bodies {
			if declaresUTF8(ct) {
				shortcuts++
			}
			r, name := decode([]byte(body), ct)
			wr, wname := decodeDetected([]byte(body), ct)
			got, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			want, err := io.ReadAll(wr)
			if err != nil {
				t.Fatal(err)
			}
			if name != wname || string(got) != string(want) {
				t.Errorf("%q, body %q: decode gives %s %q, detection %s %q", ct, body, name, got, wname, want)
			}
		}
	}
	if shortcuts == 0 {
		t.Error("the shortcut never applied")
	}
}
