package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/shared/testwait"
)

// The password the sweep hides: a bare '%' makes it invalid percent-encoding, so the URLs
// that carry it as it is do not parse, which is when a library's error quotes them.
const (
	sweepPassword = "Pw%zzSekr3t"
	// sweepEncoded is the same password percent-encoded: URLs that parse.
	sweepEncoded = "Pw%25zzSekr3t"
)

// sweepPieces are what must never be printed: the password's distinctive part, and the
// piece net/url quotes of an invalid escape.
var sweepPieces = []string{"Sekr3t", "%zz", "%25zz"}

// sweepEnv is one way TRAWL_NATS_URL and TRAWL_REDIS_URL carry the password.
type sweepEnv struct {
	name        string
	nats, redis string
	// services: what a service does with it; "" = not run. "exit N", or "wait LINE": runs
	// until it logs LINE, then is stopped.
	services string
	cli      bool // trawlctl's commands and the indexer run with it (they exit on their own)
}

// No binary prints a password: every binary's -h, every trawlctl subcommand's -h and run,
// every service's configuration error and server refusal, with TRAWL_NATS_URL and
// TRAWL_REDIS_URL carrying a distinctive password, valid or malformed.
func TestNoPasswordPrinted(t *testing.T) {
	t.Parallel()
	ns, err := natsembed.Start(natsembed.Options{StoreDir: t.TempDir(), MaxStore: natsembed.TestMaxStore, Username: "trawl", Password: "the-right-one"})
	if err != nil {
		t.Fatalf("NATS with credentials: %v", err)
	}
	t.Cleanup(ns.Close)
	rs := redisproc.StartT(t, redisproc.Options{Ephemeral: true})
	admin := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	if err := admin.ConfigSet(testwait.Context(t), "requirepass", "the-right-one").Err(); err != nil {
		t.Fatal(err)
	}
	admin.Close()
	natsAddr := strings.TrimPrefix(ns.URL(), "nats://")
	dead := deadTCPAddr(t)
	goodNATS := "nats://trawl:the-right-one@" + natsAddr
	goodRedis := "redis://:the-right-one@" + rs.Addr() + "/0"

	envs := []sweepEnv{
		{name: "nats bare percent", nats: "nats://trawl:" + sweepPassword + "@" + natsAddr, redis: goodRedis, services: "exit 2", cli: true},
		{name: "nats slash", nats: "nats://trawl:Pw/zzSekr3t@" + natsAddr, redis: goodRedis, services: "exit 2", cli: true},
		{name: "nats question mark", nats: "nats://trawl:Pw?zzSekr3t@" + natsAddr, redis: goodRedis, services: "exit 2", cli: true},
		{name: "nats token bare percent", nats: "nats://" + sweepPassword + "@" + natsAddr, redis: goodRedis, services: "exit 2", cli: true},
		{name: "nats list", nats: ns.URL() + ",nats://trawl:" + sweepPassword + "@" + natsAddr, redis: goodRedis, services: "exit 2", cli: true},
		{name: "nats no host", nats: "nats://trawl:" + sweepEncoded + "@", redis: goodRedis, services: "exit 2", cli: true},
		{name: "redis bare percent", nats: goodNATS, redis: "redis://:" + sweepPassword + "@" + rs.Addr() + "/0", services: "exit 2", cli: true},
		{name: "redis slash", nats: goodNATS, redis: "redis://u:Pw/zzSekr3t@" + rs.Addr() + "/0", services: "exit 2", cli: true},
		{name: "redis cluster bare percent", nats: goodNATS, redis: "redis://:" + sweepPassword + "@" + rs.Addr() + "," + dead, services: "exit 2", cli: true},
		{name: "redis cluster slash", nats: goodNATS, redis: "redis-cluster://u:Pw/zzSekr3t@" + rs.Addr(), services: "exit 2", cli: true},
		{name: "redis no scheme", nats: goodNATS, redis: ":" + sweepEncoded + "@" + rs.Addr(), services: "exit 2", cli: true},
		{name: "nats refuses", nats: "nats://trawl:" + sweepEncoded + "@" + natsAddr, redis: "redis://:" + sweepEncoded + "@" + rs.Addr() + "/0", services: "exit 1", cli: true},
		{name: "nats token refused", nats: "nats://" + sweepEncoded + "@" + natsAddr, redis: goodRedis, services: "exit 1", cli: true},
		{name: "redis refuses", nats: goodNATS, redis: "redis://:" + sweepEncoded + "@" + rs.Addr() + "/0", services: "exit 1"},
		{name: "redis unreachable", nats: goodNATS, redis: "redis://:" + sweepEncoded + "@" + dead + "/0", services: "wait waiting for redis"},
		{name: "both unreachable", nats: "nats://trawl:" + sweepEncoded + "@" + dead, redis: "redis://:" + sweepEncoded + "@" + dead + "/0", cli: true},
	}

	devBin := t.TempDir()
	root, err := stack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", devBin+string(os.PathSeparator), "./devstack/cmd/trawl-dev")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build trawl-dev: %v\n%s", err, out)
	}

	services := append([]string{stack.Archiver}, stack.Services...)
	base := func(e sweepEnv) []string {
		return []string{"TRAWL_NATS_URL=" + e.nats, "TRAWL_REDIS_URL=" + e.redis, "TRAWL_HTTP_ADDR=127.0.0.1:0",
			"TRAWL_ARCHIVE_DIR=" + t.TempDir(), "TRAWL_LOG_LEVEL=debug"}
	}

	// The help of every binary, under every environment.
	commands := trawlctlCommands(t)
	for _, e := range envs {
		t.Run("help/"+e.name, func(t *testing.T) {
			t.Parallel()
			env := base(e)
			for _, s := range services {
				sweepRun(t, filepath.Join(binDir, s), []string{"-h"}, env, "exit 0")
			}
			sweepRun(t, filepath.Join(binDir, "trawlctl"), []string{"help"}, env, "exit 0")
			for _, c := range commands {
				sweepRun(t, filepath.Join(binDir, "trawlctl"), append(strings.Fields(c), "-h"), env, "exit 0")
			}
			sweepRun(t, filepath.Join(binDir, "indexer"), []string{"-h"}, env, "exit 0")
			sweepRun(t, filepath.Join(binDir, stack.NATSServer), []string{"-h"}, env, "exit 0")
			sweepRun(t, filepath.Join(devBin, "trawl-dev"), []string{"-h"}, env, "exit 0")
		})
	}
	// Every service's start-up under every environment that stops or holds it.
	for _, e := range envs {
		if e.services == "" {
			continue
		}
		for _, s := range services {
			t.Run("service/"+e.name+"/"+s, func(t *testing.T) {
				t.Parallel()
				sweepRun(t, filepath.Join(binDir, s), nil, base(e), e.services)
			})
		}
	}
	// Every trawlctl command and the indexer, which exit on their own.
	cliArgs := map[string][]string{
		"seed": {"https://example.com/"}, "tap": {"crawl.docs"}, "explain": {"https://example.com/"},
		"robots check": {"-agent", "x", "-status", "404", "https://example.com/"}, "url normalize": {"https://example.com/"},
	}
	for _, e := range envs {
		if !e.cli {
			continue
		}
		t.Run("cli/"+e.name, func(t *testing.T) {
			t.Parallel()
			env := base(e)
			for _, c := range commands {
				sweepRun(t, filepath.Join(binDir, "trawlctl"), append(strings.Fields(c), cliArgs[c]...), env, "")
			}
			// The indexer reads TRAWL_NATS_URL only, and waits for a NATS that is not there.
			if e.nats != goodNATS && !strings.Contains(e.nats, dead) {
				sweepRun(t, filepath.Join(binDir, "indexer"), []string{"-db", filepath.Join(t.TempDir(), "i.db")}, env, "exit 1")
			}
		})
	}
}

