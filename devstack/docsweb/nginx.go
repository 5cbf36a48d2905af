package docsweb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/template"
	"time"
)

// Server is a running nginx serving the sites.
type Server struct {
	prefix string
	port   int
	sites  []Site
	addrs  []string // of each site, in order
	cmd    *exec.Cmd
	done   chan struct{}
	err    error // of the process, once done is closed
}

// Options configure Start.
type Options struct {
	Nginx string // the nginx binary
	Sites []Site
	// MimeTypes is nginx's mime.types, Debian's by default.
	MimeTypes string
}

// startAttempts bounds the tries for a port: one is chosen free, and another process may
// take it before nginx binds it.
const startAttempts = 5

// Start runs nginx in the foreground (`daemon off`) with its own prefix, a new temporary
// directory, until Close: each site on an address of its own, 127.0.0.2 onwards, all on
// one free port. It returns once every site's address accepts connections.
func Start(ctx context.Context, o Options) (*Server, error) {
	if o.MimeTypes == "" {
		o.MimeTypes = "/etc/nginx/mime.types"
	}
	if len(o.Sites) == 0 || len(o.Sites) > 250 {
		return nil, fmt.Errorf("docsweb: %d sites: want 1..250", len(o.Sites))
	}
	prefix, err := os.MkdirTemp("", "trawl-docsweb-")
	if err != nil {
		return nil, err
	}
	// nginx's workers (nobody, when started as root) read the robots.txt files here.
	if err := os.Chmod(prefix, 0o755); err != nil {
		return nil, errors.Join(err, os.RemoveAll(prefix))
	}
	s := &Server{prefix: prefix, sites: o.Sites}
	for i := range o.Sites {
		s.addrs = append(s.addrs, "127.0.0."+strconv.Itoa(2+i))
	}
	if err := s.writeFiles(); err != nil {
		return nil, errors.Join(err, os.RemoveAll(prefix))
	}
	var errs []error
	for range startAttempts {
		if err := s.start(ctx, o); err == nil {
			return s, nil
		} else {
			errs = append(errs, err)
			if !strings.Contains(err.Error(), "Address already in use") {
				break
			}
		}
	}
	return nil, errors.Join(append(errs, os.RemoveAll(prefix))...)
}

