package redisx

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestNames(t *testing.T) {
	script := Lua{FS: fstest.MapFS{"s.lua": {Data: []byte("return F_A .. F_B")}}, Name: "s.lua"}
	s := Script(Names("F_A", "layers", "F_B", "count:"), script)
	src, _ := sources.Load(s.Hash())
	want := "local F_A = 'layers'\nlocal F_B = 'count:'\n"
	if !strings.Contains(src.(string), want) || !strings.HasSuffix(src.(string), "return F_A .. F_B\n") {
		t.Fatalf("script source:\n%s\nwant the names first:\n%s", src, want)
	}
	for _, tc := range []struct {
		name string
		kv   []string
	}{
		{"odd", []string{"F_A"}},
		{"lower-case name", []string{"f_a", "x"}},
		{"name with a space", []string{"F A", "x"}},
		{"quote in value", []string{"F_A", "it's"}},
		{"newline in value", []string{"F_A", "a\nb"}},
		{"backslash in value", []string{"F_A", `a\`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatalf("Names(%q) did not panic", tc.kv)
				}
			}()
			Names(tc.kv...)
		})
	}
}
