package envconfig

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/topology"
)

func TestReader(t *testing.T) {
	r := FromMap(map[string]string{
		"TRAWL_N":     "7",
		"TRAWL_D":     "1.5",
		"TRAWL_D2":    "250ms",
		"TRAWL_B":     "yes",
		"TRAWL_SIZE":  "2MiB",
		"TRAWL_LIST":  "a, b c,,d",
		"TRAWL_EMPTY": "  ",
	})
	if got := r.Int("N", 1); got != 7 {
		t.Errorf("Int = %d", got)
	}
	if got := r.Duration("D", 0); got != 1500*time.Millisecond {
		t.Errorf("Duration(bare seconds) = %s", got)
	}
	if got := r.Duration("D2", 0); got != 250*time.Millisecond {
		t.Errorf("Duration = %s", got)
	}
	if !r.Bool("B", false) {
		t.Error("Bool(yes) = false")
	}
	if got := r.Bytes("SIZE", 0); got != 2<<20 {
		t.Errorf("Bytes = %d", got)
	}
	if got := strings.Join(r.List("LIST", nil), "|"); got != "a|b|c|d" {
		t.Errorf("List = %q", got)
	}
	if got := r.String("EMPTY", "def"); got != "def" {
		t.Errorf("blank value should take the default, got %q", got)
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
}

func TestReaderCollectsErrors(t *testing.T) {
	r := FromMap(map[string]string{"TRAWL_A": "x", "TRAWL_B": "maybe", "TRAWL_C": "soon"})
	r.Int("A", 0)
	r.Bool("B", false)
	r.Duration("C", 0)
	err := r.Err()
	if err == nil {
		t.Fatal("want errors")
	}
	for _, name := range []string{"TRAWL_A", "TRAWL_B", "TRAWL_C"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error does not name %s: %v", name, err)
		}
	}
}

func TestCommonValidate(t *testing.T) {
	good := LoadCommon(FromMap(nil), ":9100")
	if err := good.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"bad nats url", map[string]string{"TRAWL_NATS_URL": "::"}, "TRAWL_NATS_URL"},
		{"zero shards", map[string]string{"TRAWL_SHARDS": "0"}, "TRAWL_SHARDS"},
		{"short lease", map[string]string{"TRAWL_LEASE_TTL": "10ms"}, "TRAWL_LEASE_TTL"},
		{"log format", map[string]string{"TRAWL_LOG_FORMAT": "xml"}, "TRAWL_LOG_FORMAT"},
		{"max deliver", map[string]string{"TRAWL_LOG_ERROR_AFTER": "1"}, "TRAWL_LOG_ERROR_AFTER"},
		{"ack wait beyond half the lease", map[string]string{"TRAWL_LEASE_TTL": "20s", "TRAWL_ACK_WAIT": "15s"}, "TRAWL_ACK_WAIT"},
		{"pages cap below a few messages", map[string]string{"TRAWL_PAGES_MAX_BYTES": "8MiB"}, "TRAWL_PAGES_MAX_BYTES"},
		{"docs cap below a few messages", map[string]string{"TRAWL_DOCS_MAX_BYTES": "1MiB"}, "TRAWL_DOCS_MAX_BYTES"},
		{"memory limit below a working set", map[string]string{"TRAWL_MEMORY_LIMIT": "10MiB"}, "TRAWL_MEMORY_LIMIT"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := LoadCommon(FromMap(tc.env), ":9100").Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

// The stream caps reach the topology every service declares: a service that read them
// but declared the defaults would fight the others over the streams' configuration.
func TestStreamCapsReachTopology(t *testing.T) {
	o := LoadCommon(FromMap(map[string]string{"TRAWL_PAGES_MAX_BYTES": "1GiB", "TRAWL_DOCS_MAX_BYTES": "256MiB"}), ":9100").Topology()
	if o.PagesMaxBytes != 1<<30 || o.DocsMaxBytes != 256<<20 {
		t.Fatalf("topology caps pages %d docs %d, want %d and %d", o.PagesMaxBytes, o.DocsMaxBytes, 1<<30, 256<<20)
	}
	d := LoadCommon(FromMap(nil), ":9100").Topology()
	if def := topology.DefaultOptions(0); d.PagesMaxBytes != def.PagesMaxBytes || d.DocsMaxBytes != def.DocsMaxBytes {
		t.Fatalf("default caps pages %d docs %d, want the topology's %d and %d", d.PagesMaxBytes, d.DocsMaxBytes, def.PagesMaxBytes, def.DocsMaxBytes)
	}
}

// JetStream keeps every Nats-Msg-Id of the duplicate window in memory, so the window is
// what the timings need (topology.DuplicateWindowFor), not a fixed ten minutes: a fetch
// task's ack wait plus a fast stage's. The default timings give topology.DefaultOptions'.
func TestDuplicateWindowFollowsTimings(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want time.Duration
	}{
		{"defaults", nil, 3 * time.Minute},
		{"short lease", map[string]string{"TRAWL_LEASE_TTL": "20s", "TRAWL_ACK_WAIT": "5s"}, 30 * time.Second},
		{"long lease", map[string]string{"TRAWL_LEASE_TTL": "10m"}, 13 * time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := LoadCommon(FromMap(tc.env), ":9100").Topology().DuplicateWindow; got != tc.want {
				t.Fatalf("duplicate window %s, want %s", got, tc.want)
			}
		})
	}
	if got, def := LoadCommon(FromMap(nil), ":9100").Topology().DuplicateWindow, topology.DefaultOptions(0).DuplicateWindow; got != def {
		t.Fatalf("default timings give a window of %s, topology.DefaultOptions %s", got, def)
	}
}

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{{"512", 512, true}, {"500KiB", 500 << 10, true}, {"8MB", 8 << 20, true}, {"1.5K", 1536, true}, {"-1", 0, false}, {"lots", 0, false}}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseBytes(tc.in)
			if (err == nil) != tc.ok || got != tc.want {
				t.Fatalf("ParseBytes(%q) = %d, %v", tc.in, got, err)
			}
		})
	}
}

