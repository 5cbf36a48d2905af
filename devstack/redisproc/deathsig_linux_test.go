//go:build linux

package redisproc

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

const helperEnv = "REDISPROC_TEST_HELPER_DIR"

// TestHelperProcess is not a real test: when re-executed by
// TestChildDiesWithParent it starts redis, reports the address and blocks
// until it is killed.
func TestHelperProcess(t *testing.T) {
	dir := os.Getenv(helperEnv)
	if dir == "" {
		return
	}
	s, err := Start(context.Background(), Options{Dir: dir})
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	fmt.Println("ADDR", s.Addr())
	select {}
}

func TestChildDiesWithParent(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"="+t.TempDir())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start helper: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("read helper output: %v", err)
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "ADDR ")
	if !ok {
		t.Fatalf("helper failed: %s", line)
	}
	if conn, err := net.Dial("tcp", addr); err != nil {
		t.Fatalf("redis from helper not reachable at %s: %v", addr, err)
	} else {
		conn.Close()
	}

	// SIGKILL gives the helper no chance to clean up: only Pdeathsig can
	// take redis down with it.
	if err := cmd.Process.Kill(); err != nil {
		t.Fatalf("kill helper: %v", err)
	}
	_ = cmd.Wait()

	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return // refused: redis died with its parent
		}
		conn.Close()
		if time.Now().After(deadline) {
			t.Fatalf("redis at %s still running 10s after its parent was killed", addr)
		}
		time.Sleep(20 * time.Millisecond) // poll interval
	}
}
