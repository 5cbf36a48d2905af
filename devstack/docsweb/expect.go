package docsweb

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// Page is an HTML page a crawl of a site must fetch.
type Page struct {
	Path string // decoded URL path and query, as in Entry.Key after the host
	File string // the file nginx serves for it
	From string // the path of a page linking to it; "" for the site's root
}

// Expected are the HTML pages of the site that a correct crawl fetches, found on disk
// from the root page by the links a crawler follows — <a href> and <area href> to the same
// host, not rel=nofollow, not on a page whose robots meta says nofollow or none — and not
// disallowed by the site's robots.txt. It reads the files nginx serves and no code of the
// crawler. A link is a page when the file it names is an .html file (or, for a path ending
// in "/", holds index.html); links to anything else are fetched too but are not pages.
func Expected(site Site) (map[string]Page, error) {
	deny, err := site.Disallowed()
	if err != nil {
		return nil, err
	}
	origin := &url.URL{Scheme: "http", Host: site.Host()}
	pages := map[string]Page{}
	queue := []Page{{Path: "/", File: filepath.Join(site.Root, "index.html")}}
	pages["/"] = queue[0]
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		b, err := os.ReadFile(p.File)
		if err != nil {
			return nil, fmt.Errorf("docsweb: %s page %s: %w", site.Name, p.Path, err)
		}
		base := origin.ResolveReference(&url.URL{Path: strings.SplitN(p.Path, "?", 2)[0]})
		for _, href := range followedLinks(b) {
			ref, err := url.Parse(strings.TrimSpace(href))
			if err != nil {
				continue
			}
			u := base.ResolveReference(ref)
			if u.Scheme != "http" || u.Host != origin.Host || disallowed(deny, u.RequestURI()) {
				continue
			}
			key := u.Path
			if u.RawQuery != "" {
				key += "?" + u.RawQuery
			}
			if _, seen := pages[key]; seen {
				continue
			}
			file, ok := htmlFile(site.Root, u.Path)
			if !ok {
				continue
			}
			np := Page{Path: key, File: file, From: p.Path}
			pages[key] = np
			queue = append(queue, np)
		}
	}
	return pages, nil
}

// htmlFile is the file nginx serves for a path when it is an HTML page.
func htmlFile(root, path string) (string, bool) {
	file := filepath.Join(root, filepath.FromSlash(path))
	if strings.HasSuffix(path, "/") {
		file = filepath.Join(file, "index.html")
	}
	ext := strings.ToLower(filepath.Ext(file))
	if ext != ".html" && ext != ".htm" {
		return "", false
	}
	st, err := os.Stat(file)
	if err != nil || !st.Mode().IsRegular() {
		return "", false
	}
	return file, true
}

// followedLinks are the hrefs of a page's <a> and <area> elements a crawler follows,
// resolved against its <base href> when it has one.
func followedLinks(page []byte) []string {
	var hrefs []string
	base := ""
	nofollow := false
	z := html.NewTokenizer(bytes.NewReader(page))
	for {
		tt := z.Next()
		if tt == html.ErrorToken {
			break
		}
		if tt != html.StartTagToken && tt != html.SelfClosingTagToken {
			continue
		}
		tok := z.Token()
		attr := func(name string) (string, bool) {
			for _, a := range tok.Attr {
				if a.Key == name {
					return a.Val, true
				}
			}
			return "", false
		}
		switch tok.DataAtom {
		case atom.Base:
			if h, ok := attr("href"); ok && base == "" {
				base = h
			}
		case atom.Meta:
			name, _ := attr("name")
			content, _ := attr("content")
			if strings.EqualFold(strings.TrimSpace(name), "robots") {
				for _, d := range strings.FieldsFunc(strings.ToLower(content), func(r rune) bool { return r == ',' || r == ' ' }) {
					if d == "nofollow" || d == "none" {
						nofollow = true
					}
				}
			}
		case atom.A, atom.Area:
			h, ok := attr("href")
			rel, _ := attr("rel")
			if !ok || strings.HasPrefix(strings.TrimSpace(h), "#") || hasToken(rel, "nofollow") {
				continue
			}
			hrefs = append(hrefs, h)
		}
	}
	if nofollow {
		return nil
	}
	if base != "" {
		b, err := url.Parse(strings.TrimSpace(base))
		if err == nil {
			for i, h := range hrefs {
				if r, err := url.Parse(strings.TrimSpace(h)); err == nil {
					hrefs[i] = b.ResolveReference(r).String()
				}
			}
		}
	}
	return hrefs
}

func hasToken(list, tok string) bool {
	for _, f := range strings.Fields(strings.ToLower(list)) {
		if f == tok {
			return true
		}
	}
	return false
}
