package extract

import (
	"bytes"

	"golang.org/x/net/html"
)

// attrs reads up to four attributes of the current tag (an array keeps it allocation-free)
// and reports whether the tag has any attribute at all. The common tag is read straight
// from its raw bytes (rawAttrs); the others through the tokenizer.
func attrs(z *html.Tokenizer, want ...string) (out [4]string, has bool) {
	if out, has, ok := rawAttrs(z.Raw(), want); ok {
		return out, has
	}
	return tagAttrs(z, want...)
}

// tagAttrs is attrs through z.TagAttr, which copies every attribute's name and value
// (to replace NUL bytes) before lowering the name and unescaping the value.
func tagAttrs(z *html.Tokenizer, want ...string) (out [4]string, has bool) {
	for more, first := true, true; more; first = false {
		var k, v []byte
		k, v, more = z.TagAttr()
		if first {
			// Only attributes with a name are kept, so an empty first name means none.
			has = len(k) > 0
		}
		for i, w := range want {
			// The first occurrence of an attribute wins, as in the HTML parser.
			if out[i] == "" && string(k) == w {
				out[i] = string(v)
			}
		}
	}
	return out, has
}

// rawAttrs reads the wanted attributes of a start tag from its raw bytes by the
// tokenizer's own attribute rules (x/net/html readTag), sparing TagAttr's two copies per
// attribute. It gives up (ok false) on what TagAttr would change rather than only slice:
// a NUL or CR anywhere in the tag, a wanted value with a character reference, or a tag
// cut short by the end of the input. want holds lowercase names.
func rawAttrs(raw []byte, want []string) (out [4]string, has, ok bool) {
	n := len(raw)
	if n < 3 || raw[0] != '<' || raw[n-1] != '>' || bytes.IndexByte(raw, 0) >= 0 || bytes.IndexByte(raw, '\r') >= 0 {
		return out, false, false
	}
	isSpace := func(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\f' }
	skip := func(i int) int {
		for i < n && isSpace(raw[i]) {
			i++
		}
		return i
	}
	// The tag name: its first letter was read with the '<'; it ends at white space
	// (consumed) or at '/' or '>' (not consumed).
	i := 2
	for ; i < n; i++ {
		if c := raw[i]; isSpace(c) {
			i++
			break
		} else if c == '/' || c == '>' {
			break
		}
	}
	i = skip(i)
	var seen [4]bool
	for i < n && raw[i] != '>' {
		// The name: a leading '=' belongs to it; it ends before '=', white space, '/' or '>'.
		ks := i
		for i < n {
			c := raw[i]
			if c == '=' && i == ks {
				i++
				continue
			}
			if c == '=' || isSpace(c) || c == '/' || c == '>' {
				break
			}
			i++
		}
		key := raw[ks:i]
		// The value, if an '=' follows (after white space); a '/' there is consumed.
		var val []byte
		i = skip(i)
		if i < n {
			switch raw[i] {
			case '/':
				i++
			case '=':
				i = skip(i + 1)
				if i < n && raw[i] != '>' {
					switch q := raw[i]; q {
					case '\'', '"':
						j := bytes.IndexByte(raw[i+1:], q)
						if j < 0 {
							return out, false, false
						}
						val = raw[i+1 : i+1+j]
						i += j + 2
					default:
						vs := i
						for i < n && !isSpace(raw[i]) && raw[i] != '>' {
							i++
						}
						val = raw[vs:i]
						if i < n && raw[i] != '>' {
							i++ // the white space ending the value
						}
					}
				}
			}
		}
		if len(key) > 0 {
			has = true
			for j, w := range want {
				if !seen[j] && w != "" && equalLower(key, w) {
					seen[j] = true
					if bytes.IndexByte(val, '&') >= 0 {
						return out, false, false
					}
					out[j] = string(val)
				}
			}
		}
		i = skip(i)
	}
	if i != n-1 {
		// Read otherwise than the tokenizer did: its tag ends at the first '>' outside a
		// quoted value.
		return out, false, false
	}
	return out, has, true
}

// equalLower reports whether b lowered (ASCII letters only, as the tokenizer lowers
// attribute names) is w.
func equalLower(b []byte, w string) bool {
	if len(b) != len(w) {
		return false
	}
	for i := range len(b) {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != w[i] {
			return false
		}
	}
	return true
}
