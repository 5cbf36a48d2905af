package crawlmsg

import (
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
)

// PageMsg builds the NATS message for a raw page on subject.
func PageMsg(subject string, p *Page) (*nats.Msg, error) {
	meta, err := Marshal(&p.Meta)
	if err != nil {
		return nil, err
	}
	m := nats.NewMsg(subject)
	m.Header.Set(MetaHeader, string(meta))
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
	return &p, nil
}

// MarshalIndent is Marshal for humans (trawlctl, logs).
func MarshalIndent(v any) ([]byte, error) {
	if _, err := Marshal(v); err != nil {
		return nil, err
	}
	return json.MarshalIndent(v, "", "  ")
}
