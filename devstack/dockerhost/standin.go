package dockerhost

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"time"
)

// The base images the Dockerfiles and compose.yaml use by default. TestBaseImagesNamed
// checks that they name these and no other.
const (
	GoImage      = "golang:1.26-bookworm"
	RuntimeImage = "gcr.io/distroless/static-debian12:nonroot"
	// DebianImage is the renderer's runtime image: Debian, onto which the Dockerfile's
	// renderer target installs Debian's chromium with apt-get.
	DebianImage = "debian:bookworm-slim"
	NATSImage   = "nats:2.15-alpine"
	RedisImage  = "redis:7.4-alpine"
	// PrometheusImage serves the `metrics` profile.
	PrometheusImage = "prom/prometheus:v3.5.0"
)

// BaseImages are every image above: each has a stand-in, and the files name no other.
var BaseImages = []string{GoImage, RuntimeImage, DebianImage, NATSImage, RedisImage, PrometheusImage}

// standinLabel marks an image built here, with the hash of what it was built from: an
// image with the label and another hash is rebuilt, one without it (pulled from a
// registry) is left alone.
const standinLabel = "org.trawl.standin"

// recipe versions every stand-in: bump it when the way they are built changes.
const recipe = "1"

// One Debian rootfs serves the builder, Debian (the renderer's base), NATS (wget for its
// healthcheck) and Redis (redis-server, redis-cli, sh, grep, getent, cut for the
// healthcheck and cluster-redis-init).
var basePackages = []string{"ca-certificates", "redis-server", "redis-tools", "wget"}

const debianSuite = "bookworm"

// Standins says what the compose test's base images are.
type Standins struct {
	Root string    // repository root
	Log  io.Writer // progress
	// Mirror is the Debian mirror for debootstrap; empty takes the first one apt's sources
	// name for the suite.
	Mirror string
}

// Ensure makes every base image present: one already there (pulled earlier) or pulled now
// is used as is; where no registry answers, a stand-in is built and said so. Stand-ins are
// rebuilt only when what they are built from changes.
func (s Standins) Ensure(ctx context.Context) error {
	if s.Log == nil {
		s.Log = io.Discard
	}
	need := map[string]bool{}
	needBase, needAny := false, false
	for _, img := range BaseImages {
		real, err := s.present(ctx, img)
		if err != nil {
			return err
		}
		need[img] = !real
		needAny = needAny || !real
		// Every stand-in but the runtime's starts from the Debian rootfs.
		needBase = needBase || (!real && img != RuntimeImage)
	}
	if !needAny {
		return nil
	}
	var base string
	if needBase {
		var err error
		if base, err = s.base(ctx); err != nil {
			return err
		}
	}
	steps := []struct {
		img   string
		build func(context.Context, string) error
	}{
		{RuntimeImage, func(ctx context.Context, _ string) error { return s.runtime(ctx) }},
		{DebianImage, s.debian},
		{RedisImage, s.redis},
		{NATSImage, s.nats},
		{GoImage, s.golang},
		{PrometheusImage, s.prometheus},
	}
	for _, st := range steps {
		if need[st.img] {
			if err := st.build(ctx, base); err != nil {
				return fmt.Errorf("dockerhost: stand-in for %s: %w", st.img, err)
			}
		}
	}
	return nil
}

