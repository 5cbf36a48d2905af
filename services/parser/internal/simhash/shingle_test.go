package simhash

import (
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// slowSimHash builds every feature by joining lowered tokens, the definition simHash
// shortcuts when a shingle already stands in the text as it would be joined.
func slowSimHash(s string) uint64 {
	toks := tokens(s)
	var feats []string
	for i := 0; i+ShingleSize <= len(toks); i++ {
		feats = append(feats, strings.Join(toks[i:i+ShingleSize], " "))
	}
	if len(toks) > 0 && len(toks) < ShingleSize {
		feats = append(feats, strings.Join(toks, " "))
	}
	var v voter
	for _, f := range feats {
		v.add(xxhash.Sum64String(f))
	}
	return v.sum()
}

func TestSimHashShortcutMatchesJoinedFeatures(t *testing.T) {
	tests := map[string]string{
		"lowercase words":          "the quick brown fox jumps over the lazy dog",
		"capitals":                 "The Quick brown FOX jumps",
		"punctuation between":      "one,two three. four-five six",
		"punctuation then space":   "a, b c d e",
		"leading punctuation":      "(a b c) d",
		"non-ascii letters":        "straße café naïve été über alles",
		"unspaced script":          "東京タワー is tall 東京",
		"invalid byte":             "ab\xffcd ef gh ij",
		"digits":                   "2024 05 17 x y",
		"one token":                "Word",
		"two tokens":               "two Words",
		"symbols around":           "→a b c←",
		"single-char tokens":       "a b c d e f g",
		"capital in the middle":    "aa bB cc dd",
		"non-ascii joined by dash": "é-è ê ë",
	}
	for name, text := range tests {
		t.Run(name, func(t *testing.T) {
			got, _ := simHash(text)
			if want := slowSimHash(text); got != want {
				t.Errorf("simHash(%q) = %s, joined features give %s", text, Format(got), Format(want))
			}
		})
	}
	for _, name := range []string{"lighthouse.txt", "sourdough.txt"} {
		text := fixture(t, name)
		if got, _ := simHash(text); got != slowSimHash(text) {
			t.Errorf("%s: simHash %s, joined features give %s", name, Format(got), Format(slowSimHash(text)))
		}
	}
}
