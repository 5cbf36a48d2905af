package extract

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/html/charset"
	"golang.org/x/text/transform"

	"github.com/trawl/trawl/shared/urlnorm"
)

// cssRefs returns the resources a style sheet (or a style attribute's declarations) loads,
// in order: every url(), the strings of image-set(), and the target of each @import. It is
// a scanner of CSS Syntax Level 3 tokens reduced to what finds those: comments, strings
// and escapes are read as the specification reads them, so a url() inside a comment or a
// string is not taken, and an escaped character in a URL comes out as the character.
// @namespace names a namespace, not a resource, so its URL is skipped. At most max
// references are returned; more says some were left.
func cssRefs(css []byte, max int) (refs []string, more bool) {
	s := cssScanner{b: css}
	var (
		atRule   string // the at-rule whose prelude is being read ("" outside one)
		depth    int    // open parentheses and functions
		setDepth = -1   // depth inside image-set(), whose strings are URLs; -1 outside
	)
	add := func(u string) bool {
		if len(refs) >= max {
			more = true
			return false
		}
		refs = append(refs, u)
		return true
	}
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '/' && s.peek(1) == '*':
			end := bytes.Index(s.b[s.i+2:], []byte("*/"))
			if end < 0 {
				return refs, more
			}
			s.i += 2 + end + 2
		case c == '"' || c == '\'':
			str := s.str(c)
			if atRule == "import" && depth == 0 || setDepth >= 0 && depth >= setDepth {
				if !add(str) {
					return refs, more
				}
				if atRule == "import" {
					atRule = "import-done"
				}
			}
		case c == '@':
			s.i++
			atRule = strings.ToLower(s.ident())
		case c == ';' || c == '{' || c == '}':
			s.i++
			atRule, depth, setDepth = "", 0, -1
		case c == '(':
			s.i++
			depth++
		case c == ')':
			s.i++
			if depth > 0 {
				depth--
			}
			if setDepth > depth {
				setDepth = -1
			}
		case c == '\\' || isNameStart(c) || c == '-':
			start := s.i
			name := s.ident()
			if s.i == start {
				s.i++ // a lone "-" or a backslash before a newline: not a name
				continue
			}
			if s.peek(0) != '(' {
				continue
			}
			s.i++
			switch strings.ToLower(name) {
			case "url":
				u, ok := s.url()
				if ok && atRule != "namespace" && atRule != "import-done" {
					if !add(u) {
						return refs, more
					}
					if atRule == "import" {
						atRule = "import-done"
					}
				}
			case "image-set", "-webkit-image-set":
				depth++
				if setDepth < 0 {
					setDepth = depth
				}
			default:
				depth++
			}
		default:
			s.i++
		}
	}
	return refs, more
}

type cssScanner struct {
	b []byte
	i int
}

func (s *cssScanner) peek(n int) byte {
	if s.i+n < len(s.b) {
		return s.b[s.i+n]
	}
	return 0
}

func isNameStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c >= 0x80
}

func isName(c byte) bool { return isNameStart(c) || c >= '0' && c <= '9' || c == '-' }

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func cssSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' }

// ident reads a name (escapes included) and returns it; nothing when none starts here.
func (s *cssScanner) ident() string {
	var b strings.Builder
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case isName(c):
			b.WriteByte(c)
			s.i++
		case c == '\\' && s.peek(1) != '\n' && s.peek(1) != '\r' && s.peek(1) != '\f' && s.i+1 < len(s.b):
			s.i++
			b.WriteString(s.escape())
		default:
			return b.String()
		}
	}
	return b.String()
}

// escape reads what follows a backslash: up to six hex digits and one white space, or
// one character as itself.
func (s *cssScanner) escape() string {
	if s.i >= len(s.b) {
		return "\uFFFD"
	}
	if !isHex(s.b[s.i]) {
		r, n := utf8.DecodeRune(s.b[s.i:])
		s.i += n
		return string(r)
	}
	j := s.i
	for j < len(s.b) && j-s.i < 6 && isHex(s.b[j]) {
		j++
	}
	v, _ := strconv.ParseUint(string(s.b[s.i:j]), 16, 32)
	s.i = j
	if s.i < len(s.b) && cssSpace(s.b[s.i]) {
		if s.b[s.i] == '\r' && s.peek(1) == '\n' {
			s.i++
		}
		s.i++
	}
	r := rune(v)
	if v == 0 || v > utf8.MaxRune || r >= 0xD800 && r <= 0xDFFF {
		r = utf8.RuneError
	}
	return string(r)
}

