package service

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/trawl/trawl/shared/crawlmsg"
)

// What a memo keeps of a new URL (seen.Message.Keep) is what its frontier message carries:
// the page it came from and the URL's fields, so that recoverLost can publish the message
// again when NATS lost the input. It is encoded by hand because it is built for every URL
// that goes to Redis at TRAWL_FSYNC=1s, most of which are seen and never stored; JSON cost
// 25 times as much (BenchmarkKept: 51 ns an entry against 1.3 µs).

// kept is the seen.Message.Keep of p: the entry of its candidate at a message index.
func (p parsed) kept(index int) []byte {
	j, ok := slices.BinarySearchFunc(p.cands, index, func(c candidate, idx int) int { return c.index - idx })
	if !ok {
		return nil
	}
	c := p.cands[j]
	return appendKept(nil, p.sources[c.group], c.d)
}

// rare holds the fields of a Discovered that only sitemaps and recrawls set, kept as JSON
// after the common ones when present.
type rare struct {
	Recrawl  *crawlmsg.Recrawl `json:"r,omitempty"`
	Priority *float64          `json:"p,omitempty"`
}

// appendKept appends the entry of d, found on source: strings length-prefixed, numbers as
// varints, then the rare fields' JSON ("" when none).
func appendKept(b []byte, source string, d crawlmsg.Discovered) []byte {
	str := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	str(source)
	str(d.URL)
	b = binary.AppendVarint(b, int64(d.Depth))
	b = binary.AppendVarint(b, int64(d.Hops))
	b = binary.AppendVarint(b, int64(d.Embeds))
	b = binary.AppendVarint(b, d.Lastmod)
	str(string(d.Via))
	str(string(d.Kind))
	str(d.Under)
	if d.Recrawl != nil || d.Priority != nil {
		// Marshalling two pointers to plain structs cannot fail.
		r, _ := json.Marshal(rare{Recrawl: d.Recrawl, Priority: d.Priority})
		str(string(r))
	} else {
		str("")
	}
	return b
}

var errKeptShort = errors.New("kept entry cut short")

// parseKept decodes an entry of appendKept.
func parseKept(b []byte) (source string, d crawlmsg.Discovered, err error) {
	str := func() string {
		n, w := binary.Uvarint(b)
		if w <= 0 || uint64(len(b)-w) < n {
			err = errKeptShort
			b = nil
			return ""
		}
		s := string(b[w : w+int(n)])
		b = b[w+int(n):]
		return s
	}
	num := func() int64 {
		v, w := binary.Varint(b)
		if w <= 0 {
			err = errKeptShort
			b = nil
			return 0
		}
		b = b[w:]
		return v
	}
	source = str()
	d.URL = str()
	d.Depth, d.Hops, d.Embeds, d.Lastmod = int(num()), int(num()), int(num()), num()
	d.Via, d.Kind, d.Under = crawlmsg.Via(str()), crawlmsg.Kind(str()), str()
	if r := str(); r != "" && err == nil {
		var x rare
		if jerr := json.Unmarshal([]byte(r), &x); jerr != nil {
			return "", crawlmsg.Discovered{}, fmt.Errorf("kept entry: %w", jerr)
		}
		d.Recrawl, d.Priority = x.Recrawl, x.Priority
	}
	if err != nil {
		return "", crawlmsg.Discovered{}, fmt.Errorf("kept entry of %q: %w", d.URL, err)
	}
	return source, d, nil
}
