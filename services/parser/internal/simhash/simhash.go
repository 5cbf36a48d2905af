// Package simhash fingerprints a page's visible text for content deduplication: an exact
// digest (two texts are identical) and a 64-bit SimHash (two texts are nearly identical).
//
// # Tokens and features
//
// The text is lowercased and cut into tokens: maximal runs of letters, digits and
// combining marks; every other rune separates tokens. Scripts written without spaces
// between words (Han, Hiragana, Katakana, Thai, Lao, Khmer, Myanmar, Tibetan) give one
// token per character, so a Chinese or Japanese page is not one giant "word". The
// features are the overlapping 3-token shingles ("a b c", "b c d", …); a text of one or
// two tokens has one feature, all of them. Each feature is hashed with XXH64 (seed 0): a
// published, stable hash, so fingerprints computed by different processes and releases
// agree. (hash/maphash is seeded per process and would make every stored fingerprint
// meaningless after a restart.) HashVersion names this scheme.
//
// # SimHash (Charikar 2002)
//
// For each bit position i, the features whose hash has bit i set vote +1 and the others
// −1 (a feature occurring twice votes twice); bit i of the SimHash is 1 when the sum is
// positive. Texts sharing most of their features get hashes differing in few bits: the
// Hamming distance estimates the angle between the texts' feature vectors. A one-word edit
// changes three shingles out of n, so each bit flips with a probability of about
// 0.04·√(300/n): the distance is small but random. Measured over 2000 random one-word
// edits, it is within 3 bits for 73 % of 300-word texts, 86 % at 500 words, 96 % at 1000
// and 99.5 % at 3000; unrelated texts are about 32 bits apart (the closest of 2000 pairs:
// 16). Fewer tokens per feature would catch more small edits but bring unrelated texts
// with a common vocabulary close (with single words the closest pair was 8 bits apart at
// 300 words and 3 at 3000: a false match).
//
// # Exact digest
//
// TextDigest is the SHA-256 of the text with every run of white space folded into one
// space and the ends trimmed. It is not Document.Digest, which hashes the raw body: two
// pages with different markup (navigation, ads, scripts) but the same visible text have
// the same TextDigest.
package simhash

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// HashVersion identifies the tokenisation, shingle size and feature hash. Change it (and
// the golden values in the tests) whenever Of would return a different SimHash for the same
// text: stored fingerprints made by the old scheme are not comparable with new ones.
const HashVersion = "sh64-xxh64-w3-v1"

// ShingleSize is the number of tokens in one feature.
const ShingleSize = 3

// Bands is the number of 16-bit bands a SimHash is split into for lookups. Two hashes
// within Hamming distance Bands−1 agree exactly on at least one band (pigeonhole), so
// MaxDistance is the largest distance a banded lookup is guaranteed to find.
const (
	Bands       = 4
	BandBits    = 64 / Bands
	MaxDistance = Bands - 1
)

// Fingerprint is what content deduplication knows about a text.
type Fingerprint struct {
	SimHash uint64
	Digest  string // hex SHA-256 of the whitespace-normalised text; "" when the text is blank
	Tokens  int    // tokens found; 0 means there is nothing to compare
}

// Of fingerprints text. A blank text gives the zero Fingerprint.
func Of(text string) Fingerprint {
	norm := collapse(text)
	if norm == "" {
		return Fingerprint{}
	}
	fp := Fingerprint{Digest: digest(norm)}
	fp.SimHash, fp.Tokens = simHash(norm)
	return fp
}

// digest is the hex SHA-256 of s, read in place: []byte(s) would copy a text of up to
// several MiB, and Sum256 only reads its input.
func digest(s string) string {
	sum := sha256.Sum256(unsafe.Slice(unsafe.StringData(s), len(s)))
	return hex.EncodeToString(sum[:])
}

// collapse folds every run of white space into one space and trims the ends, as
// strings.Join(strings.Fields(s), " ") does. The parser's text is already in that form,
// so the common case is one scan that returns s itself.
func collapse(s string) string {
	if isCollapsed(s) {
		return s
	}
	return strings.Join(strings.Fields(s), " ")
}

