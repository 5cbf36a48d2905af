package policy

import (
	"encoding/json"
	"fmt"
	"net/textproto"
	"sort"
	"strconv"
	"strings"
)

// Assign sets rule fields from "field=value" words, as trawlctl policy set takes them,
// on top of what r already sets: durations as "1.5s", crawl_delay as "exact" or a cap,
// booleans as true/false, include/exclude once per pattern (the first in the words
// replaces the rule's list, the next ones add to it), headers as "headers.NAME=value" and
// header_secrets as "header_secrets.NAME=secret", note as text. "field=" unsets a field.
func (r *Rule) Assign(words []string) error {
	lists := map[Field]bool{}
	for _, w := range words {
		k, v, ok := strings.Cut(w, "=")
		if !ok {
			return fmt.Errorf("%q: want field=value (fields: %s)", w, fieldNames())
		}
		if err := r.assign(strings.TrimSpace(k), v, lists); err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
	}
	return nil
}

func fieldNames() string {
	var ns []string
	for _, f := range Fields() {
		ns = append(ns, string(f))
	}
	return strings.Join(append(ns, "note"), ", ")
}

func (r *Rule) assign(k, v string, lists map[Field]bool) error {
	if f, name, ok := strings.Cut(k, "."); ok {
		switch Field(strings.ToLower(f)) {
		case FHeaders:
			return setMap(&r.Headers, name, v)
		case FHeaderSecrets:
			return setMap(&r.HeaderSecrets, name, v)
		}
		return fmt.Errorf("only headers and header_secrets take a name after a dot")
	}
	k = strings.ToLower(k)
	unset := v == ""
	switch Field(k) {
	case FMinDelay:
		return setDur(&r.MinDelay, v, unset)
	case FRecrawlMin:
		return setDur(&r.RecrawlMin, v, unset)
	case FRecrawlMax:
		return setDur(&r.RecrawlMax, v, unset)
	case FDelayFactor:
		if unset {
			r.DelayFactor = nil
			return nil
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("%q is not a number", v)
		}
		r.DelayFactor = &f
	case FCrawlDelay:
		if unset {
			r.CrawlDelay = nil
			return nil
		}
		c, err := ParseCrawlDelay(v)
		if err != nil {
			return err
		}
		r.CrawlDelay = &c
	case FConnections:
		return setInt(&r.Connections, v, unset)
	case FMaxDepth:
		return setInt(&r.MaxDepth, v, unset)
	case FHostBudget:
		return setInt64(&r.HostBudget, v, unset)
	case FDomainBudget:
		return setInt64(&r.DomainBudget, v, unset)
	case FInclude, FExclude:
		l := &r.Include
		if Field(k) == FExclude {
			l = &r.Exclude
		}
		if !lists[Field(k)] {
			*l = nil
			lists[Field(k)] = true
		}
		if !unset {
			*l = append(*l, v)
		}
	case FUserAgent:
		setStr(&r.UserAgent, v, unset)
	case FCookies:
		setStr(&r.Cookies, v, unset)
	case FCredentials:
		setStr(&r.Credentials, v, unset)
	case FRender:
		setStr(&r.Render, v, unset)
	case FHeaders, FHeaderSecrets:
		if !unset {
			return fmt.Errorf("set one header as %s.NAME=value, or %s= to unset them all", k, k)
		}
		if Field(k) == FHeaders {
			r.Headers = nil
		} else {
			r.HeaderSecrets = nil
		}
	case FBlock:
		if unset {
			r.Block = nil
			return nil
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%q: want true or false", v)
		}
		r.Block = &b
	case "note":
		r.Note = v
	default:
		return fmt.Errorf("no such field (fields: %s)", fieldNames())
	}
	return nil
}

func setDur(p **Duration, v string, unset bool) error {
	if unset {
		*p = nil
		return nil
	}
	d, err := ParseDuration(v)
	if err != nil {
		return err
	}
	*p = &d
	return nil
}

func setInt(p **int, v string, unset bool) error {
	if unset {
		*p = nil
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("%q is not a whole number", v)
	}
	*p = &n
	return nil
}

