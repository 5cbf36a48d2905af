package redisx

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestNames(t *testing.T) {
	script := Lua{FS: fstest.MapFS{"s.lua": {Data: []byte("return F_A .. F_B .. F_N")}}, Name: "s.lua"}
	s := Script(Names("F_A", "layers", "F_B", "count:", "F_N", 4), script)
	src, _ := sources.Load(s.Hash())
	want := "local F_A = 'layers'\nlocal F_B = 'count:'\nlocal F_N = 4\n"
	if !strings.Contains(src.(string), want) || !strings.HasSuffix(src.(string), "return F_A .. F_B .. F_N\n") {
		t.Fatalf("script source:\n%s\nwant the names first:\n%s", src, want)
	}
	for _, tc := range []struct {
		name string
		kv   []any
	}{
		{"odd", []any{"F_A"}},
		{"lower-case name", []any{"f_a", "x"}},
		{"name with a space", []any{"F A", "x"}},
		{"name not a string", []any{1, "x"}},
		{"quote in value", []any{"F_A", "it's"}},
		{"newline in value", []any{"F_A", "a\nb"}},
		{"backslash in value", []any{"F_A", `a\`}},
		{"float value", []any{"F_A", 1.5}},
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
