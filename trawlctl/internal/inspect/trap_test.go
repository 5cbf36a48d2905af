package inspect

import "testing"

// The table of services/parser/internal/scope's TestIsTrap.
func TestIsTrap(t *testing.T) {
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
			if got := IsTrap(in); got != want {
				t.Errorf("IsTrap(%q) = %v, want %v", in, got, want)
			}
		})
	}
}