// The consumers never end a message on the server's side: JetStream drops a message at
// its consumer's MaxDeliver without telling anyone, which would lose a temporarily failing
// message's URLs. TRAWL_LOG_ERROR_AFTER only decides when the consume loop starts to shout.
func TestTimingsNeverDropOnTheServer(t *testing.T) {
	for _, v := range []string{"2", "20", "1000"} {
		t.Run(v, func(t *testing.T) {
			if got := LoadCommon(FromMap(map[string]string{"TRAWL_LOG_ERROR_AFTER": v}), ":9100").Timings().MaxDeliver; got != -1 {
				t.Fatalf("consumer MaxDeliver = %d with TRAWL_LOG_ERROR_AFTER=%s, want -1 (unlimited)", got, v)
			}
		})
	}
}

// The services and trawlctl read the same settings to find a crawl; a CLI names its flags
// in the same messages.
func TestConnValidate(t *testing.T) {
	flags := func(v string) string { return map[string]string{"TRAWL_SHARDS": "-shards"}[v] }
	for _, tc := range []struct {
		name string
		env  map[string]string
		flag func(string) string
		want string // "" = valid
	}{
		{"defaults", nil, nil, ""},
		{"shards", map[string]string{"TRAWL_SHARDS": "1025"}, nil, "TRAWL_SHARDS=1025: want 1..1024"},
		{"shards with its flag", map[string]string{"TRAWL_SHARDS": "0"}, flags, "TRAWL_SHARDS (-shards)=0"},
		{"nats url", map[string]string{"TRAWL_NATS_URL": "localhost"}, flags, `TRAWL_NATS_URL: natsx: bad NATS URL "localhost"`},
		{"nats cluster", map[string]string{"TRAWL_NATS_URL": "nats://a:4222, nats://b:4222,nats://c:4222"}, nil, ""},
		{"nats cluster with a bad server", map[string]string{"TRAWL_NATS_URL": "nats://a:4222,b"}, nil, `TRAWL_NATS_URL: natsx: bad NATS URL "nats://a:4222,b"`},
		{"redis cluster", map[string]string{"TRAWL_REDIS_URL": "redis://a:7000,b:7001,c:7002"}, nil, ""},
		{"redis cluster with a database", map[string]string{"TRAWL_REDIS_URL": "redis://a:7000,b:7001/2"}, nil, "TRAWL_REDIS_URL: redisx: bad Redis URL"},
		{"redis cluster with a seed without port", map[string]string{"TRAWL_REDIS_URL": "redis://a:7000,b"}, nil, "TRAWL_REDIS_URL"},
		{"redis without host", map[string]string{"TRAWL_REDIS_URL": "redis:///0"}, nil, "TRAWL_REDIS_URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := LoadConn(FromMap(tc.env)).Validate(tc.flag)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want %q", err, tc.want)
			}
		})
	}
	if c := LoadCommon(FromMap(nil), ":1"); c.Conn != LoadConn(FromMap(nil)) {
		t.Errorf("Common reads other connection defaults (%+v) than LoadConn", c.Conn)
	}
}