func (s *Server) writeFiles() error {
	for _, d := range []string{"robots", "tmp"} {
		if err := os.MkdirAll(filepath.Join(s.prefix, d), 0o755); err != nil {
			return err
		}
	}
	for _, site := range s.sites {
		b, err := site.Robots()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(s.prefix, "robots", site.Name+".txt"), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) start(ctx context.Context, o Options) error {
	port, err := freePort(s.addrs)
	if err != nil {
		return err
	}
	s.port = port
	conf, err := s.config(o.MimeTypes)
	if err != nil {
		return err
	}
	confPath := filepath.Join(s.prefix, "nginx.conf")
	if err := os.WriteFile(confPath, conf, 0o644); err != nil {
		return err
	}
	out, err := os.Create(filepath.Join(s.prefix, "nginx.out"))
	if err != nil {
		return err
	}
	defer out.Close()
	// -e: the error log before the configuration is read is the prefix's too, not
	// /var/log/nginx, which a user may not write.
	cmd := exec.Command(o.Nginx, "-p", s.prefix+"/", "-c", confPath, "-e", filepath.Join(s.prefix, "error.log"), "-g", "daemon off;")
	cmd.Stdout, cmd.Stderr = out, out
	setProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("docsweb: start %s: %w", o.Nginx, err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func() {
		s.err = cmd.Wait()
		close(s.done)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for _, addr := range s.addrs {
		hp := net.JoinHostPort(addr, strconv.Itoa(port))
		for {
			c, err := net.DialTimeout("tcp", hp, time.Second)
			if err == nil {
				c.Close()
				break
			}
			select {
			case <-s.done:
				b, _ := os.ReadFile(filepath.Join(s.prefix, "error.log"))
				o, _ := os.ReadFile(filepath.Join(s.prefix, "nginx.out"))
				return fmt.Errorf("docsweb: nginx exited (%v) before serving %s: %s%s", s.err, hp, bytes.TrimSpace(o), lastLines(b, 5))
			case <-ctx.Done():
				s.kill()
				return fmt.Errorf("docsweb: waiting for nginx to serve %s: %w", hp, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				s.kill()
				return fmt.Errorf("docsweb: nginx does not accept connections on %s after 30s", hp)
			}
		}
	}
	return nil
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "\n" + strings.Join(lines, "\n")
}

// freePort finds a port free on every address.
func freePort(addrs []string) (int, error) {
	for range 20 {
		l, err := net.Listen("tcp", net.JoinHostPort(addrs[0], "0"))
		if err != nil {
			return 0, fmt.Errorf("docsweb: listen on %s: %w", addrs[0], err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		ls := []net.Listener{l}
		ok := true
		for _, a := range addrs[1:] {
			l, err := net.Listen("tcp", net.JoinHostPort(a, strconv.Itoa(port)))
			if err != nil {
				ok = false
				break
			}
			ls = append(ls, l)
		}
		for _, l := range ls {
			l.Close()
		}
		if ok {
			return port, nil
		}
	}
	return 0, fmt.Errorf("docsweb: no port free on all of %s after 20 tries", strings.Join(addrs, ", "))
}

func (s *Server) config(mimeTypes string) ([]byte, error) {
	tmpl, err := template.ParseFS(files, "testdata/nginx.conf.tmpl")
	if err != nil {
		return nil, err
	}
	type vhost struct {
		Site
		Host, Addr string
	}
	data := struct {
		Prefix, MimeTypes string
		Port              int
		Sites             []vhost
	}{Prefix: s.prefix, MimeTypes: mimeTypes, Port: s.port}
	for i, site := range s.sites {
		data.Sites = append(data.Sites, vhost{Site: site, Host: site.Host(), Addr: s.addrs[i]})
	}
	var b bytes.Buffer
	if err := tmpl.Execute(&b, data); err != nil {
		return nil, fmt.Errorf("docsweb: nginx.conf: %w", err)
	}
	return b.Bytes(), nil
}

// Origin is the site's origin, http://host:port.
func (s *Server) Origin(site Site) string {
	return "http://" + net.JoinHostPort(site.Host(), strconv.Itoa(s.port))
}

// Seeds are every site's root URL.
func (s *Server) Seeds() []string {
	var out []string
	for _, site := range s.sites {
		out = append(out, s.Origin(site)+"/")
	}
	return out
}

// Resolve is the value of TRAWL_RESOLVE that sends each site's name to its address.
func (s *Server) Resolve() string {
	var out []string
	for i, site := range s.sites {
		out = append(out, site.Host()+"="+s.addrs[i])
	}
	return strings.Join(out, ",")
}

// Port is the port every site listens on.
func (s *Server) Port() int { return s.port }

// Sites are the sites served.
func (s *Server) Sites() []Site { return s.sites }

// AccessLog is the path of nginx's access log.
func (s *Server) AccessLog() string { return filepath.Join(s.prefix, "access.log") }

// Log reads the access log as it is now.
func (s *Server) Log() ([]Entry, error) { return ReadLog(s.AccessLog()) }

// Close stops nginx gracefully (SIGQUIT lets requests in progress finish), kills it after
// 10 s, and removes its prefix.
func (s *Server) Close() error {
	var err error
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			s.kill()
			err = errors.New("docsweb: nginx did not stop within 10s of SIGQUIT; killed")
		}
	}
	return errors.Join(err, os.RemoveAll(s.prefix))
}

func (s *Server) kill() {
	killGroup(s.cmd)
	<-s.done
}
