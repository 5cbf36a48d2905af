package dockerhost

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// A descriptor this process inherited without close-on-exec (as `flock FILE go test …`
// passes its lock) is not passed on to what it starts, such as a dockerd that outlives it.
func TestInheritedDescriptorsNotPassedOn(t *testing.T) {
	fd, err := syscall.Open(filepath.Join(t.TempDir(), "lock"), syscall.O_RDWR|syscall.O_CREAT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	closeInheritedOnExec()
	out, err := exec.Command("ls", "/proc/self/fd").Output()
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(strings.Fields(string(out)), strconv.Itoa(fd)) {
		t.Errorf("descriptor %d is open in the child (its descriptors: %s)", fd, strings.Join(strings.Fields(string(out)), " "))
	}
}
