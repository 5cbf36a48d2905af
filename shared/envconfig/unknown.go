package envconfig

import (
	"slices"
	"strings"
)

//go:generate go run gen_known.go ../.. known_gen.go

// Known says name is a setting some Trawl program reads, or one the tooling around them
// reads (compose.yaml, the tests and benchmarks): it has a row in the settings reference
// (docs/configuration.md), or starts with a prefix the reference reserves for the tests
// (`TRAWL_TEST_*`). The names come from the reference itself (known_gen.go, made by go
// generate and held to it by envdoc's tests), so a service knows the settings of every
// other service and of trawlctl: one environment is given to all of them.
func Known(name string) bool {
	if _, ok := slices.BinarySearch(knownNames[:], name); ok {
		return true
	}
	for _, p := range knownPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// Unknown is a TRAWL_* variable no Trawl program reads, and the known name it is most
// likely a misspelling of ("" when none is close).
type Unknown struct {
	Name, Closest string
}

// FindUnknown returns the TRAWL_* variables of environ (os.Environ's NAME=value form) that
// Known does not know, sorted by name. It keeps names only: a value may be a secret.
func FindUnknown(environ []string) []Unknown {
	var out []Unknown
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, Prefix) || Known(name) || slices.ContainsFunc(out, func(u Unknown) bool { return u.Name == name }) {
			continue
		}
		out = append(out, Unknown{Name: name, Closest: closest(name)})
	}
	slices.SortFunc(out, func(a, b Unknown) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// UnknownWarning is the one warning a Trawl program gives at start for the TRAWL_*
// variables of environ that no Trawl program reads, or "" when there are none. A
// misspelt setting is otherwise silently its default (TRAWL_HOST_BUDGET=60 meant as
// TRAWL_MAX_PAGES_PER_HOST: a crawl with no budget). It names the variables, never their
// values.
func UnknownWarning(environ []string) string {
	unknown := FindUnknown(environ)
	if len(unknown) == 0 {
		return ""
	}
	parts := make([]string, len(unknown))
	for i, u := range unknown {
		parts[i] = u.Name
		if u.Closest != "" {
			parts[i] += " (did you mean " + u.Closest + "?)"
		}
	}
	return "ignoring TRAWL_* variables no Trawl program reads (docs/configuration.md lists every setting): " + strings.Join(parts, ", ")
}

// closest is the known name nearest to name by edit distance, when it is near enough to
// be a slip of the keyboard (a letter or two, about one in four of the name's letters
// after the prefix), else "". A name of other words (TRAWL_HOST_BUDGET for
// TRAWL_MAX_PAGES_PER_HOST) gets no guess: a wrong guess would mislead.
func closest(name string) string {
	word := strings.TrimPrefix(name, Prefix)
	best, bestD := "", max(1, len(word)/4)+1
	for _, k := range knownNames {
		if d := editDistance(word, strings.TrimPrefix(k, Prefix)); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes (names are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