// present reports whether img is a real image (here already, or pulled now); false means a
// stand-in is to be made or checked.
func (s Standins) present(ctx context.Context, img string) (bool, error) {
	label, exists := imageLabel(ctx, img)
	if exists {
		return label == "", nil
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if _, err := Output(pctx, nil, "docker", "pull", "-q", img); err == nil {
		fmt.Fprintf(s.Log, "dockerhost: pulled %s\n", img)
		return true, nil
	} else {
		fmt.Fprintf(s.Log, "dockerhost: %s cannot be pulled (%s): a local stand-in takes its name\n", img, firstLine(err.Error()))
	}
	return false, nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// imageLabel returns the stand-in label of an image and whether the image exists.
func imageLabel(ctx context.Context, img string) (string, bool) {
	out, err := Output(ctx, nil, "docker", "image", "inspect", "-f", `{{index .Config.Labels "`+standinLabel+`"}}`, img)
	if err != nil {
		return "", false
	}
	v := strings.TrimSpace(out)
	if v == "<no value>" {
		v = ""
	}
	return v, true
}

func hashOf(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s;", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// base makes the Debian rootfs image the other stand-ins start from, with debootstrap.
func (s Standins) base(ctx context.Context) (string, error) {
	tag := "trawl-standin/debian:" + debianSuite + "-" + hashOf(recipe, debianSuite, strings.Join(basePackages, ","), runtime.GOARCH)
	if _, ok := imageLabel(ctx, tag); ok {
		return tag, nil
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return "", fmt.Errorf("dockerhost: debootstrap %w (Debian package debootstrap), needed to build stand-in base images: %w", errNotInstalled, err)
	}
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("dockerhost: debootstrap needs root to build the stand-in base images")
	}
	mirror := s.Mirror
	if mirror == "" {
		mirror = aptMirror(debianSuite)
	}
	dir, err := os.MkdirTemp("", "trawl-standin-rootfs-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	fmt.Fprintf(s.Log, "dockerhost: building %s: Debian %s minbase + %s from %s (debootstrap)\n", tag, debianSuite, strings.Join(basePackages, " "), mirror)
	start := time.Now()
	if err := Run(ctx, io.Discard, "", nil, "debootstrap", "--variant=minbase", "--include="+strings.Join(basePackages, ","),
		debianSuite, dir, mirror); err != nil {
		return "", fmt.Errorf("dockerhost: debootstrap: %w", err)
	}
	// Caches and logs of the installation have no place in an image.
	for _, p := range []string{"var/cache/apt/archives", "var/lib/apt/lists", "var/log"} {
		_ = os.RemoveAll(filepath.Join(dir, p))
		_ = os.MkdirAll(filepath.Join(dir, p), 0o755)
	}
	tarCmd := exec.CommandContext(ctx, "tar", "-C", dir, "--numeric-owner", "-c", ".")
	imp := exec.CommandContext(ctx, "docker", "import", "--change", "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "-", tag)
	pipe, err := tarCmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	imp.Stdin = pipe
	var impErr bytes.Buffer
	imp.Stderr = &impErr
	if err := tarCmd.Start(); err != nil {
		return "", err
	}
	if err := imp.Run(); err != nil {
		_ = tarCmd.Wait()
		return "", fmt.Errorf("dockerhost: docker import: %w: %s", err, impErr.String())
	}
	if err := tarCmd.Wait(); err != nil {
		return "", fmt.Errorf("dockerhost: tar of the rootfs: %w", err)
	}
	fmt.Fprintf(s.Log, "dockerhost: %s built in %s\n", tag, time.Since(start).Round(time.Second))
	return tag, nil
}

// aptMirror returns the first Debian mirror apt's sources list for suite.
func aptMirror(suite string) string {
	const fallback = "http://deb.debian.org/debian"
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*.sources")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, stanza := range strings.Split(string(b), "\n\n") {
			var uris, suites []string
			for _, l := range strings.Split(stanza, "\n") {
				k, v, ok := strings.Cut(l, ":")
				if !ok {
					continue
				}
				switch strings.TrimSpace(k) {
				case "URIs":
					uris = strings.Fields(v)
				case "Suites":
					suites = strings.Fields(v)
				}
			}
			for _, su := range suites {
				if su == suite && len(uris) > 0 {
					return uris[0]
				}
			}
		}
	}
	lists, _ := filepath.Glob("/etc/apt/sources.list.d/*.list")
	lists = append([]string{"/etc/apt/sources.list"}, lists...)
	line := regexp.MustCompile(`^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)\s`)
	for _, f := range lists {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			if m := line.FindStringSubmatch(strings.TrimSpace(sc.Text()) + " "); m != nil && m[2] == suite {
				fh.Close()
				return m[1]
			}
		}
		fh.Close()
	}
	return fallback
}

// buildCtx is a docker build context streamed as a tar: a Dockerfile, files given
// inline, and directories of this machine.
type buildCtx struct {
	dockerfile string
	files      []ctxFile
	dirs       map[string]string // context path → directory here
}

type ctxFile struct {
	name string
	mode int64
	body []byte
}

// PruneLeftovers removes the untagged images built on a stand-in (they inherit its label)
// before the given time: what the classic builder leaves of a multi-stage build (each
// build stage's last image) and of an image built again under the same tag. A run of the
// compose test leaves about four gigabytes of them, which would fill the machine's disk
// within days. Those of the current run (made after before) stay, so the next run's
// builds start from its build stages: its Go modules and, where the sources are the same,
// its binaries. Tagged images always stay.
func PruneLeftovers(ctx context.Context, w io.Writer, before time.Time) error {
	until := fmt.Sprintf("until=%d.%09d", before.Unix(), before.Nanosecond())
	out, err := Output(ctx, nil, "docker", "image", "prune", "-f", "--filter", "label="+standinLabel, "--filter", until)
	if err != nil {
		return fmt.Errorf("dockerhost: removing the earlier builds' untagged images: %w", err)
	}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(l, "Total reclaimed space") {
			fmt.Fprintf(w, "dockerhost: untagged images of earlier builds removed; %s\n", strings.ToLower(l[:1])+l[1:])
		}
	}
	return nil
}

