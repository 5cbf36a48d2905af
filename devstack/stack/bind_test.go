package stack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/freeport"
	"github.com/trawl/trawl/shared/obs"
)

// helperEnv makes the test binary a stand-in service: it listens on TRAWL_HTTP_ADDR with
// the services' own HTTP server ("serve"), or fails for another cause ("fail"), and logs
// its failure as the services' runner does.
const helperEnv = "STACK_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helper(mode))
	}
	os.Exit(m.Run())
}

func helper(mode string) int {
	log := obs.NewLogger("helper", "info", "text")
	log.Info("helper starting")
	var err error
	if mode == "fail" {
		err = errors.New("redis: connection refused")
	} else {
		var srv *obs.Server
		if srv, err = obs.NewServer(os.Getenv(httpAddrEnv), obs.NewRegistry(), nil, false); err == nil {
			err = srv.Run(context.Background())
		}
	}
	log.Error("helper failed", "err", fmt.Errorf("helper: %w", err))
	return 1
}

// A service's HTTP port is picked free and bound only once the service has connected to
// NATS and Redis; another process may bind it in between. Start then starts the service
// again on another port, and only for that cause.
func TestStartMovesAServiceOffATakenPort(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mode   string
		take   bool // another process binds the port first
		ready  bool
		starts int
	}{
		{name: "port taken: started again elsewhere", mode: "serve", take: true, ready: true, starts: 2},
		{name: "port free: started once", mode: "serve", ready: true, starts: 1},
		{name: "another failure: not started again", mode: "fail", take: true, starts: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			addr, err := freeport.Addr()
			if err != nil {
				t.Fatal(err)
			}
			if tc.take {
				ln, err := net.Listen("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
			}
			s := &Stack{dir: t.TempDir(), opts: Options{Log: obs.NewLogger("stack", "info", "text")}}
			logPath := filepath.Join(s.dir, "logs", "helper-0.log")
			if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
				t.Fatal(err)
			}
			f, err := openLog(logPath)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			p := &Proc{Name: "helper", HTTPAddr: addr, bin: os.Args[0], logOut: f,
				env: append(os.Environ(), helperEnv+"="+tc.mode, httpAddrEnv+"="+addr)}
			if err := p.Start(); err != nil {
				t.Fatal(err)
			}
			defer p.Kill()

			err = s.waitBound(ctx, p)
			if (err == nil) != tc.ready {
				t.Fatalf("waitBound: %v, want ready %v", err, tc.ready)
			}
			b, _ := os.ReadFile(logPath)
			if n := strings.Count(string(b), "helper starting"); n != tc.starts {
				t.Errorf("started %d times, want %d; log:\n%s", n, tc.starts, b)
			}
			if !tc.ready {
				return
			}
			if tc.take == (p.HTTPAddr == addr) {
				t.Errorf("serves on %s, picked %s, port taken %v", p.HTTPAddr, addr, tc.take)
			}
			if !probe(ctx, p.HTTPAddr) {
				t.Errorf("%s does not answer /readyz", p.HTTPAddr)
			}
		})
	}
}
