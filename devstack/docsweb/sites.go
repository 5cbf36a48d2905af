// Package docsweb serves real documentation that no one in this project wrote — Debian's
// documentation packages — from nginx with Debian's usual settings (gzip on), one virtual
// host per package, and judges a crawl of it from nginx's own access log. The synthetic web
// (devstack/synthweb) serves what the tests design; this serves what sites are made of:
// pages of hundreds of kilobytes sent gzip-encoded, relative links by the thousand, style
// sheets and scripts behind symlinks, links to files that are not there. `make docs-crawl`
// crawls it with `make run` and the archiver on.
package docsweb

import (
	"bufio"
	"embed"
	"fmt"
	"strings"

	"github.com/trawl/trawl/devstack/sysdeps"
)

//go:embed testdata/nginx.conf.tmpl testdata/robots
var files embed.FS

// Site is one documentation package served as a host of its own.
type Site struct {
	Name    string          // the host is Name + Domain; its robots.txt is testdata/robots/<Name>.txt
	Program sysdeps.Program // the Debian package, and its index page as the file that shows it installed
	Root    string          // the document root
}

// Domain is the suffix of every site's host name: .test is reserved (RFC 2606), so the
// names can only ever mean these sites.
const Domain = ".docs.test"

// Sites are the packages crawled: about 1,950 HTML pages, 1,600 of them allowed by the
// sites' robots.txt; each site has pages whose gzip-encoded body is over 48 KB.
var Sites = []Site{
	{Name: "python", Program: doc("python3-doc", "/usr/share/doc/python3/html"), Root: "/usr/share/doc/python3/html"},
	{Name: "postgresql", Program: doc("postgresql-doc-15", "/usr/share/doc/postgresql-doc-15/html"), Root: "/usr/share/doc/postgresql-doc-15/html"},
	{Name: "git", Program: doc("git-doc", "/usr/share/doc/git-doc"), Root: "/usr/share/doc/git-doc"},
	{Name: "debian-reference", Program: doc("debian-reference-en", "/usr/share/debian-reference"), Root: "/usr/share/debian-reference"},
}

func doc(pkg, root string) sysdeps.Program {
	return sysdeps.Program{Package: pkg, File: root + "/index.html"}
}

// Host is the site's host name.
func (s Site) Host() string { return s.Name + Domain }

// Programs are what serving the sites needs installed: nginx and every package.
func Programs(sites []Site) []sysdeps.Program {
	out := []sysdeps.Program{sysdeps.Known["nginx"]}
	for _, s := range sites {
		out = append(out, s.Program)
	}
	return out
}

// Robots is the site's robots.txt as served.
func (s Site) Robots() ([]byte, error) {
	b, err := files.ReadFile("testdata/robots/" + s.Name + ".txt")
	if err != nil {
		return nil, fmt.Errorf("docsweb: robots.txt of %s: %w", s.Name, err)
	}
	return b, nil
}

// Disallowed are the path prefixes the site's robots.txt disallows to every crawler. The
// files hold one `User-agent: *` group of plain prefixes, which this reads alone, apart from
// the crawler's robots code: a judge sharing the crawler's parser would share its mistakes.
func (s Site) Disallowed() ([]string, error) {
	b, err := s.Robots()
	if err != nil {
		return nil, err
	}
	var out []string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		k, v = strings.ToLower(strings.TrimSpace(k)), strings.TrimSpace(v)
		switch {
		case !ok:
			return nil, fmt.Errorf("docsweb: robots.txt of %s: line %q is not a field", s.Name, line)
		case k == "user-agent" && v == "*":
		case k == "disallow" && strings.HasPrefix(v, "/") && !strings.ContainsAny(v, "*$"):
			out = append(out, v)
		default:
			return nil, fmt.Errorf("docsweb: robots.txt of %s: line %q: the judge reads only one `User-agent: *` group of plain Disallow prefixes", s.Name, line)
		}
	}
	return out, nil
}

// disallowed reports whether a request path (as sent, query included) is disallowed.
func disallowed(prefixes []string, path string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}
