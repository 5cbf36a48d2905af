package runner

import (
	"math"
	"os"
	"runtime/debug"
	"testing"
	"testing/fstest"
)

// The services set the Go runtime's soft limit from TRAWL_MEMORY_LIMIT, or their cgroup's
// limit, so that a heap allowed five times its live data (GOGC=400) stays under the
// container's memory; GOMEMLIMIT, when the operator sets it, wins.
func TestSetMemoryLimit(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	tests := []struct {
		name      string
		setting   int64
		goMemEnv  string // "" = unset
		wantLimit int64
	}{
		{"setting", 1000 << 20, "", 800 << 20}, // MemoryLimitShare of it
		{"GOMEMLIMIT wins", 1000 << 20, "300MiB", math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.goMemEnv == "" {
				t.Setenv("GOMEMLIMIT", "")
				os.Unsetenv("GOMEMLIMIT")
			} else {
				t.Setenv("GOMEMLIMIT", tt.goMemEnv)
			}
			debug.SetMemoryLimit(math.MaxInt64) // what the runtime reads when GOMEMLIMIT is unset
			SetMemoryLimit(tt.setting)
			if got := debug.SetMemoryLimit(-1); got != tt.wantLimit {
				t.Errorf("Go memory limit %d, want %d", got, tt.wantLimit)
			}
		})
	}
}

func TestCgroupMemoryLimit(t *testing.T) {
	tests := []struct {
		name  string
		files fstest.MapFS
		want  int64
	}{
		{"v2 limit", fstest.MapFS{"sys/fs/cgroup/memory.max": {Data: []byte("536870912\n")}}, 512 << 20},
		{"v2 none", fstest.MapFS{"sys/fs/cgroup/memory.max": {Data: []byte("max\n")}}, 0},
		{"v1 limit", fstest.MapFS{"sys/fs/cgroup/memory/memory.limit_in_bytes": {Data: []byte("268435456\n")}}, 256 << 20},
		{"v1 none", fstest.MapFS{"sys/fs/cgroup/memory/memory.limit_in_bytes": {Data: []byte("9223372036854771712\n")}}, 0},
		{"no cgroup", fstest.MapFS{}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := cgroupMemoryLimit(tt.files); got != tt.want {
				t.Errorf("cgroup limit %d, want %d", got, tt.want)
			}
		})
	}
}
