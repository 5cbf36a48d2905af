package urlnorm

import (
	"math/rand/v2"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// The fast paths answer without the general code; each must give exactly what the
// general code gives, over hand-picked edge cases and many generated inputs.

func TestDottedQuadIsWhatParseIPFormats(t *testing.T) {
	cases := []string{"127.0.0.1", "0.0.0.0", "255.255.255.255", "10.0.1.200", "1.2.3.4",
		"01.2.3.4", "1.2.3.04", "256.1.1.1", "1.2.3", "1.2.3.4.5", "1..2.3", ".1.2.3", "1.2.3.",
		"1.2.3.4 ", "a.b.c.d", "1.2.3.1000", "0.0.0.00", "", "::1", "1.2.3.4:80"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		parts := make([]string, 3+rng.IntN(3))
		for i := range parts {
			switch rng.IntN(4) {
			case 0:
				parts[i] = "0" + strconv.Itoa(rng.IntN(300))
			default:
				parts[i] = strconv.Itoa(rng.IntN(300))
			}
		}
		cases = append(cases, strings.Join(parts, "."))
	}
	for _, h := range cases {
		ip := net.ParseIP(h)
		slow := ip != nil && ip.To4() != nil && !strings.Contains(h, ":") && ip.To4().String() == h
		if got := isDottedQuad(h); got != slow {
			t.Errorf("isDottedQuad(%q) = %v, but net.ParseIP formats it as %v", h, got, ip)
		}
	}
}

func TestDotSegmentCheck(t *testing.T) {
	cases := []string{"/", "", "/a.html", "/.", "/..", "/./a", "/../a", "/a/.", "/a/..", "/a/./b",
		"/a/../b", "/.a/b.", "/a./.b", "/...", "/a/.../b", ".", "..", "./a", "../a", "a/./b",
		"/a/.%2E/b", "/x.y.z/", "/a//./b"}
	rng := rand.New(rand.NewPCG(3, 4))
	alphabet := []string{"/", ".", "..", "a", "b."}
	for range 20000 {
		var b strings.Builder
		for range rng.IntN(8) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		cases = append(cases, b.String())
	}
	for _, p := range cases {
		if got, want := removeDotSegments(p), dotSegments(p); got != want {
			t.Errorf("removeDotSegments(%q) = %q, the algorithm gives %q", p, got, want)
		}
	}
}

func TestRepeatsSegmentShortPathsMatchCounting(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	segs := []string{"a", "b", "c", "", "2024"}
	for range 20000 {
		parts := make([]string, rng.IntN(shortPath+8))
		for i := range parts {
			parts[i] = segs[rng.IntN(len(segs))]
		}
		path := "/" + strings.Join(parts, "/")
		want := repeatsByMap(strings.Split(strings.Trim(path, "/"), "/"))
		if got := RepeatsSegment("http://h" + path); got != want {
			t.Errorf("RepeatsSegment(%q) = %v, counting says %v", path, got, want)
		}
	}
}

// absoluteRebuilt is absolute without its shortcut: always the rebuilt string.
func absoluteRebuilt(scheme, rest string) (string, error) {
	scheme = strings.ToLower(scheme)
	if !isSpecial(scheme) {
		return "", ErrScheme
	}
	rest = strings.TrimLeft(slashes(rest), "/")
	auth, tail := splitAuthority(rest)
	auth, err := authority(auth)
	if err != nil {
		return "", err
	}
	return scheme + "://" + auth + escapeTail(tail), nil
}

func TestAbsoluteShortcutIsTheRebuiltURL(t *testing.T) {
	schemes := []string{"http", "HTTP", "https", "Https"}
	seps := []string{"//", "/", "", "///", `\\`, `/\`}
	auths := []string{"h", "H.example", "127.0.0.1:8080", "u:p@h", "u p@h", "%41.com", "[::1]:80", ""}
	tails := []string{"", "/", "/a/b", "/a?b=c", "/%zz", "/a\x01b", "?q", "/a\\b?c\\d", "/%41"}
	for _, sc := range schemes {
		for _, sep := range seps {
			for _, a := range auths {
				for _, tl := range tails {
					rest := sep + a + tl
					s := sc + ":" + rest
					got, gerr := absolute(s, sc, rest)
					want, werr := absoluteRebuilt(sc, rest)
					if (gerr != nil) != (werr != nil) || got != want {
						t.Errorf("absolute(%q) = %q, %v; rebuilt %q, %v", s, got, gerr, want, werr)
					}
				}
			}
		}
	}
}

// fastBases are bases resolveFast answers for and bases it must refuse.
var fastBases = []string{"http://a.test/b/c;p?q", "http://127.0.1.5:8080/dir/page-3.html", "https://x.example/",
	"http://h.test/a:b/c", "HTTP://A.test/b", "http://a.test", "http://u@a.test/b", "http://a.test:80/b",
	"http://xn--nxasmq6b.test/b", "http://a--b.test/x/y", "http://a.09/x", "http://[::1]/x", "http://a.test/%41/b",
	"http://a.test/b!c/d", "ftp://a.test/b"}

// fastRefs are hrefs of every shape: the plain ones resolveFast takes and their near misses.
var fastRefs = []string{"g", "g/h", "g?y=1&z=2", "/g", "/g?y", "//h.test/g", "//h.test", "//h.test?x", "?y", "?",
	"http://h.test/g", "https://h.test:8443/g?y", "http://h.test", "http://h.test?y", "http://H.test/g",
	"http://h.test:80/g", "https://h.test:443/g", "http://h.test:/g", "http://h.test:080/g", "http://h.test:0443/g", "http://h.test:08080/g", "http://h.test:65536/g",
	"http://127.0.0.1/g", "http://127.000.0.1/g", "http://1.2.3/g", "http://a.1/g", "http://a.0x1f/g",
	"http://xn--nxasmq6b.test/g", "http://a-.test/g", "http://-a.test/g", "http://a--b.test/g", "http://a_b.test/g",
	"http://u@h.test/g", "http://h.test/g/./h", "http://h.test/g/../h", "./g", "../g", ".", "..", "g/.", "g/..",
	"/a//b", "a//b", "g:h", "/g:h", "g/h:i", "%41", "/%7e", "g%zz", "g h", "g!h", "g'h", "g(h)", "g*h", "g~h",
	"/g?a=%41", "/g?a b", "/g?a=b?c/d", "/g?[x]", "http:g", "http:/g", "HTTP://h.test/g", "\\g", "g\\h",
	"http://h.test/é", "/é", "g?é", "http://" + strings.Repeat("a", 64) + ".test/g", "http://a.b.c.d.e/g"}

// resolveFast must give exactly what the general rules give, wherever it answers.
func TestResolveFastIsTheGeneralResolution(t *testing.T) {
	answered := 0
	for _, b := range fastBases {
		base, err := url.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		for _, ref := range fastRefs {
			s, err := clean(ref)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := resolveFast(base, s)
			if !ok {
				continue
			}
			answered++
			want, err := resolveClean(base, s)
			if err != nil || got != want {
				t.Errorf("base %s, ref %q: fast %q, general %q, %v", b, ref, got, want, err)
			}
		}
	}
	// It must carry the common links, or it saves nothing.
	if answered < 100 {
		t.Errorf("resolveFast answered %d references only", answered)
	}
}

// checkPlainAbsolute fails when plainAbsolute answers s otherwise than the general rules.
func checkPlainAbsolute(t *testing.T, s string) bool {
	got, ok := plainAbsolute(s)
	if !ok {
		return false
	}
	if want, err := normalizeGeneral(s); err != nil || got != want {
		t.Errorf("plainAbsolute(%q) = %q; general %q, %v", s, got, want, err)
	}
	return true
}

func TestNormalizeFastIsTheGeneralForm(t *testing.T) {
	answered := 0
	for _, u := range append(fastRefs, fastBases...) {
		s, err := clean(u)
		if err != nil {
			t.Fatal(err)
		}
		if checkPlainAbsolute(t, s) {
			answered++
		}
	}
	if answered < 5 {
		t.Errorf("plainAbsolute answered %d URLs only", answered)
	}
}

func FuzzResolveFast(f *testing.F) {
	for _, r := range fastRefs {
		f.Add(r, 0)
	}
	f.Fuzz(func(t *testing.T, ref string, b int) {
		base, err := url.Parse(fastBases[uint(b)%uint(len(fastBases))])
		if err != nil {
			t.Fatal(err)
		}
		s, err := clean(ref)
		if err != nil {
			return
		}
		checkPlainAbsolute(t, s)
		if got, ok := resolveFast(base, s); ok {
			if want, err := resolveClean(base, s); err != nil || got != want {
				t.Fatalf("base %s, ref %q: fast %q, general %q, %v", base, ref, got, want, err)
			}
		}
	})
}