// trawlctlCommands are the commands `trawlctl help` lists.
func trawlctlCommands(t *testing.T) []string {
	out, err := exec.Command(filepath.Join(binDir, "trawlctl"), "help").Output()
	if err != nil {
		t.Fatalf("trawlctl help: %v", err)
	}
	var cmds []string
	in := false
	for _, line := range strings.Split(string(out), "\n") {
		switch {
		case strings.HasPrefix(line, "commands:"):
			in = true
		case in && strings.HasPrefix(line, "  "):
			f := strings.Fields(line)
			name := f[0]
			if name == "robots" || name == "url" {
				name += " " + f[1]
			}
			cmds = append(cmds, name)
		case in && strings.TrimSpace(line) == "" && len(cmds) > 0:
			in = false
		}
	}
	if len(cmds) < 8 {
		t.Fatalf("trawlctl help lists %v: want every command", cmds)
	}
	return cmds
}

// sweepRun runs bin and fails the test if its output shows the password. want: "exit N"
// wants that exit status; "wait LINE" stops the process with SIGTERM once it has printed
// LINE; "" takes any exit status.
func sweepRun(t *testing.T, bin string, args, env []string, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(testwait.Context(t), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out testwait.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	if line, ok := strings.CutPrefix(want, "wait "); ok {
		select {
		case err = <-done:
			t.Errorf("%s %v ended before printing %q: %v\n%s", filepath.Base(bin), args, line, err, out.String())
		case <-waitFor(ctx, &out, line):
			_ = cmd.Process.Signal(syscall.SIGTERM)
			err = <-done
		}
	} else {
		err = <-done
	}
	if ctx.Err() != nil {
		t.Errorf("%s %v: no exit within the time limit\n%s", filepath.Base(bin), args, out.String())
	}
	code := 0
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %v: %v", filepath.Base(bin), args, err)
	}
	if n, ok := strings.CutPrefix(want, "exit "); ok && fmt.Sprint(code) != n {
		t.Errorf("%s %v exited %d, want %s\n%s", filepath.Base(bin), args, code, n, out.String())
	}
	for _, p := range sweepPieces {
		if strings.Contains(out.String(), p) {
			t.Errorf("%s %v printed %q of the password (TRAWL_NATS_URL, TRAWL_REDIS_URL: %q):\n%s",
				filepath.Base(bin), args, p, env[:2], out.String())
		}
	}
}

// waitFor is closed once out holds line, polling until ctx ends.
func waitFor(ctx context.Context, out *testwait.Buffer, line string) <-chan struct{} {
	c := make(chan struct{})
	go func() {
		for !strings.Contains(out.String(), line) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
		close(c)
	}()
	return c
}

// deadTCPAddr is a loopback address nothing listens on.
func deadTCPAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
