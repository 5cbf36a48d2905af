package runner

import (
	"io/fs"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// MemoryLimitShare is the part of a process's memory limit that SetMemoryLimit gives the Go
// runtime as its soft limit. The rest is for what the runtime does not count or cannot
// return at once: memory freed but not yet given back to the OS, and the kernel's own
// charges to the container (page cache of written files, socket buffers).
const MemoryLimitShare = 0.8

// SetMemoryLimit sets the Go runtime's soft memory limit to MemoryLimitShare of limit
// (TRAWL_MEMORY_LIMIT) or, when limit is 0, of the process's cgroup memory limit, unless
// GOMEMLIMIT is set, which wins. At GOGC=400 (SetGCDefault) a heap may grow to five times
// its live data: dedup and the scheduler, with 5–7 MB live when idle and batches of seeds
// in hand, reached 0.3–0.6 GB resident (docs/cost-per-page.md, "Scale"). Under the soft
// limit the collector runs more often as the heap nears it instead of letting a container
// be killed. It returns the limit set, 0 when none.
func SetMemoryLimit(limit int64) int64 {
	if _, set := os.LookupEnv("GOMEMLIMIT"); set {
		return 0
	}
	if limit <= 0 {
		limit = cgroupMemoryLimit(os.DirFS("/"))
	}
	if limit <= 0 {
		return 0
	}
	soft := int64(float64(limit) * MemoryLimitShare)
	debug.SetMemoryLimit(soft)
	return soft
}

// cgroupMemoryLimit is the memory limit of the process's cgroup (v2 memory.max, else v1
// memory.limit_in_bytes, as a container sees them at /sys/fs/cgroup), 0 when none is set or
// readable. A v1 "no limit" is a number near 2^63 rounded to pages; anything above 2^62
// is read as none.
func cgroupMemoryLimit(root fs.FS) int64 {
	for _, name := range []string{"sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := fs.ReadFile(root, name)
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(b))
		if v == "max" {
			return 0
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 || n > 1<<62 {
			return 0
		}
		return n
	}
	return 0
}
