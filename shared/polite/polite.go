// Package polite is what a request to a host carries and obeys, whichever process makes
// it: the live site rules' request settings (User-Agent, extra headers, header secrets,
// Cookie, basic credentials), bound to the host they were resolved for, and how that
// host's robots.txt is fetched (size limit, agent token, redirect hops). The fetcher and
// the renderer both call it for every request they make, so a page fetched by one and its
// requisites fetched by the browser through the other reach the host alike
// (shared/policy/README.md, "Site policies", and services/renderer/README.md, "Rendering").
package polite

import (
	"cmp"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/trawl/trawl/shared/policy"
)

// Settings are the process-wide settings a Requests is built from, read alike by every
// process that makes requests (each service's config gives them: config.Polite).
type Settings struct {
	RobotsAgent    string // TRAWL_ROBOTS_AGENT: the token robots.txt is read for when no rule names one
	RobotsMaxBytes int64  // TRAWL_ROBOTS_MAX_BYTES: how much of a robots.txt is parsed
	SecretsDir     string // TRAWL_SECRETS_DIR: where the secrets rules name are read
}

// Requests resolves a URL's site policy into what its request carries. It is safe for
// concurrent use.
type Requests struct {
	s       Settings
	secrets policy.Secrets
	applied func(policy.Field)
}

// New returns the Requests of s. applied, when not nil, is told each request setting a
// resolution applies (user_agent, headers, cookies, credentials): the fetcher counts them.
func New(s Settings, applied func(policy.Field)) *Requests {
	q := &Requests{s: s, applied: applied}
	if s.SecretsDir != "" {
		q.secrets = policy.DirSecrets(s.SecretsDir)
	}
	if q.applied == nil {
		q.applied = func(policy.Field) {}
	}
	return q
}

// Settings are the settings q was built from.
func (q *Requests) Settings() Settings { return q.s }

// SecretError is a secret a site policy names that cannot be read. It names the secret
// and the setting, never the value.
type SecretError struct {
	Name    string       // the secret's name
	Setting policy.Field // cookies, credentials or headers
	Scope   string       // the rule that names it
	Err     error
}

func (e *SecretError) Error() string {
	return fmt.Sprintf("site policy %s: secret %q (%s) cannot be read: %v", e.Scope, e.Name, e.Setting, e.Err)
}

func (e *SecretError) Unwrap() error { return e.Err }

// Headers are the request settings of r (one URL's policy) for a request to host: its
// User-Agent, extra headers, header secrets, Cookie and basic credentials, bound to host
// so that no other host ever gets them (WithHeaders). nil when the policy sets none. They
// are chosen by the target alone: a caller whose request another site may have started
// (the renderer's, for a page on another site) sends Headers.WithoutSecrets instead. A
// secret that cannot be read is a *SecretError: the caller makes no request, since one
// without the credential would crawl what the site shows a stranger.
func (q *Requests) Headers(r policy.Resolved, host string) (*Headers, error) {
	if r.UserAgent == nil && len(r.Headers) == 0 && len(r.HeaderSecrets) == 0 && r.Cookies == nil && r.Credentials == nil {
		return nil, nil
	}
	h := &Headers{Host: host, Header: make(http.Header, len(r.Headers)+len(r.HeaderSecrets)+3)}
	if r.UserAgent != nil && *r.UserAgent != "" {
		h.Header["User-Agent"] = []string{*r.UserAgent}
		q.applied(policy.FUserAgent)
	}
	for name, v := range r.Headers {
		h.Header.Set(name, v)
	}
	if len(r.Headers) > 0 || len(r.HeaderSecrets) > 0 {
		q.applied(policy.FHeaders)
	}
	// Sorted, so that which secret an error names does not depend on map order.
	var names []string
	if len(r.HeaderSecrets) > 0 {
		names = slices.Sorted(maps.Keys(r.HeaderSecrets))
	}
	for _, name := range names {
		v, err := q.secret(r, policy.FHeaderSecrets, r.HeaderSecrets[name])
		if err != nil {
			return nil, err
		}
		h.Header.Set(name, v)
		h.Secret = append(h.Secret, http.CanonicalHeaderKey(name))
	}
	if r.Cookies != nil {
		v, err := q.secret(r, policy.FCookies, *r.Cookies)
		if err != nil {
			return nil, err
		}
		h.Header["Cookie"] = []string{v}
		h.Secret = append(h.Secret, "Cookie")
		q.applied(policy.FCookies)
	}
	if r.Credentials != nil {
		v, err := q.secret(r, policy.FCredentials, *r.Credentials)
		if err != nil {
			return nil, err
		}
		user, pass, ok := strings.Cut(v, ":")
		if !ok {
			return nil, &SecretError{Name: *r.Credentials, Setting: policy.FCredentials, Scope: scopeOf(r, policy.FCredentials),
				Err: errors.New(`want "user:password"`)}
		}
		h.Header["Authorization"] = []string{"Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))}
		h.Secret = append(h.Secret, "Authorization")
		q.applied(policy.FCredentials)
	}
	// A reserved header (Reserved) is one Compile refuses, and Apply skips.
	return h, nil
}

// secret reads the secret name for r's setting f. A value that would break the header it
// goes into (a line break) is refused like a missing one.
func (q *Requests) secret(r policy.Resolved, f policy.Field, name string) (string, error) {
	fail := func(err error) error {
		return &SecretError{Name: name, Setting: f, Scope: scopeOf(r, f), Err: err}
	}
	if q.secrets == nil {
		return "", fail(errors.New("no secrets directory (TRAWL_SECRETS_DIR)"))
	}
	v, err := q.secrets.Lookup(name)
	if err != nil {
		return "", fail(err)
	}
	if v == "" || strings.ContainsAny(v, "\r\n\x00") {
		return "", fail(errors.New("empty, or more than one line"))
	}
	return v, nil
}

// scopeOf names the rule that decided r's field f.
func scopeOf(r policy.Resolved, f policy.Field) string {
	return cmp.Or(r.DecidedBy(f), "(unknown rule)")
}
