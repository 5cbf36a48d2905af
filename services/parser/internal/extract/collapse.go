package extract

import (
	"unicode"
	"unicode/utf8"
	"unsafe"
)

// collapser accumulates text with every run of white space folded into one space and a
// hard byte cap, so hostile pages cannot make the parser hold more than max bytes per
// field. Only whole runes are written, which keeps the output valid UTF-8 even when the
// input is not (invalid bytes become U+FFFD).
type collapser struct {
	buf     []byte
	max     int
	pending bool // a separator is owed before the next visible rune
	full    bool // the cap was reached; later text is dropped
}

func newCollapser(max int) collapser { return collapser{max: max} }

// sep records a word boundary (white space or a block element edge).
func (c *collapser) sep() { c.pending = true }

func (c *collapser) write(p []byte) {
	for i := 0; i < len(p) && !c.full; {
		b := p[i]
		if b < utf8.RuneSelf {
			if asciiSpace(b) {
				c.pending = true
				i++
				continue
			}
			// Copy a run of visible ASCII at once: most text is.
			j := i + 1
			for j < len(p) && visibleASCII[p[j]] {
				j++
			}
			c.putASCII(p[i:j])
			i = j
			continue
		}
		r, n := utf8.DecodeRune(p[i:])
		i += n
		if isSpace(r) {
			c.pending = true
			continue
		}
		c.put(r, utf8.RuneLen(r))
	}
}

func (c *collapser) putASCII(run []byte) {
	sep := c.pending && len(c.buf) > 0
	need := 1
	if sep {
		need = 2
	}
	if len(c.buf)+need > c.max {
		c.full = true
		return
	}
	if sep {
		c.buf = append(c.buf, ' ')
	}
	c.pending = false
	if room := c.max - len(c.buf); len(run) > room {
		run = run[:room]
		c.full = true
	}
	c.buf = append(c.buf, run...)
}

func (c *collapser) writeString(s string) {
	// Ranging over a string yields U+FFFD for invalid bytes, as DecodeRune does.
	for _, r := range s {
		if c.full {
			return
		}
		if isSpace(r) {
			c.pending = true
			continue
		}
		c.put(r, utf8.RuneLen(r))
	}
}

func (c *collapser) put(r rune, size int) {
	need := size
	if c.pending && len(c.buf) > 0 {
		need++
	}
	if len(c.buf)+need > c.max {
		c.full = true
		return
	}
	if c.pending && len(c.buf) > 0 {
		c.buf = append(c.buf, ' ')
	}
	c.pending = false
	c.buf = utf8.AppendRune(c.buf, r)
}

func (c *collapser) String() string { return string(c.buf) }

// take returns the text and gives up the buffer to it, sparing String's copy: the
// collapser must not be written again.
func (c *collapser) take() string {
	s := unsafe.String(unsafe.SliceData(c.buf), len(c.buf))
	c.buf = nil
	c.full = true
	return s
}

func (c *collapser) reset() {
	c.buf = c.buf[:0]
	c.pending = false
	c.full = false
}

// visibleASCII marks the ASCII bytes that are not white space: one load per byte in the
// loop that copies runs of them.
var visibleASCII = func() (t [256]bool) {
	for b := range utf8.RuneSelf {
		t[b] = !asciiSpace(byte(b))
	}
	return t
}()

// isSpace is white space, plus U+FEFF, which survives decoding of BOM-prefixed bodies and
// is invisible.
func isSpace(r rune) bool {
	if r < utf8.RuneSelf {
		return asciiSpace(byte(r))
	}
	return unicode.IsSpace(r) || r == '\ufeff'
}

func asciiSpace(b byte) bool {
	return b == ' ' || b == '\t' || b == '\n' || b == '\r' || b == '\f' || b == '\v'
}
