package obs

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

// Probe asks a service's own /readyz and returns an exit code: 0 ready, 1 not. Container
// images carry no curl, so each binary answers `<binary> healthcheck` with this.
func Probe(ctx context.Context, addr string, w io.Writer) int {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		fmt.Fprintf(w, "healthcheck: bad address %q: %v\n", addr, err)
		return 1
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(host, port)+"/readyz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(w, "healthcheck: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(w, "healthcheck: %s: %s", resp.Status, body)
		return 1
	}
	return 0
}

// HealthcheckArg reports whether the process was started as `<binary> healthcheck`; main
// then exits with Probe's code instead of running the service.
func HealthcheckArg() bool { return len(os.Args) > 1 && os.Args[1] == "healthcheck" }
