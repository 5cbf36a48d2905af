// Package contentcoding decodes HTTP response bodies by their Content-Encoding, under a cap
// on the decoded octets and one on the octets read: the one decoder of Trawl's HTTP
// clients (the fetchers', the renderers'). gzip (x-gzip) and deflate (zlib, or raw
// deflate as some servers send it) are decoded, in the order the header lists them;
// another coding (br, zstd, compress), or more than MaxCodings stacked, is refused, never
// passed on as if it were content.
package contentcoding

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// ErrUnsupported marks a Content-Encoding naming a coding this package does not decode.
var ErrUnsupported = errors.New("contentcoding: unsupported content coding")

// MaxCodings is the most codings decoded stacked on one body: curl's limit since
// CVE-2022-32206. No server stacks more than two, and each costs a decoder of about 45 KiB
// before a body octet is read (a header of "gzip,gzip,…" would otherwise hold thousands).
const MaxCodings = 5

// Codings returns the codings a Content-Encoding value names, in the order they were
// applied, identity left out: none for a body that is its content. An error wrapping
// ErrUnsupported names a coding that cannot be decoded, or more than MaxCodings of them.
func Codings(header string) ([]string, error) {
	var out []string
	for c := range strings.SplitSeq(header, ",") {
		switch c = strings.ToLower(strings.TrimSpace(c)); c {
		case "", "identity":
			continue
		case "gzip", "x-gzip":
			c = "gzip"
		case "deflate":
		default:
			return nil, fmt.Errorf("%w: %q", ErrUnsupported, c)
		}
		if len(out) == MaxCodings {
			return nil, fmt.Errorf("%w: more than %d codings stacked", ErrUnsupported, MaxCodings)
		}
		out = append(out, c)
	}
	return out, nil
}

// Header is h's Content-Encoding as one value: every field line of it, in order, joined
// as one list (RFC 9110, 5.3), so that a coding on a second line is not missed. Keys are
// matched without regard to case: a header carried in a message need not be canonical.
func Header(h map[string][]string) string {
	values := h["Content-Encoding"]
	var other []string // keys in another case, in a stable order
	for k := range h {
		if k != "Content-Encoding" && strings.EqualFold(k, "Content-Encoding") {
			other = append(other, k)
		}
	}
	if len(other) == 0 {
		return strings.Join(values, ",")
	}
	slices.Sort(other)
	values = slices.Clone(values)
	for _, k := range other {
		values = append(values, h[k]...)
	}
	return strings.Join(values, ",")
}

// WireCap is the most body octets to read from the network for a body whose decoded
// octets are capped at maxBody: room for a coding's overhead on data that does not
// compress. Whichever cap is reached first cuts the body (truncated).
func WireCap(maxBody int64) int64 { return maxBody + maxBody/16 + 64<<10 }

// NewReader returns the content of r, a body encoded with codings (as Codings returns
// them), and a func that releases the decoders. An empty body is an empty content. More
// than MaxCodings are refused before a decoder is built.
func NewReader(r io.Reader, codings []string) (io.Reader, func(), error) {
	if len(codings) > MaxCodings {
		return nil, nil, fmt.Errorf("%w: %d codings stacked, more than %d", ErrUnsupported, len(codings), MaxCodings)
	}
	var closers []io.Closer
	release := func() {
		for _, c := range closers {
			_ = c.Close()
		}
	}
	for i := len(codings) - 1; i >= 0; i-- {
		br := bufio.NewReader(r)
		if _, err := br.Peek(1); errors.Is(err, io.EOF) {
			// Nothing was sent: nothing to decode.
			return strings.NewReader(""), release, nil
		}
		switch codings[i] {
		case "gzip":
			zr, err := gzip.NewReader(br)
			if err != nil {
				release()
				return nil, nil, fmt.Errorf("contentcoding: gzip: %w", err)
			}
			closers, r = append(closers, zr), zr
		case "deflate":
			// RFC 9110 deflate is zlib-wrapped; some servers send raw deflate instead.
			if h, err := br.Peek(2); err == nil && isZlibHeader(h) {
				zr, err := zlib.NewReader(br)
				if err != nil {
					release()
					return nil, nil, fmt.Errorf("contentcoding: deflate: %w", err)
				}
				closers, r = append(closers, zr), zr
			} else {
				fr := flate.NewReader(br)
				closers, r = append(closers, fr), fr
			}
		default:
			release()
			return nil, nil, fmt.Errorf("%w: %q", ErrUnsupported, codings[i])
		}
	}
	return r, release, nil
}

// isZlibHeader reports whether h starts a zlib stream (RFC 1950): deflate, a window of at
// most 32 KiB, and a check sum over the two octets.
func isZlibHeader(h []byte) bool {
	return h[0]&0x0f == 8 && h[0]>>4 <= 7 && (uint16(h[0])<<8|uint16(h[1]))%31 == 0
}

// Body is a response body read whole.
type Body struct {
	// Content is the body decoded, at most the cap.
	Content []byte
	// Raw is the body as received (content coding intact), when it differs from Content;
	// nil when the body had no coding. Truncated applies to it too.
	Raw []byte
	// Truncated says a cap was reached: the content or the octets read went on past it.
	Truncated bool
}

// Read reads the body r of a response whose Content-Encoding is header: at most
// WireCap(maxBody) octets of it, decoded, at most maxBody octets of content kept.
func Read(r io.Reader, header string, maxBody int64) (*Body, error) {
	codings, err := Codings(header)
	if err != nil {
		return nil, err
	}
	wireCap := WireCap(maxBody)
	wire := &io.LimitedReader{R: r, N: wireCap}
	if len(codings) == 0 {
		b, err := io.ReadAll(io.LimitReader(r, maxBody+1))
		if err != nil {
			return nil, fmt.Errorf("contentcoding: read body: %w", err)
		}
		out := &Body{Content: b}
		if int64(len(b)) > maxBody {
			out.Content, out.Truncated = b[:maxBody], true
		}
		return out, nil
	}
	var raw bytes.Buffer
	tee := io.TeeReader(wire, &raw)
	content, release, err := NewReader(tee, codings)
	if err != nil {
		return nil, err
	}
	defer release()
	b, err := io.ReadAll(io.LimitReader(content, maxBody+1))
	out := &Body{Content: b}
	switch {
	case int64(len(b)) > maxBody:
		out.Content, out.Truncated = b[:maxBody], true
	case err != nil && wire.N == 0 && errors.Is(err, io.ErrUnexpectedEOF):
		// The wire cap cut the encoded body short.
		out.Truncated = true
	case err != nil:
		return nil, fmt.Errorf("contentcoding: decode %s body: %w", header, err)
	default:
		// The content ended: octets after it belong to the body as received too (still
		// under the wire cap).
		_, _ = io.Copy(io.Discard, tee)
		out.Truncated = wire.N == 0
	}
	out.Raw = raw.Bytes()
	return out, nil
}