// A URL that is refused is quoted without its password, also when it does not parse: a
// password with a bare '%', '/', '?', '#' or '@' is the usual reason it does not.
func TestConnValidateHidesPasswords(t *testing.T) {
	const pw = "Pw7%zzSekr3t"
	for _, tc := range []struct{ name, variable, value string }{
		{"nats bare percent", "TRAWL_NATS_URL", "nats://trawl:" + pw + "@nats:4222"},
		{"nats no host", "TRAWL_NATS_URL", "nats://trawl:" + pw + "@"},
		{"nats slash", "TRAWL_NATS_URL", "nats://trawl:Pw7/zzSekr3t@nats:4222"},
		{"nats list", "TRAWL_NATS_URL", "nats://a:4222,nats://trawl:" + pw + "@b:4222"},
		{"nats token", "TRAWL_NATS_URL", "nats://" + pw + "@nats:4222"},
		{"redis bare percent", "TRAWL_REDIS_URL", "redis://:" + pw + "@redis:6379/0"},
		{"redis no host", "TRAWL_REDIS_URL", "redis://:" + pw + "@/0"},
		{"redis slash", "TRAWL_REDIS_URL", "redis://u:Pw7/zzSekr3t@redis:6379/0"},
		{"redis question mark", "TRAWL_REDIS_URL", "redis://u:Pw7?zzSekr3t@redis:6379/0"},
		{"redis cluster slash", "TRAWL_REDIS_URL", "redis-cluster://u:Pw7/zzSekr3t@a:7000,b:7001"},
		{"redis cluster bare percent", "TRAWL_REDIS_URL", "redis://u:" + pw + "@a:7000,b:7001"},
		{"redis no scheme", "TRAWL_REDIS_URL", "u:" + pw + "@redis:6379"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := LoadConn(FromMap(map[string]string{tc.variable: tc.value})).Validate(nil)
			if err == nil {
				t.Fatalf("%s=%s accepted", tc.variable, tc.value)
			}
			if !strings.Contains(err.Error(), tc.variable) {
				t.Errorf("Validate = %v, want it to name %s", err, tc.variable)
			}
			for _, piece := range []string{"Pw7", "zzSekr3t", "%zz"} {
				if strings.Contains(err.Error(), piece) {
					t.Errorf("Validate = %v: shows %q of the password", err, piece)
				}
			}
		})
	}
}

// A program that starts services with extra variables reads a setting as they will: its
// own map first, then the process environment.
func TestOverlay(t *testing.T) {
	t.Setenv("TRAWL_FSYNC", "1s")
	t.Setenv("TRAWL_SHARDS", "4")
	r := Overlay(map[string]string{"TRAWL_SHARDS": "2"})
	if got := r.String("FSYNC", "always"); got != "1s" {
		t.Errorf("FSYNC = %q, want the process environment's 1s", got)
	}
	if got := r.Int("SHARDS", 1); got != 2 {
		t.Errorf("SHARDS = %d, want the map's 2", got)
	}
	if got := r.Int("MAX_DEPTH", 20); got != 20 {
		t.Errorf("MAX_DEPTH = %d, want the default", got)
	}
	if got := len(r.Read()); got != 3 {
		t.Errorf("Read() has %d settings, want 3", got)
	}
}

type checked struct{ ok bool }

func (c checked) Validate() error {
	if !c.ok {
		return errors.New("out of range")
	}
	return nil
}

func TestValid(t *testing.T) {
	unread := errors.New("not a number")
	for _, tc := range []struct {
		name    string
		cfg     checked
		loadErr error
		want    string
	}{
		{"read and in range", checked{ok: true}, nil, ""},
		{"out of range", checked{ok: false}, nil, "out of range"},
		{"not read: Validate is not asked", checked{ok: false}, unread, "not a number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Valid(tc.cfg, tc.loadErr)
			if got := fmt.Sprint(err); (err == nil) != (tc.want == "") || (err != nil && got != tc.want) {
				t.Fatalf("Valid = %v, want %q", err, tc.want)
			}
		})
	}
}
