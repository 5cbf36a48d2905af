package crawlmsg

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"

	"github.com/nats-io/nats.go"
)

// A bundle is one JetStream message carrying several messages of one subject, its parts,
// each with its own headers and data (docs/architecture.md, "The crawl.pages message"). A stored message
// costs the server a publish, a pub-ack, a delivery, an ack and a write whatever its size,
// and at TRAWL_FSYNC=always a synced write and a synced tombstone, so a page travelling
// with fifteen others costs a sixteenth of that. The consume loops hand each part to their
// handler as a message of its own (natsx) and settle the bundle once every part is
// settled: acked when all are done or parked, handed back whole when one is nak'ed.

// BundleHdr marks a bundle; its value is the number of parts.
const BundleHdr = "Trawl-Bundle"

// bundleFormat is the first octet of a bundle's payload: the layout's version. After it,
// per part: the number of header keys, each key and its values, then the data. Every
// count and length is an unsigned varint, every string its length then its octets.
const bundleFormat = 1

// BundleMaxParts bounds the parts of one bundle, written or read.
const BundleMaxParts = 256

// ErrBundle marks a bundle that cannot be read; it is ErrMalformed.
var ErrBundle = fmt.Errorf("%w: bundle", ErrMalformed)

// Bundle returns one message on subject carrying parts (their headers and data). Its
// Nats-Msg-Id is made of the parts' own, so the same parts bundled again are the same
// bundle to the duplicate window.
func Bundle(subject string, parts []*nats.Msg) (*nats.Msg, error) {
	if len(parts) == 0 || len(parts) > BundleMaxParts {
		return nil, fmt.Errorf("crawlmsg: a bundle of %d parts, want 1 to %d", len(parts), BundleMaxParts)
	}
	size := 1
	for _, p := range parts {
		size += 2*binary.MaxVarintLen64 + len(p.Data)
		for k, vs := range p.Header {
			size += 2*binary.MaxVarintLen64 + len(k)
			for _, v := range vs {
				size += binary.MaxVarintLen64 + len(v)
			}
		}
	}
	b := make([]byte, 1, size)
	b[0] = bundleFormat
	id := fnv.New128a()
	for _, p := range parts {
		b = binary.AppendUvarint(b, uint64(len(p.Header)))
		for k, vs := range p.Header {
			b = appendString(b, k)
			b = binary.AppendUvarint(b, uint64(len(vs)))
			for _, v := range vs {
				b = appendString(b, v)
			}
		}
		b = append(binary.AppendUvarint(b, uint64(len(p.Data))), p.Data...)
		pid := p.Header.Get(nats.MsgIdHdr)
		if pid == "" {
			return nil, fmt.Errorf("crawlmsg: a bundle's part on %s has no %s", subject, nats.MsgIdHdr)
		}
		_, _ = id.Write([]byte(pid))
		_, _ = id.Write([]byte{0})
	}
	m := nats.NewMsg(subject)
	m.Data = b
	m.Header.Set(BundleHdr, strconv.Itoa(len(parts)))
	m.Header.Set(nats.MsgIdHdr, fmt.Sprintf("bundle:%x", id.Sum(nil)))
	return m, nil
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// Part is one message of a bundle. Data shares the bundle's payload.
type Part struct {
	Header nats.Header
	Data   []byte
}

// BundleParts returns the number of parts a message with header h says it carries: 0
// when it is no bundle.
func BundleParts(h nats.Header) int {
	v := h.Get(BundleHdr)
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 1 // counted as one; Unbundle reports it
	}
	return min(n, BundleMaxParts)
}

// Unbundle returns the parts of a bundle with header h and payload data, or, when it is
// no bundle, the message itself as its one part. An error wraps ErrBundle.
func Unbundle(h nats.Header, data []byte) ([]Part, error) {
	v := h.Get(BundleHdr)
	if v == "" {
		return []Part{{Header: h, Data: data}}, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > BundleMaxParts {
		return nil, fmt.Errorf("%w: %s %q", ErrBundle, BundleHdr, v)
	}
	if len(data) == 0 || data[0] != bundleFormat {
		return nil, fmt.Errorf("%w: unknown layout", ErrBundle)
	}
	r := bundleReader{b: data[1:]}
	parts := make([]Part, n)
	for i := range parts {
		keys := r.count()
		hdr := make(nats.Header, keys)
		for range keys {
			k := r.str()
			vals := make([]string, r.count())
			for j := range vals {
				vals[j] = r.str()
			}
			hdr[k] = vals
		}
		parts[i] = Part{Header: hdr, Data: r.bytes()}
		if r.err != nil {
			return nil, fmt.Errorf("%w: part %d of %d: %w", ErrBundle, i+1, n, r.err)
		}
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%w: %d octets after its %d parts", ErrBundle, len(r.b), n)
	}
	return parts, nil
}

type bundleReader struct {
	b   []byte
	err error
}

// count reads a count or a length: no larger than the octets left, which a length must
// fit in and each counted item takes one at least.
func (r *bundleReader) count() int {
	if r.err != nil {
		return 0
	}
	n, w := binary.Uvarint(r.b)
	if w <= 0 || n > uint64(len(r.b)-w) {
		r.err = errors.New("a count or length past the end")
		return 0
	}
	r.b = r.b[w:]
	return int(n)
}

func (r *bundleReader) bytes() []byte {
	n := r.count()
	if r.err != nil {
		return nil
	}
	out := r.b[:n:n]
	r.b = r.b[n:]
	return out
}

func (r *bundleReader) str() string { return string(r.bytes()) }
