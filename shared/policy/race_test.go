//go:build race

package policy

// raceEnabled: the race detector's instrumentation allocates where the code does not, so
// allocation counts are not asserted under it.
const raceEnabled = true
