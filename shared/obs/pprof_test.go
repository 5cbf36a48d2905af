package obs

import (
	"net/http"
	"strings"
	"testing"

	"github.com/trawl/trawl/shared/envconfig"
)

// The profiler is opt-in: reachable only with TRAWL_PPROF=true, and a malformed value
// stops start-up rather than silently leaving it off.
func TestServerPprof(t *testing.T) {
	for _, tc := range []struct {
		env     string
		want    int    // status of /debug/pprof/heap; 0 = the setting is refused
		wantErr string // part of the settings' error
	}{
		{env: "", want: http.StatusNotFound},
		{env: "false", want: http.StatusNotFound},
		{env: "true", want: http.StatusOK},
		{env: "maybe", wantErr: "TRAWL_PPROF"},
	} {
		t.Run("TRAWL_PPROF="+tc.env, func(t *testing.T) {
			r := envconfig.FromMap(map[string]string{"TRAWL_PPROF": tc.env})
			c := envconfig.LoadCommon(r, "127.0.0.1:0")
			if err := r.Err(); tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("settings error = %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			s, err := NewServer(c.HTTPAddr, NewRegistry(), nil, c.Pprof)
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			go s.Run(ctx)
			resp, err := http.Get("http://" + s.Addr() + "/debug/pprof/heap?debug=1")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("/debug/pprof/heap = %d, want %d", resp.StatusCode, tc.want)
			}
		})
	}
}
