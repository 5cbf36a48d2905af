package composecheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/types"
	"github.com/nats-io/nats-server/v2/server"

	"github.com/trawl/trawl/shared/durability"
)

// redisArgs runs a Redis service's command as its container would (sh, the service's
// environment) with a stand-in redis-server on PATH that prints the arguments it was
// given, one a line: what the real server would be started with.
func redisArgs(t *testing.T, s types.ServiceConfig) ([]string, error) {
	t.Helper()
	bin := t.TempDir()
	stub := "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done\n"
	if err := os.WriteFile(filepath.Join(bin, "redis-server"), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	if len(s.Command) < 3 || s.Command[0] != "sh" || s.Command[1] != "-c" {
		t.Fatalf("%s: command %q is not sh -c SCRIPT", s.Name, s.Command)
	}
	cmd := exec.Command("sh", "-c", s.Command[2])
	cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin"}
	for k, v := range s.Environment {
		if v != nil {
			cmd.Env = append(cmd.Env, k+"="+*v)
		}
	}
	out, err := cmd.CombinedOutput()
	return strings.Split(strings.TrimSuffix(string(out), "\n"), "\n"), err
}

// TRAWL_FSYNC is one setting with one meaning for both stores: each Redis node's AOF and
// each NATS node's JetStream store sync as shared/durability says for the level, and a
// value that is neither level stops Redis at start rather than running it weaker.
func TestComposeFsyncIsOneSetting(t *testing.T) {
	redisNodes := append([]string{"redis"}, clusterRedis...)
	natsNodes := append([]string{"nats"}, clusterNATS...)
	for _, level := range append([]durability.Level{""}, durability.Levels...) {
		name := string(level)
		var env []string
		if level == "" {
			name, level = "unset", durability.Default
		} else {
			env = []string{durability.Env + "=" + string(level)}
		}
		t.Run(name, func(t *testing.T) {
			p, _ := loadProfiles(t, []string{"cluster"}, env...)
			for _, n := range redisNodes {
				s, err := p.GetService(n)
				if err != nil {
					t.Fatal(err)
				}
				args, err := redisArgs(t, s)
				if err != nil {
					t.Fatalf("%s: %v\n%s", n, err, strings.Join(args, "\n"))
				}
				if got := argAfter(args, "--appendfsync"); !slices.Equal(got, []string{level.RedisAppendFsync()}) {
					t.Errorf("%s: --appendfsync %q, want %q", n, got, level.RedisAppendFsync())
				}
				if got := argAfter(args, "--appendonly"); !slices.Equal(got, []string{"yes"}) {
					t.Errorf("%s: --appendonly %q, want yes", n, got)
				}
			}
			for _, n := range natsNodes {
				s, err := p.GetService(n)
				if err != nil {
					t.Fatal(err)
				}
				always, interval := natsSync(t, s)
				wantAlways, wantInterval := level.NATSSync()
				if always != wantAlways || (!always && interval != wantInterval) {
					t.Errorf("%s: JetStream sync always=%v interval=%s, want always=%v interval=%s", n, always, interval, wantAlways, wantInterval)
				}
			}
		})
	}
	t.Run("invalid", func(t *testing.T) {
		p, _ := loadProfiles(t, []string{"cluster"}, durability.Env+"=sometimes")
		for _, n := range redisNodes {
			s, _ := p.GetService(n)
			if out, err := redisArgs(t, s); err == nil || !strings.Contains(strings.Join(out, "\n"), "want always or 1s") {
				t.Errorf("%s: TRAWL_FSYNC=sometimes started redis-server with %q (err %v), want a refusal", n, out, err)
			}
		}
	})
}

// natsSync reads the node's mounted nats.conf with nats-server's own parser, in the
// node's environment, and returns the JetStream sync it configures.
func natsSync(t *testing.T, s types.ServiceConfig) (bool, time.Duration) {
	t.Helper()
	var conf string
	for _, v := range s.Volumes {
		if v.Target == "/etc/nats/nats.conf" {
			conf = v.Source
		}
	}
	if conf == "" {
		t.Fatalf("%s: no nats.conf mounted", s.Name)
	}
	for k, v := range s.Environment {
		if v != nil {
			t.Setenv(k, *v)
		}
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("%s: nats-server refuses %s: %v", s.Name, conf, err)
	}
	return opts.SyncAlways, opts.SyncInterval
}
