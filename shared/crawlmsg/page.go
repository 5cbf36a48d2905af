package crawlmsg

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
)

// PageMsg builds the NATS message for a raw page on subject. A page with a capture is
// written as version PageCaptureVersion: the payload is the body, the request head, the
// response head and the body as received (Raw), in this order, each left out where it goes
// by reference. A rendered page (Meta.Rendered) is version PageRenderedVersion: its
// exchanges' octets and their list follow (render.go). The error is nil unless the list
// of exchanges cannot be encoded.
func PageMsg(subject string, p *Page) (*nats.Msg, error) {
	m := nats.NewMsg(subject)
	var exchanges []byte
	if r := p.Meta.Rendered; r != nil {
		var err error
		if exchanges, err = exchangesJSON(r); err != nil {
			return nil, err
		}
		r.ExchangesSize = int64(len(exchanges))
	}
	m.Header.Set(MetaHeader, encodeMeta(&p.Meta))
	m.Data = p.Body
	if c, r := p.Meta.Capture, p.Meta.Rendered; c != nil || r != nil {
		m.Data = make([]byte, 0, PayloadSize(p))
		m.Data = append(m.Data, p.Body...)
		if c != nil {
			m.Data = append(m.Data, c.Request...)
			m.Data = append(m.Data, c.Response...)
			if c.RawRef == nil {
				m.Data = append(m.Data, p.Raw...)
			}
		}
		m.Data = appendExchanges(m.Data, r)
		m.Data = append(m.Data, exchanges...)
	}
	return m, nil
}

// PayloadSize is the length of the payload PageMsg writes for p.
func PayloadSize(p *Page) int {
	n := len(p.Body)
	if c := p.Meta.Capture; c != nil {
		n += len(c.Request) + len(c.Response)
		if c.RawRef == nil {
			n += len(p.Raw)
		}
	}
	return n + exchangesSize(p.Meta.Rendered)
}

// Objects returns the names of the objects of bucket p names instead of carrying them:
// its body (a rendered page's DOM), its body as received and its rendered exchanges'
// bodies. Whoever deletes or keeps a page's objects asks this.
func (p *Page) Objects(bucket string) []string {
	var names []string
	add := func(ref *BodyRef) {
		if ref != nil && ref.Bucket == bucket && ref.Name != "" {
			names = append(names, ref.Name)
		}
	}
	add(p.Meta.BodyRef)
	if c := p.Meta.Capture; c != nil {
		add(c.RawRef)
	}
	if r := p.Meta.Rendered; r != nil {
		for _, e := range r.Exchanges {
			add(e.BodyRef)
		}
	}
	return names
}

// PageBodyRef returns the body reference of a page message from its header alone, or nil
// for a page whose body is inline: it decodes the metadata only when it names one, so that
// asking costs an inline page a substring search.
func PageBodyRef(header nats.Header) (*BodyRef, error) {
	raw := header.Get(MetaHeader)
	if !strings.Contains(raw, `"body_ref"`) {
		return nil, nil
	}
	var m PageMeta
	if err := Unmarshal([]byte(raw), &m); err != nil {
		return nil, err
	}
	return m.BodyRef, nil
}

// DecodePage reads a raw page from a message's header and payload. When the page's body
// travels by reference (Meta.BodyRef), Body is empty and the reader fetches the object;
// so does the body as received when the capture names it (Capture.RawRef). Body, Raw and
// the capture's heads share the payload's memory.
func DecodePage(header nats.Header, data []byte) (*Page, error) {
	raw := header.Get(MetaHeader)
	if raw == "" {
		return nil, fmt.Errorf("%w: page message lacks %s header", ErrMalformed, MetaHeader)
	}
	var p Page
	if err := Unmarshal([]byte(raw), &p.Meta); err != nil {
		return nil, err
	}
	p.Body = data
	if p.Meta.V == PageRenderedVersion {
		body, err := p.splitExchanges(data)
		if err != nil {
			return nil, err
		}
		p.Body = body
		if p.Meta.Capture == nil {
			if p.Meta.BodyRef != nil && len(body) != 0 {
				return nil, fmt.Errorf("%w: page %s: body by reference and %d octets inline", ErrMalformed, p.Meta.URL, len(body))
			}
			return &p, nil
		}
	}
	if p.Meta.V == PageCaptureVersion || p.Meta.V == PageRenderedVersion {
		if err := p.splitPayload(); err != nil {
			return nil, err
		}
		return &p, nil
	}
	// Version 1: a capture's octets are in the metadata, its raw body in a header.
	if raw := header.Get(RawHeader); raw != "" {
		b, err := base64.StdEncoding.DecodeString(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: page %s: %s header: %v", ErrMalformed, p.Meta.URL, RawHeader, err)
		}
		if c := p.Meta.Capture; c == nil || c.RawSize != int64(len(b)) {
			return nil, fmt.Errorf("%w: page %s: %s header of %d octets does not match its capture", ErrMalformed, p.Meta.URL, RawHeader, len(b))
		}
		p.Raw = b
	}
	return &p, nil
}

// splitPayload cuts a version 2 page's payload into the body, the heads and the body as
// received, by the lengths its capture gives.
func (p *Page) splitPayload() error {
	c, data := p.Meta.Capture, p.Body
	rawIn := int64(0)
	if c.RawRef == nil {
		rawIn = c.RawSize
	}
	if c.RequestSize < 0 || c.ResponseSize < 0 || rawIn < 0 {
		return fmt.Errorf("%w: page %s: negative capture sizes", ErrMalformed, p.Meta.URL)
	}
	tail := c.RequestSize + c.ResponseSize + rawIn
	if tail > int64(len(data)) || (p.Meta.BodyRef != nil && tail != int64(len(data))) {
		return fmt.Errorf("%w: page %s: payload of %d octets does not hold the %d its capture names (body by reference: %t)",
			ErrMalformed, p.Meta.URL, len(data), tail, p.Meta.BodyRef != nil)
	}
	// Full slice expressions: an append to one part never writes over the next.
	cut := len(data) - int(tail)
	p.Body = data[:cut:cut]
	rest := data[cut:]
	c.Request, rest = rest[:c.RequestSize:c.RequestSize], rest[c.RequestSize:]
	c.Response, rest = rest[:c.ResponseSize:c.ResponseSize], rest[c.ResponseSize:]
	if rawIn > 0 {
		p.Raw = rest
	}
	return nil
}

// MarshalIndent is Marshal for humans (trawlctl, logs).
func MarshalIndent(v any) ([]byte, error) {
	if _, err := Marshal(v); err != nil {
		return nil, err
	}
	return json.MarshalIndent(v, "", "  ")
}