// str reads a string opened by quote; an unescaped newline ends it (a bad string, which
// is still returned: the URL before it is what an author meant).
func (s *cssScanner) str(quote byte) string {
	s.i++
	var b strings.Builder
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == quote:
			s.i++
			return b.String()
		case c == '\n' || c == '\r' || c == '\f':
			return b.String()
		case c == '\\':
			s.i++
			switch s.peek(0) {
			case '\n', '\f':
				s.i++ // a line continuation
			case '\r':
				s.i++
				if s.peek(0) == '\n' {
					s.i++
				}
			default:
				b.WriteString(s.escape())
			}
		default:
			b.WriteByte(c)
			s.i++
		}
	}
	return b.String()
}

// url reads the rest of url( ... ): a quoted string or an unquoted URL, then the closing
// parenthesis. ok is false for a bad url (a quote, parenthesis or white space inside an
// unquoted one), which the specification discards.
func (s *cssScanner) url() (string, bool) {
	for s.i < len(s.b) && cssSpace(s.b[s.i]) {
		s.i++
	}
	if c := s.peek(0); c == '"' || c == '\'' {
		u := s.str(c)
		s.skipTo(')')
		return u, true
	}
	var b strings.Builder
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == ')':
			s.i++
			return b.String(), true
		case cssSpace(c):
			for s.i < len(s.b) && cssSpace(s.b[s.i]) {
				s.i++
			}
			if s.peek(0) == ')' {
				s.i++
				return b.String(), true
			}
			s.skipTo(')')
			return "", false
		case c == '"' || c == '\'' || c == '(':
			s.skipTo(')')
			return "", false
		case c == '\\':
			s.i++
			b.WriteString(s.escape())
		default:
			b.WriteByte(c)
			s.i++
		}
	}
	return b.String(), true
}

// skipTo moves past the next c (or to the end), stepping over escapes.
func (s *cssScanner) skipTo(c byte) {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '\\':
			s.i += 2
		case c:
			s.i++
			return
		default:
			s.i++
		}
	}
}

// CSSInput is one fetched style sheet.
type CSSInput struct {
	URL         string // the sheet's (normalised) URL: the base of its references
	Body        []byte
	ContentType string // full Content-Type value; its charset parameter is honoured
}

// ExtractCSS finds the resources a style sheet loads (url(), image-set(), @import) and
// returns them as Result.Embeds, resolved against the sheet's URL; every other field but
// Charset, BaseURL, Dropped and the caps stays empty. The encoding is, in order, a byte
// order mark, the Content-Type charset, an @charset rule, else UTF-8 (CSS Syntax §3.2).
func ExtractCSS(in CSSInput, opt Options) (*Result, error) {
	opt = withDefaults(opt)
	res := &Result{}
	body := in.Body
	if len(body) > opt.MaxBytes {
		body, res.StoppedAt = body[:opt.MaxBytes], "bytes"
	}
	body, res.Charset = decodeCSS(body, in.ContentType)
	page, err := urlnorm.Parse(in.URL)
	if err != nil {
		return res, fmt.Errorf("%w: %w", ErrPageURL, err)
	}
	res.BaseURL = page.String()
	refs, more := cssRefs(body, opt.MaxLinks)
	res.EmbedsCapped = more
	var e embedSet
	e.init(len(refs))
	for _, r := range refs {
		e.add(&res.Dropped, r, "css", "", opt.MaxLinks)
	}
	res.Embeds = e.resolve(&res.Dropped, page)
	return res, nil
}

// decodeCSS returns body as UTF-8 and the encoding it was read as.
func decodeCSS(body []byte, contentType string) ([]byte, string) {
	name := ""
	switch {
	case bytes.HasPrefix(body, []byte("\xef\xbb\xbf")):
		return body[3:], "utf-8"
	case bytes.HasPrefix(body, []byte("\xfe\xff")):
		name = "utf-16be"
	case bytes.HasPrefix(body, []byte("\xff\xfe")):
		name = "utf-16le"
	}
	if name == "" {
		if _, params, ok := strings.Cut(contentType, ";"); ok {
			for _, p := range strings.Split(params, ";") {
				k, v, _ := strings.Cut(p, "=")
				if strings.EqualFold(strings.TrimSpace(k), "charset") {
					name = strings.Trim(strings.TrimSpace(v), `"'`)
				}
			}
		}
	}
	if name == "" {
		// The rule is exactly `@charset "name";` at the very start, as the specification
		// has it.
		const prefix = `@charset "`
		if rest, ok := bytes.CutPrefix(body, []byte(prefix)); ok {
			if end := bytes.Index(rest, []byte(`";`)); end > 0 && end < 64 {
				name = string(rest[:end])
			}
		}
	}
	enc, canon := charset.Lookup(name)
	if enc == nil || canon == "utf-8" {
		return body, "utf-8"
	}
	out, _, err := transform.Bytes(enc.NewDecoder(), body)
	if err != nil && !errors.Is(err, transform.ErrShortSrc) {
		return body, "utf-8"
	}
	return out, canon
}