// build builds tag from the context unless an image with that tag and key exists.
func (s Standins) build(ctx context.Context, tag, key, what string, bc buildCtx) error {
	if label, ok := imageLabel(ctx, tag); ok && label == key {
		return nil
	}
	fmt.Fprintf(s.Log, "dockerhost: building stand-in %s: %s\n", tag, what)
	start := time.Now()
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(bc.write(pw)) }()
	cmd := exec.CommandContext(ctx, "docker", "build", "-q", "-t", tag, "--label", standinLabel+"="+key, "-")
	cmd.Env = append(os.Environ(), "DOCKER_BUILDKIT=0")
	cmd.Stdin = pr
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		pr.CloseWithError(err)
		return fmt.Errorf("docker build %s: %w: %s", tag, err, tail(stderr.String(), 3000))
	}
	fmt.Fprintf(s.Log, "dockerhost: %s built in %s\n", tag, time.Since(start).Round(time.Second))
	return nil
}

func (bc buildCtx) write(w io.Writer) error {
	tw := tar.NewWriter(w)
	add := func(name string, mode int64, body []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(body)), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	if err := add("Dockerfile", 0o644, []byte(bc.dockerfile)); err != nil {
		return err
	}
	for _, f := range bc.files {
		if err := add(f.name, f.mode, f.body); err != nil {
			return err
		}
	}
	names := make([]string, 0, len(bc.dirs))
	for n := range bc.dirs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		src := bc.dirs[name]
		err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(src, p)
			if err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			link := ""
			if info.Mode()&fs.ModeSymlink != 0 {
				if link, err = os.Readlink(p); err != nil {
					return err
				}
			}
			hdr, err := tar.FileInfoHeader(info, link)
			if err != nil {
				return err
			}
			hdr.Name = filepath.ToSlash(filepath.Join(name, rel))
			hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			if !info.Mode().IsRegular() {
				return nil
			}
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(tw, f)
			return err
		})
		if err != nil {
			return err
		}
	}
	return tw.Close()
}

// runtime stands in for distroless static nonroot: no shell, CA certificates, and the
// users root, nonroot (65532, as distroless) and nobody.
func (s Standins) runtime(ctx context.Context) error {
	ca, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil {
		return fmt.Errorf("CA bundle of this machine: %w", err)
	}
	passwd := "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group := "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n"
	df := "FROM scratch\n" +
		"COPY etc/ /etc/\n" +
		"COPY --chown=65532:65532 home/ /home/nonroot/\n" +
		"COPY tmp/ /tmp/\n" +
		"ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt\n" +
		"USER 65532\nWORKDIR /home/nonroot\n"
	bc := buildCtx{dockerfile: df, files: []ctxFile{
		{"etc/passwd", 0o644, []byte(passwd)},
		{"etc/group", 0o644, []byte(group)},
		{"etc/ssl/certs/ca-certificates.crt", 0o644, ca},
		{"home/.keep", 0o644, nil},
		{"tmp/.keep", 0o644, nil},
	}}
	return s.build(ctx, RuntimeImage, hashOf(recipe, df, passwd, group, string(ca)),
		"an empty image with CA certificates and the nonroot user (65532)", bc)
}