func isCollapsed(s string) bool {
	prevSpace := true // so that a leading space fails
	for i := 0; i < len(s); {
		b := s[i]
		if b-'!' < utf8.RuneSelf-'!' {
			// Visible ASCII, most of a text: one comparison.
			prevSpace = false
			i++
			continue
		}
		if b < utf8.RuneSelf {
			i++
			if b == ' ' {
				if prevSpace {
					return false
				}
				prevSpace = true
				continue
			}
			if '\t' <= b && b <= '\r' { // the other ASCII white space
				return false
			}
			prevSpace = false
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if unicode.IsSpace(r) {
			return false
		}
		i += n
		prevSpace = false
	}
	return s == "" || !prevSpace
}

func asciiSpace(b byte) bool {
	return b == ' ' || b == '\t' || b == '\n' || b == '\r' || b == '\f' || b == '\v'
}

// simHash computes the SimHash of text and counts its tokens. A feature is its tokens,
// lowered, joined by single spaces. In the parser's collapsed text that is most often a
// stretch of s itself (lowercase ASCII words one space apart), which is hashed in place;
// only other shingles are assembled in a buffer, from lowered copies of the tokens that
// lowering changes.
func simHash(s string) (uint64, int) {
	var (
		v    voter
		ring [ShingleSize]shingleTok // the last tokens; ring[(n-1)%ShingleSize] is the newest
		n    int                     // tokens seen
		buf  = make([]byte, 0, 64)
	)
	for z := (tokenizer{s: s}); ; {
		tok, ok := z.next()
		if !ok {
			break
		}
		t := &ring[n%ShingleSize]
		t.span = tok
		t.same = isLowerASCII(s[tok.start:tok.end])
		if !t.same {
			t.low = appendLower(t.low[:0], s[tok.start:tok.end])
		}
		prevEnd := -2
		if n > 0 {
			prevEnd = ring[(n-1)%ShingleSize].end
		}
		t.joined = t.same && tok.start == prevEnd+1 && s[prevEnd] == ' '
		n++
		if n >= ShingleSize {
			v.add(featureHash(s, &ring, n, ShingleSize, &buf))
		}
	}
	if n == 0 {
		return 0, 0
	}
	if n < ShingleSize {
		v.add(featureHash(s, &ring, n, n, &buf))
	}
	return v.sum(), n
}

// shingleTok is a token of a shingle: its place in the text and, unless lowering leaves
// it as it is (same), its lowered form.
type shingleTok struct {
	span
	same   bool
	joined bool // same, and one space after the previous token in s
	low    []byte
}

// featureHash hashes the shingle of the k newest of n tokens.
func featureHash(s string, ring *[ShingleSize]shingleTok, n, k int, buf *[]byte) uint64 {
	first := n - k
	contiguous := ring[first%ShingleSize].same
	for i := first + 1; i < n; i++ {
		contiguous = contiguous && ring[i%ShingleSize].joined
	}
	if contiguous {
		return xxhash.Sum64String(s[ring[first%ShingleSize].start:ring[(n-1)%ShingleSize].end])
	}
	b := (*buf)[:0]
	for i := first; i < n; i++ {
		if i > first {
			b = append(b, ' ')
		}
		if t := &ring[i%ShingleSize]; t.same {
			b = append(b, s[t.start:t.end]...)
		} else {
			b = append(b, t.low...)
		}
	}
	*buf = b
	return xxhash.Sum64(b)
}

// isLowerASCII reports whether lowering tok leaves it unchanged because it is ASCII with
// no capital letter.
func isLowerASCII(tok string) bool {
	for i := 0; i < len(tok); i++ {
		if b := tok[i]; b >= utf8.RuneSelf || 'A' <= b && b <= 'Z' {
			return false
		}
	}
	return true
}

// appendLower appends tok lowercased, as strings.ToLower would.
func appendLower(buf []byte, tok string) []byte {
	for i := 0; i < len(tok); {
		b := tok[i]
		if b < utf8.RuneSelf {
			if 'A' <= b && b <= 'Z' {
				b += 'a' - 'A'
			}
			buf = append(buf, b)
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(tok[i:])
		buf = utf8.AppendRune(buf, unicode.ToLower(r))
		i += n
	}
	return buf
}

// spread[b] has byte k set to bit k of b: adding spread values counts 8 bits at once.
var spread = func() (t [256]uint64) {
	for b := range t {
		for k := range 8 {
			t[b] |= uint64(b>>k&1) << (8 * k)
		}
	}
	return t
}()

// voter counts, for each bit position, how many feature hashes have it set. Counting in
// eight 8-bit lanes per byte of the hash (flushed before a lane can overflow) takes 8
// table additions per feature instead of 64 bit tests.
type voter struct {
	lanes    [8]uint64 // lanes[j] byte k counts bit 8j+k since the last flush
	pending  int
	counts   [64]int32
	features int32
}

func (v *voter) add(h uint64) {
	for j := range v.lanes {
		v.lanes[j] += spread[byte(h>>(8*j))]
	}
	v.features++
	if v.pending++; v.pending == 255 {
		v.flush()
	}
}

func (v *voter) flush() {
	for j, l := range v.lanes {
		for k := range 8 {
			v.counts[8*j+k] += int32(l >> (8 * k) & 0xff)
		}
	}
	v.lanes, v.pending = [8]uint64{}, 0
}

// sum sets bit i when more than half the features vote for it: the ±1 votes sum to
// 2·set − features, and a tie gives 0.
func (v *voter) sum() uint64 {
	v.flush()
	var h uint64
	for i, c := range v.counts {
		if 2*c > v.features {
			h |= 1 << i
		}
	}
	return h
}

// span is a token: s[start:end].
type span struct{ start, end int }

// tokenizer yields the tokens of a text in order.
type tokenizer struct {
	s string
	i int
}

func (z *tokenizer) next() (span, bool) {
	s := z.s
	start := -1
	for z.i < len(s) {
		i := z.i
		b := s[i]
		if b < utf8.RuneSelf {
			z.i++
			if isASCIIWord(b) {
				if start < 0 {
					start = i
				}
				continue
			}
			if start >= 0 {
				return span{start, i}, true
			}
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			// An invalid byte separates tokens, like any other non-word rune.
		case unspaced(r):
			if start >= 0 {
				return span{start, i}, true // the character is read by the next call
			}
			z.i += n
			return span{i, i + n}, true
		case unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r):
			z.i += n
			if start < 0 {
				start = i
			}
			continue
		}
		z.i += n
		if start >= 0 {
			return span{start, i}, true
		}
	}
	if start >= 0 {
		return span{start, len(s)}, true
	}
	return span{}, false
}

func isASCIIWord(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b >= 'A' && b <= 'Z'
}

// unspacedScripts are written without spaces between words; each character is a token.
var unspacedScripts = []*unicode.RangeTable{
	unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Thai, unicode.Lao,
	unicode.Khmer, unicode.Myanmar, unicode.Tibetan,
}

func unspaced(r rune) bool {
	// Everything below U+0E00 (Latin, Greek, Cyrillic, Arabic, Hebrew, Indic …) is spaced.
	return r >= 0x0E00 && unicode.IsOneOf(unspacedScripts, r)
}

// Distance is the Hamming distance between two SimHashes.
func Distance(a, b uint64) int { return bits.OnesCount64(a ^ b) }

// Format writes a SimHash as the 16 lowercase hex digits used on the wire and in Redis.
func Format(h uint64) string {
	const digits = "0123456789abcdef"
	var b [16]byte
	for i := 15; i >= 0; i-- {
		b[i] = digits[h&0xf]
		h >>= 4
	}
	return string(b[:])
}

// Parse reads a SimHash written by Format.
func Parse(s string) (uint64, error) {
	if len(s) != 16 {
		return 0, fmt.Errorf("simhash: %q: want 16 hex digits", s)
	}
	h, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("simhash: %q: %w", s, err)
	}
	return h, nil
}

// Band returns band i (0 = the most significant 16 bits): the first hex digits of the
// formatted hash are band 0.
func Band(h uint64, i int) uint16 {
	return uint16(h >> (64 - BandBits*(i+1)))
}
