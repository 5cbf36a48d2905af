// Package redact keeps credentials out of what Trawl prints: the password (or token) in a
// URL's user info, in a setting's value or in a message that quotes one. It works by
// pattern, not with net/url, so a URL that net/url cannot parse (a password with a bare
// '%', '/' or '@') is redacted as well as a valid one: such a URL is the very one an error
// message quotes.
package redact

import (
	"flag"
	"regexp"
	"strings"
)

// Mask replaces a password.
const Mask = "xxxxx"

// EncodingHint is what to tell of a URL that does not parse: almost always a credential
// with a character the URL syntax reserves. Messages say it instead of net/url's error,
// which quotes the URL or the piece of the password it stumbled on.
const EncodingHint = "in a user name or password, write % as %25, @ as %40, : as %3A, / as %2F, ? as %3F, # as %23"

// scheme finds where a URL starts: "nats://", "rediss-cluster://", …
var scheme = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.\-]*://`)

// URL returns raw — one URL, or several separated by commas as TRAWL_NATS_URL takes them
// — with the password of each user info replaced by Mask ("user:xxxxx@host"). A user info
// without a password is replaced whole ("xxxxx@host"): NATS reads it as a token. The user
// info of a URL runs to the last '@' before the next URL, so a password holding '/', '?',
// '#' or '@' unencoded is hidden whole; when in doubt more is hidden, never less. A value
// without "://" is taken as a URL missing its scheme ("user:password@host").
func URL(raw string) string {
	if !strings.Contains(raw, "://") {
		if at := strings.LastIndexByte(raw, '@'); at >= 0 {
			return userinfo(raw[:at]) + raw[at:]
		}
		return raw
	}
	return replace(raw, nil)
}

// Text returns s, a message, with every URL in it redacted as URL does. A URL in a message
// ends at white space or a quote.
func Text(s string) string {
	return replace(s, func(r rune) bool {
		switch r {
		case ' ', '\t', '\n', '\r', '"', '\'', '`', '<', '>':
			return true
		}
		return false
	})
}

// Error is err with its message passed through Text; errors.Is and errors.As still see
// err. Nil stays nil.
func Error(err error) error {
	if err == nil {
		return nil
	}
	msg := Text(err.Error())
	if msg == err.Error() {
		return err
	}
	return &redacted{msg: msg, err: err}
}

type redacted struct {
	msg string
	err error
}

func (e *redacted) Error() string { return e.msg }
func (e *redacted) Unwrap() error { return e.err }

// replace redacts the user info of every URL in s; stop, when not nil, ends a URL early.
func replace(s string, stop func(rune) bool) string {
	starts := scheme.FindAllStringIndex(s, -1)
	if len(starts) == 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	last := 0
	for i, m := range starts {
		from := m[1] // after "://"
		to := len(s)
		if i+1 < len(starts) {
			to = starts[i+1][0]
		}
		region := s[from:to]
		if stop != nil {
			if j := strings.IndexFunc(region, stop); j >= 0 {
				region = region[:j]
			}
		}
		at := strings.LastIndexByte(region, '@')
		if at < 0 {
			continue
		}
		b.WriteString(s[last:from])
		b.WriteString(userinfo(region[:at]))
		last = from + at
	}
	b.WriteString(s[last:])
	return b.String()
}

// userinfo is the redacted form of a URL's user info.
func userinfo(ui string) string {
	user, pass, hasPass := strings.Cut(ui, ":")
	switch {
	case ui == "" || ui == ":":
		return ui // nothing secret: compose.yaml builds ":@" when no credentials are set
	case !hasPass:
		return Mask
	case pass == "":
		return ui
	}
	return user + ":" + Mask
}

// Flag is a command-line flag holding a URL in *p: its default, shown by -h, is redacted.
// (A string flag whose default comes from the environment would print the password.)
func Flag(p *string) flag.Value { return urlFlag{p} }

type urlFlag struct{ p *string }

func (f urlFlag) String() string {
	if f.p == nil { // flag.PrintDefaults asks a zero value
		return ""
	}
	return URL(*f.p)
}

func (f urlFlag) Set(v string) error { *f.p = v; return nil }
