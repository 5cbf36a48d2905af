package inspect

import "strings"

// IsTrap is the parser's trap rule (services/parser/internal/scope.IsTrap, internal to the
// parser, so copied): a URL whose path repeats one segment three or more times is never
// followed. trap_test.go repeats the parser's test table so the copies cannot drift apart
// unnoticed.
func IsTrap(u string) bool {
	path := u
	if i := strings.Index(path, "://"); i >= 0 {
		path = path[i+3:]
		j := strings.IndexByte(path, '/')
		if j < 0 {
			return false
		}
		path = path[j:]
	}
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	segs := strings.Split(strings.Trim(path, "/"), "/")
	if len(segs) < 3 {
		return false
	}
	counts := make(map[string]int, len(segs))
	for _, s := range segs {
		if s == "" {
			continue
		}
		counts[s]++
		if counts[s] >= 3 {
			return true
		}
	}
	return false
}
