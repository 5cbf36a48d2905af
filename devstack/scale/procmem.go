package scale

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Mem is a process's resident memory as the kernel counts it, in bytes.
type Mem struct {
	RSS  int64 `json:"rss"`  // VmRSS: resident now
	HWM  int64 `json:"hwm"`  // VmHWM: the most resident since the process started
	PSS  int64 `json:"pss"`  // smaps_rollup Pss: shared pages divided among their users
	Heap int64 `json:"heap"` // Go heap in use (go_memstats_heap_inuse_bytes), 0 when not read
	Live int64 `json:"live"` // Go heap allocated just after a forced collection: the live heap
}

// ReadMem reads pid's VmRSS and VmHWM from /proc/<pid>/status and its Pss from
// /proc/<pid>/smaps_rollup (Linux 4.14+).
func ReadMem(pid int) (Mem, error) {
	var m Mem
	st, err := kbFields(fmt.Sprintf("/proc/%d/status", pid), "VmRSS:", "VmHWM:")
	if err != nil {
		return m, err
	}
	m.RSS, m.HWM = st["VmRSS:"], st["VmHWM:"]
	sm, err := kbFields(fmt.Sprintf("/proc/%d/smaps_rollup", pid), "Pss:")
	if err != nil {
		return m, err
	}
	m.PSS = sm["Pss:"]
	return m, nil
}

// kbFields reads the "<name> <n> kB" lines named from a /proc file, in bytes.
func kbFields(path string, names ...string) (map[string]int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("scale: %w", err)
	}
	defer f.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 2 {
			continue
		}
		for _, n := range names {
			if fs[0] == n {
				v, err := strconv.ParseInt(fs[1], 10, 64)
				if err != nil {
					return nil, fmt.Errorf("scale: %s %s: %w", path, n, err)
				}
				out[n] = v << 10
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("scale: read %s: %w", path, err)
	}
	return out, nil
}