// debian stands in for Debian's slim image: the Debian rootfs itself (minbase, a few
// packages more than the slim image has) with the real image's apt sources — the suite,
// its updates and its security updates — on this machine's mirrors, so that `apt-get
// install` in a build on it installs what it would on the real image.
func (s Standins) debian(ctx context.Context, base string) error {
	mirror := s.Mirror
	if mirror == "" {
		mirror = aptMirror(debianSuite)
	}
	security := aptMirror(debianSuite + "-security")
	if security == aptMirror("no such suite") {
		security = "http://deb.debian.org/debian-security"
	}
	sources := "Types: deb\nURIs: " + mirror + "\nSuites: " + debianSuite + " " + debianSuite + "-updates\nComponents: main\n" +
		"Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n" +
		"Types: deb\nURIs: " + security + "\nSuites: " + debianSuite + "-security\nComponents: main\n" +
		"Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
	df := "FROM " + base + "\nRUN rm -f /etc/apt/sources.list\nCOPY debian.sources /etc/apt/sources.list.d/debian.sources\nCMD [\"bash\"]\n"
	return s.build(ctx, DebianImage, hashOf(recipe, df, sources), "Debian "+debianSuite+" minbase ("+base+"), apt sources on "+mirror+" and "+security,
		buildCtx{dockerfile: df, files: []ctxFile{{"debian.sources", 0o644, []byte(sources)}}})
}

// redisWrapper runs Debian's redis-server as the official image's does: without protected
// mode (which that image compiles out), since other containers are its clients.
const redisWrapper = "#!/bin/sh\nexec /usr/bin/redis-server \"$@\" --protected-mode no\n"

func (s Standins) redis(ctx context.Context, base string) error {
	df := "FROM " + base + "\nCOPY redis-server /usr/local/bin/redis-server\nWORKDIR /data\nEXPOSE 6379\nCMD [\"redis-server\"]\n"
	return s.build(ctx, RedisImage, hashOf(recipe, df, redisWrapper), "Debian's redis-server and redis-cli on "+base,
		buildCtx{dockerfile: df, files: []ctxFile{{"redis-server", 0o755, []byte(redisWrapper)}}})
}

// prometheus installs Debian's prometheus on the base, run as the official image runs it:
// as nobody, its configuration at /etc/prometheus/prometheus.yml, its data in /prometheus.
func (s Standins) prometheus(ctx context.Context, base string) error {
	df := "FROM " + base + "\n" +
		"RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null && rm -rf /var/lib/apt/lists/*\n" +
		"RUN mkdir -p /prometheus && chown nobody:nogroup /prometheus\n" +
		"USER nobody\nWORKDIR /prometheus\nEXPOSE 9090\n" +
		"ENTRYPOINT [\"/usr/bin/prometheus\"]\n" +
		"CMD [\"--config.file=/etc/prometheus/prometheus.yml\", \"--storage.tsdb.path=/prometheus\"]\n"
	return s.build(ctx, PrometheusImage, hashOf(recipe, df), "Debian's prometheus on "+base, buildCtx{dockerfile: df})
}

// nats builds nats-server from its Go module, at the version devstack's tests run.
func (s Standins) nats(ctx context.Context, base string) error {
	version, err := moduleVersion(filepath.Join(s.Root, "devstack", "go.mod"), "github.com/nats-io/nats-server/v2")
	if err != nil {
		return err
	}
	df := "FROM " + base + "\nCOPY nats-server /usr/local/bin/nats-server\nEXPOSE 4222 6222 8222\nENTRYPOINT [\"nats-server\"]\n"
	key := hashOf(recipe, df, version)
	if label, ok := imageLabel(ctx, NATSImage); ok && label == key {
		return nil
	}
	bin, err := os.MkdirTemp("", "trawl-standin-nats-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(bin)
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=", "CGO_ENABLED=0", "GOBIN="+bin)
	if err := Run(ctx, io.Discard, "", env, "go", "install", "-trimpath", "github.com/nats-io/nats-server/v2@"+version); err != nil {
		return err
	}
	b, err := os.ReadFile(filepath.Join(bin, "nats-server"))
	if err != nil {
		return err
	}
	return s.build(ctx, NATSImage, key, "nats-server "+version+" built from its Go module, on "+base,
		buildCtx{dockerfile: df, files: []ctxFile{{"nats-server", 0o755, b}}})
}

func moduleVersion(gomod, module string) (string, error) {
	b, err := os.ReadFile(gomod)
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(module) + `\s+(v\S+)`).FindSubmatch(b)
	if m == nil {
		return "", fmt.Errorf("%s does not require %s", gomod, module)
	}
	return string(m[1]), nil
}

