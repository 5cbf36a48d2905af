package fuzztargets

import (
	"path/filepath"
	"reflect"
	"testing"
)

func TestFind(t *testing.T) {
	got, err := Find(filepath.Join("testdata", "tree"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Target{{"./a", "FuzzOne"}, {"./a", "FuzzTwo"}, {"./b", "Fuzz"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Find = %v, want %v", got, want)
	}
}

// TestFindsTheRepositorysTargets guards against a discovery that finds nothing (a walk
// that skips the tree) while make fuzz reports success: the repository has targets in
// several modules, ones a hand-kept list once missed among them.
func TestFindsTheRepositorysTargets(t *testing.T) {
	got, err := Find(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	have := map[Target]bool{}
	for _, tg := range got {
		have[tg] = true
	}
	for _, want := range []Target{
		{"./shared/urlnorm", "FuzzNormalize"},
		{"./shared/urlnorm", "FuzzResolveFast"},
		{"./services/parser/internal/extract", "FuzzRawAttrs"},
		{"./services/parser/internal/simhash", "FuzzOf"},
		{"./shared/crawlmsg", "FuzzUnmarshal"},
	} {
		if !have[want] {
			t.Errorf("%v not found among %d targets", want, len(got))
		}
	}
}
