package synthweb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// siteServer serves a one-host site (CodedSite, RecrawlSite) on a free port of a loopback
// address, until closeSite.
type siteServer struct {
	origin string // "http://<addr>:<port>"
	srv    *http.Server
	done   chan struct{}
}

// serveSite listens on addr and serves h; origin is set before h can be called. what names the
// site in errors.
func (ss *siteServer) serveSite(ctx context.Context, addr, what string, h http.HandlerFunc) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp4", net.JoinHostPort(addr, "0"))
	if err != nil {
		return fmt.Errorf("synthweb: %s: %w", what, err)
	}
	ss.origin = "http://" + ln.Addr().String()
	ss.done = make(chan struct{})
	ss.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(slog.Default().Handler(), slog.LevelWarn)}
	go func() {
		defer close(ss.done)
		if err := ss.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("synthweb: "+what, "err", err)
		}
	}()
	return nil
}

// closeSite stops the server and waits until it has stopped serving.
func (ss *siteServer) closeSite() error {
	err := ss.srv.Close()
	<-ss.done
	return err
}
