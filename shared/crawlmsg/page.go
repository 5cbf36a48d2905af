package crawlmsg

import (
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
)

// PageMsg builds the NATS message for a raw page on subject.
// The error is always nil: the metadata is written by hand (encodeMeta); it is kept so
// callers need not change if encoding could fail again.
func PageMsg(subject string, p *Page) (*nats.Msg, error) {
	m := nats.NewMsg(subject)
	m.Header.Set(MetaHeader, encodeMeta(&p.Meta))
	if len(p.Raw) > 0 {
		m.Header.Set(RawHeader, base64.StdEncoding.EncodeToString(p.Raw))
	}
	m.Data = p.Body
	return m, nil
}

// DecodePage reads a raw page from a message's header and payload. When the page's body
// travels by reference (Meta.BodyRef), Body is empty and the reader fetches the object.
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

// MarshalIndent is Marshal for humans (trawlctl, logs).
func MarshalIndent(v any) ([]byte, error) {
	if _, err := Marshal(v); err != nil {
		return nil, err
	}
	return json.MarshalIndent(v, "", "  ")
}
