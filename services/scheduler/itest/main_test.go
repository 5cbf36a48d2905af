package itest

import (
	"flag"
	"os"
	"testing"
)

// parallel is how many of this package's tests run at once unless -test.parallel is given.
// They spend most of their time waiting on timers, redeliveries and their own servers, not
// on the CPU, so the default of one test per core would leave the cores idle. The tests
// whose assertions hold a wall-clock bound do not call t.Parallel and run alone first.
const parallel = "8"

func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", parallel); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}