// golang stands in for the Go builder: this machine's Go toolchain on Debian, and the
// modules the service images download served from a file proxy baked into the image
// (GOPROXY=file:///goproxy), checked against each module's go.sum.
func (s Standins) golang(ctx context.Context, base string) error {
	goroot, err := Output(ctx, nil, "go", "env", "GOROOT")
	if err != nil {
		return err
	}
	goroot = strings.TrimSpace(goroot)
	goVersion, err := Output(ctx, nil, "go", "env", "GOVERSION")
	if err != nil {
		return err
	}
	mods, err := os.MkdirTemp("", "trawl-standin-gomods-")
	if err != nil {
		return err
	}
	defer func() {
		_ = Run(context.WithoutCancel(ctx), io.Discard, "", append(os.Environ(), "GOMODCACHE="+mods), "go", "clean", "-modcache")
		_ = os.RemoveAll(mods)
	}()
	if err := s.seedModules(ctx, mods); err != nil {
		return err
	}
	proxy := filepath.Join(mods, "cache", "download")
	listing, err := dirListing(proxy)
	if err != nil {
		return err
	}
	df := "FROM " + base + "\n" +
		"COPY go/ /usr/local/go/\n" +
		"ENV PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin GOPATH=/go GOTOOLCHAIN=local\n" +
		// No network in the build: modules come from the baked proxy, and go.sum checks them.
		"ENV GOPROXY=file:///goproxy GOSUMDB=off\n" +
		"WORKDIR /go\n" +
		"COPY goproxy/ /goproxy/\n"
	key := hashOf(recipe, df, strings.TrimSpace(goVersion), listing)
	return s.build(ctx, GoImage, key, fmt.Sprintf("this machine's %s on %s, modules from a file proxy", strings.TrimSpace(goVersion), base),
		buildCtx{dockerfile: df, dirs: map[string]string{"go": goroot, "goproxy": proxy}})
}

// seedModules downloads into a module cache of its own what each service's image
// build needs (go mod download, then the packages it builds), taking what it can from
// this machine's module cache.
func (s Standins) seedModules(ctx context.Context, modcache string) error {
	hostCache, err := Output(ctx, nil, "go", "env", "GOMODCACHE")
	if err != nil {
		return err
	}
	hostProxy, err := Output(ctx, nil, "go", "env", "GOPROXY")
	if err != nil {
		return err
	}
	proxy := "file://" + filepath.Join(strings.TrimSpace(hostCache), "cache", "download") + "," + strings.TrimSpace(hostProxy)
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly", "GOMODCACHE="+modcache, "GOPROXY="+proxy, "CGO_ENABLED=0")
	dirs, err := filepath.Glob(filepath.Join(s.Root, "services", "*", "go.mod"))
	if err != nil || len(dirs) == 0 {
		return fmt.Errorf("no services/*/go.mod under %s: %v", s.Root, err)
	}
	type step struct {
		dir  string
		args []string
	}
	var steps []step
	for _, gm := range dirs {
		dir := filepath.Dir(gm)
		steps = append(steps, step{dir, []string{"mod", "download"}}, step{dir, []string{"list", "-deps", "./..."}})
	}
	for _, st := range steps {
		// A module whose go.sum misses entries fails here and again, visibly, in its image
		// build: that is the failure to see, so it is only noted.
		if err := Run(ctx, io.Discard, st.dir, env, "go", st.args...); err != nil {
			fmt.Fprintf(s.Log, "dockerhost: seeding modules for %s: %s\n", filepath.Base(st.dir), firstLine(err.Error()))
		}
	}
	return nil
}

// dirListing names every file under dir with its size: the identity of a module proxy
// (module versions never change content).
func dirListing(dir string) (string, error) {
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(&b, "%s %d\n", rel, info.Size())
		return nil
	})
	return b.String(), err
}
