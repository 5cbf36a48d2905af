package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/envconfig"
)

func TestDirSecrets(t *testing.T) {
	dir := t.TempDir()
	write := func(name, v string, mtime time.Time) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	s := DirSecrets(dir)
	t0 := time.Now().Add(-time.Hour)
	write("site-cookie", "session=hunter2\n", t0)

	t.Run("the file's content, trailing newline removed", func(t *testing.T) {
		if v, err := s.Lookup("site-cookie"); err != nil || v != "session=hunter2" {
			t.Fatalf("Lookup = %q, %v", v, err)
		}
	})
	t.Run("a rotated file is read again", func(t *testing.T) {
		write("site-cookie", "session=rotated42\n", t0.Add(time.Minute))
		if v, err := s.Lookup("site-cookie"); err != nil || v != "session=rotated42" {
			t.Fatalf("Lookup after rotation = %q, %v", v, err)
		}
	})
	t.Run("a missing secret is named", func(t *testing.T) {
		_, err := s.Lookup("login")
		if err == nil || !strings.Contains(err.Error(), `"login"`) {
			t.Fatalf("Lookup(login) = %v; want an error naming it", err)
		}
	})
	t.Run("errors never hold the value", func(t *testing.T) {
		write("huge", strings.Repeat("topsecret", 10000), t0)
		_, err := s.Lookup("huge")
		if err == nil || !strings.Contains(err.Error(), `"huge"`) || strings.Contains(err.Error(), "topsecret") {
			t.Fatalf("Lookup(huge) = %v; want an error naming it without its content", err)
		}
	})
	t.Run("a name is one file in the directory", func(t *testing.T) {
		if _, err := s.Lookup("../etc/passwd"); err == nil {
			t.Fatal("a path outside the directory was read")
		}
	})
}

func TestSettings(t *testing.T) {
	tests := []struct {
		env  map[string]string
		want Settings
		err  string
	}{
		{map[string]string{}, Defaults, ""},
		{map[string]string{"TRAWL_POLICY_POLL": "200ms", "TRAWL_SECRETS_DIR": "/s"}, Settings{Poll: 200 * time.Millisecond, SecretsDir: "/s"}, ""},
		{map[string]string{"TRAWL_POLICY_POLL": "3s"}, Settings{}, "TRAWL_POLICY_POLL=3s"},
		{map[string]string{"TRAWL_POLICY_POLL": "0s"}, Settings{}, "TRAWL_POLICY_POLL=0s"},
	}
	for _, tt := range tests {
		t.Run(strings.Join([]string{tt.env["TRAWL_POLICY_POLL"], tt.err}, " "), func(t *testing.T) {
			r := envconfig.FromMap(tt.env)
			s := Load(r)
			err := s.Validate()
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Validate = %v, want an error saying %s", err, tt.err)
				}
				return
			}
			if err != nil || r.Err() != nil || s != tt.want {
				t.Fatalf("Load = %+v, %v, %v; want %+v", s, err, r.Err(), tt.want)
			}
		})
	}
}
