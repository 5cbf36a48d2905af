package urlnorm

import "testing"

func TestRepeatsSegment(t *testing.T) {
	tests := map[string]bool{
		"http://h/":                  false,
		"http://h/a/b/c/d/e":         false,
		"http://h/x/x/x":             true,
		"http://h/x/x/x/":            true,
		"http://h/a/b/a/b/a/b":       true,
		"http://h/cal/2024/cal/2024": false,
		"http://h/a//a//a":           true,
		"/x/y/x/y/x":                 true,
		"http://h/x/x?p=/x/x/x":      false,
		"http://h":                   false,
	}
	for in, want := range tests {
		t.Run(in, func(t *testing.T) {
			if got := RepeatsSegment(in); got != want {
				t.Errorf("RepeatsSegment(%q) = %v, want %v", in, got, want)
			}
		})
	}
}
