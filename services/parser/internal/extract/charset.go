package extract

import (
	"bytes"
	"io"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/html/charset"
	"golang.org/x/text/transform"
)

// decode returns a reader yielding body as UTF-8 and the name of the encoding it was read
// as. The encoding comes from, in order: a byte order mark, the Content-Type charset, a
// <meta charset> / http-equiv declaration in the first 1024 bytes (charset.DetermineEncoding).
func decode(body []byte, contentType string) (io.Reader, string) {
	if declaresUTF8(contentType) && !bytes.HasPrefix(body, []byte{0xFE, 0xFF}) && !bytes.HasPrefix(body, []byte{0xFF, 0xFE}) {
		// What DetermineEncoding answers, certain, for the common header when no UTF-16
		// byte order mark overrides it, without parsing the header again.
		return bytes.NewReader(bytes.TrimPrefix(body, []byte("\xef\xbb\xbf"))), "utf-8"
	}
	return decodeDetected(body, contentType)
}

// decodeDetected is decode by charset.DetermineEncoding alone.
func decodeDetected(body []byte, contentType string) (io.Reader, string) {
	enc, name, certain := charset.DetermineEncoding(body, contentType)
	// With nothing declared, DetermineEncoding guesses windows-1252 unless the first 1024
	// bytes alone prove UTF-8; an English page whose first non-ASCII character comes later
	// would then be garbled. A body that is valid UTF-8 throughout is UTF-8.
	if !certain && name == "windows-1252" && validUTF8(body) {
		name = "utf-8"
	}
	if name == "utf-8" {
		// The tokenizer and collapser cope with invalid UTF-8 themselves, so the common
		// case skips a transcoding copy.
		return bytes.NewReader(bytes.TrimPrefix(body, []byte("\xef\xbb\xbf"))), name
	}
	return transform.NewReader(bytes.NewReader(body), enc.NewDecoder()), name
}

// validUTF8 is utf8.Valid ignoring a rune cut at the end, since bodies may be truncated
// at the fetcher's size cap.
func validUTF8(b []byte) bool {
	for i := len(b) - 1; i >= 0 && i > len(b)-utf8.UTFMax; i-- {
		if b[i] < utf8.RuneSelf {
			break
		}
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				b = b[:i]
			}
			break
		}
	}
	return utf8.Valid(b)
}

// declaresUTF8 reports whether contentType is exactly "<type>/<subtype>; charset=utf-8"
// (any case) with a lowercase media type of plain token characters: a value
// mime.ParseMediaType reads as that charset alone.
func declaresUTF8(contentType string) bool {
	mt, param, ok := strings.Cut(contentType, "; ")
	if !ok || !strings.EqualFold(param, "charset=utf-8") {
		return false
	}
	slash := strings.IndexByte(mt, '/')
	if slash <= 0 || slash == len(mt)-1 {
		return false
	}
	for i := 0; i < len(mt); i++ {
		c := mt[i]
		if i != slash && !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}
