package runner

import (
	"os"
	"runtime/debug"
	"testing"
)

func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// A process runs with DefaultGOGC unless the operator set GOGC, which wins.
func TestSetGCDefault(t *testing.T) {
	defer debug.SetGCPercent(gcPercent())
	tests := []struct {
		name string
		env  string // "" = unset
		want int
	}{
		{"unset", "", DefaultGOGC},
		{"set by the operator", "150", 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env == "" {
				t.Setenv("GOGC", "")
				os.Unsetenv("GOGC")
			} else {
				t.Setenv("GOGC", tt.env)
			}
			debug.SetGCPercent(100) // what the runtime would have read
			SetGCDefault()
			if got := gcPercent(); got != tt.want {
				t.Errorf("GC percent %d, want %d", got, tt.want)
			}
		})
	}
}
