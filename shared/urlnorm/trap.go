package urlnorm

import "strings"

// TrapRepeats is how many times one path segment may appear before a URL counts as a
// crawler trap.
const TrapRepeats = 3

// RepeatsSegment reports a URL whose path repeats one segment TrapRepeats or more times
// (/a/b/a/b/a/b, /x/x/x): the signature of relative-link loops and calendar traps. The
// parser never follows such a URL; trawlctl explains it with the same rule.
func RepeatsSegment(u string) bool {
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
	if len(segs) < TrapRepeats {
		return false
	}
	// Paths are short (a scope rule caps URL length), but a map keeps a hostile one linear.
	counts := make(map[string]int, len(segs))
	for _, s := range segs {
		if s == "" {
			continue
		}
		counts[s]++
		if counts[s] >= TrapRepeats {
			return true
		}
	}
	return false
}