func setInt64(p **int64, v string, unset bool) error {
	if unset {
		*p = nil
		return nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return fmt.Errorf("%q is not a whole number", v)
	}
	*p = &n
	return nil
}

func setStr(p **string, v string, unset bool) {
	if unset {
		*p = nil
		return
	}
	*p = &v
}

func setMap(m *map[string]string, name, v string) error {
	if name == "" {
		return fmt.Errorf("a header name after the dot")
	}
	name = textproto.CanonicalMIMEHeaderKey(name)
	// A copy: the rule's map may be shared with the set it was read from.
	c := make(map[string]string, len(*m)+1)
	for k, x := range *m {
		if textproto.CanonicalMIMEHeaderKey(k) != name {
			c[k] = x
		}
	}
	if v != "" {
		c[name] = v
	}
	if len(c) == 0 {
		c = nil
	}
	*m = c
	return nil
}

// Value is field f of the rule as trawlctl and explain print it ("" when unset): a
// duration as "1.5s", crawl_delay as "exact" or its cap, lists and headers as JSON.
// Secrets appear by name only, which is all a rule holds.
func (r Rule) Value(f Field) string {
	switch f {
	case FMinDelay:
		return durStr(r.MinDelay)
	case FRecrawlMin:
		return durStr(r.RecrawlMin)
	case FRecrawlMax:
		return durStr(r.RecrawlMax)
	case FDelayFactor:
		if r.DelayFactor != nil {
			return strconv.FormatFloat(*r.DelayFactor, 'g', -1, 64)
		}
	case FCrawlDelay:
		if r.CrawlDelay != nil {
			return r.CrawlDelay.String()
		}
	case FConnections:
		return intStr(r.Connections)
	case FMaxDepth:
		return intStr(r.MaxDepth)
	case FHostBudget:
		if r.HostBudget != nil {
			return strconv.FormatInt(*r.HostBudget, 10)
		}
	case FDomainBudget:
		if r.DomainBudget != nil {
			return strconv.FormatInt(*r.DomainBudget, 10)
		}
	case FInclude:
		return jsonStr(r.Include)
	case FExclude:
		return jsonStr(r.Exclude)
	case FHeaders:
		return mapStr(r.Headers)
	case FHeaderSecrets:
		return mapStr(r.HeaderSecrets)
	case FUserAgent:
		return strStr(r.UserAgent)
	case FCookies:
		return strStr(r.Cookies)
	case FCredentials:
		return strStr(r.Credentials)
	case FRender:
		return strStr(r.Render)
	case FBlock:
		if r.Block != nil {
			return strconv.FormatBool(*r.Block)
		}
	}
	return ""
}

// Summary is the fields the rule sets as "field=value" words, in Fields order, then its
// note: what trawlctl policy ls prints.
func (r Rule) Summary() string {
	var parts []string
	for _, f := range r.Fields() {
		parts = append(parts, string(f)+"="+r.Value(f))
	}
	if r.Note != "" {
		parts = append(parts, "note="+strconv.Quote(r.Note))
	}
	return strings.Join(parts, " ")
}

func durStr(d *Duration) string {
	if d == nil {
		return ""
	}
	return d.String()
}

func intStr(n *int) string {
	if n == nil {
		return ""
	}
	return strconv.Itoa(*n)
}

func strStr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func jsonStr(l []string) string {
	if len(l) == 0 {
		return ""
	}
	b, _ := json.Marshal(l)
	return string(b)
}

func mapStr(m map[string]string) string {
	if len(m) == 0 {
		return ""
	}
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range ks {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		vb, _ := json.Marshal(m[k])
		b.Write(kb)
		b.WriteByte(':')
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.String()
}

// CoversURL says whether the scope's rule applies to a normalised URL (for an address
// block: never; those apply to server addresses).
func (sc Scope) CoversURL(rawURL string) bool {
	host, port, path, ok := splitURL(rawURL)
	if !ok {
		return false
	}
	switch sc.Kind {
	case KindHost:
		return sc.Value == host
	case KindDomain:
		return host == sc.Value || strings.HasSuffix(host, "."+sc.Value)
	case KindPrefix:
		h, p, pp := prefixParts(sc.Value)
		return h == host && p == port && strings.HasPrefix(path, pp)
	}
	return false
}
