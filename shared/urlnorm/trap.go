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
	path = strings.Trim(path, "/")
	n := strings.Count(path, "/") + 1
	if n < TrapRepeats {
		return false
	}
	if n > shortPath {
		// A scope rule caps URL length, but a map keeps a hostile path linear.
		return repeatsByMap(strings.Split(path, "/"))
	}
	// Nearly every path: its segments compared pairwise, without allocating.
	var segs [shortPath]string
	k := 0
	for s := range strings.SplitSeq(path, "/") {
		segs[k] = s
		k++
	}
	for i, s := range segs[:k] {
		if s == "" {
			continue
		}
		c := 1
		for _, t := range segs[:i] {
			if t == s {
				c++
			}
		}
		if c >= TrapRepeats {
			return true
		}
	}
	return false
}

// shortPath is the most segments compared pairwise.
const shortPath = 32

// repeatsByMap reports whether a non-empty segment occurs TrapRepeats times.
func repeatsByMap(segs []string) bool {
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
