package k8scluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// NodeName is the one node's name.
const NodeName = "trawl-node"

// The cluster's address ranges: pods on a CNI bridge, services behind kube-proxy.
const (
	PodCIDR     = "10.244.0.0/24"
	ServiceCIDR = "10.96.0.0/16"
	// apiServiceIP is the first address of ServiceCIDR, the `kubernetes` service's.
	apiServiceIP = "10.96.0.1"
)

// Options describe a cluster.
type Options struct {
	// Dir holds its state (etcd's data, certificates, containerd's and the kubelet's
	// directories, hostPath volumes) and the components' logs (Dir/logs). Started again on
	// the same Dir, the cluster keeps its objects and images.
	Dir string
	Bin Bin
	Log io.Writer // progress
	// Aliases are DNS names the cluster's resolver answers with a service's address besides
	// the services' own: a name, or a suffix starting with a dot (".synth.test" answers
	// every name under synth.test), mapped to "namespace/service".
	Aliases map[string]string
}

// Cluster is a running single-node cluster.
type Cluster struct {
	o          Options
	NodeIP     string
	Kubeconfig string // the admin's kubeconfig
	pki        pki
	procs      []*proc
	api        *http.Client
	dns        *resolver
}

type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts every component and waits until the node is Ready. Every failure says which
// component and where its log is. Stop stops it again.
func Start(ctx context.Context, o Options) (c *Cluster, err error) {
	if o.Log == nil {
		o.Log = io.Discard
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("k8scluster: the kubelet, containerd and kube-proxy need root (network namespaces, mounts, iptables); run as root")
	}
	for _, tool := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("k8scluster: %s not found: install Debian's containerd, runc and iptables (make k8s-test does): %w", tool, err)
		}
	}
	if _, err := os.Stat(filepath.Join(cniBinDir, "bridge")); err != nil {
		return nil, fmt.Errorf("k8scluster: no CNI bridge plugin in %s: install Debian's containernetworking-plugins: %w", cniBinDir, err)
	}
	// The components listen on their usual ports: one cluster per machine.
	for _, port := range []string{"2379", "2380", "6443", "10250", "10256"} {
		l, err := net.Listen("tcp", ":"+port)
		if err != nil {
			return nil, fmt.Errorf("k8scluster: port %s is taken (a cluster of an earlier run still running?): %w", port, err)
		}
		l.Close()
	}
	ip, err := nodeIP()
	if err != nil {
		return nil, err
	}
	c = &Cluster{o: o, NodeIP: ip}
	defer func() {
		if err != nil {
			c.Stop()
			c = nil
		}
	}()
	for _, d := range []string{"logs", "etcd", "cni", "kubelet", "containerd"} {
		if err := os.MkdirAll(filepath.Join(o.Dir, d), 0o755); err != nil {
			return c, fmt.Errorf("k8scluster: %w", err)
		}
	}
	if c.pki, err = newPKI(filepath.Join(o.Dir, "pki"), []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(apiServiceIP), net.ParseIP(ip)}); err != nil {
		return c, err
	}
	c.Kubeconfig = filepath.Join(o.Dir, "kubeconfig")
	if err := os.WriteFile(c.Kubeconfig, []byte(c.pki.kubeconfig("https://127.0.0.1:6443")), 0o600); err != nil {
		return c, fmt.Errorf("k8scluster: %w", err)
	}
	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(c.pki.path("ca.crt"))
	if err != nil {
		return c, fmt.Errorf("k8scluster: %w", err)
	}
	pool.AppendCertsFromPEM(caPEM)
	c.api = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}

	fmt.Fprintf(o.Log, "k8scluster: starting a cluster in %s (node %s, logs in %s)\n", o.Dir, ip, filepath.Join(o.Dir, "logs"))
	b := o.Bin
	if err := c.start("etcd", b.Path("etcd"), "--data-dir", filepath.Join(o.Dir, "etcd"),
		"--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
		"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", "default=http://127.0.0.1:2380", "--quota-backend-bytes", "2147483648"); err != nil {
		return c, err
	}
	p := c.pki.path
	if err := c.start("kube-apiserver", b.Path("kube-apiserver"), "--etcd-servers=http://127.0.0.1:2379",
		"--service-cluster-ip-range="+ServiceCIDR, "--secure-port=6443", "--advertise-address="+ip,
		"--tls-cert-file="+p("apiserver.crt"), "--tls-private-key-file="+p("apiserver.key"),
		"--client-ca-file="+p("ca.crt"), "--token-auth-file="+p("tokens.csv"),
		"--service-account-key-file="+p("sa.pub"), "--service-account-signing-key-file="+p("sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc", "--authorization-mode=Node,RBAC",
		"--allow-privileged=true", "--enable-priority-and-fairness=false",
		// The node's name is not in any DNS the host asks.
		"--kubelet-preferred-address-types=InternalIP"); err != nil {
		return c, err
	}
	if err := c.wait(ctx, 2*time.Minute, "kube-apiserver's /readyz", "kube-apiserver", func() (bool, string) {
		body, err := c.get(ctx, "/readyz")
		return err == nil && strings.TrimSpace(string(body)) == "ok", fmt.Sprintf("%s %v", body, err)
	}); err != nil {
		return c, err
	}
	kc := "--kubeconfig=" + c.Kubeconfig
	if err := c.start("kube-controller-manager", b.Path("kube-controller-manager"), kc,
		"--authentication-kubeconfig="+c.Kubeconfig, "--authorization-kubeconfig="+c.Kubeconfig,
		"--service-account-private-key-file="+p("sa.key"), "--root-ca-file="+p("ca.crt"),
		"--cluster-signing-cert-file="+p("ca.crt"), "--cluster-signing-key-file="+p("ca.key"),
		"--use-service-account-credentials=false", "--leader-elect=false"); err != nil {
		return c, err
	}
	if err := c.start("kube-scheduler", b.Path("kube-scheduler"), kc,
		"--authentication-kubeconfig="+c.Kubeconfig, "--authorization-kubeconfig="+c.Kubeconfig, "--leader-elect=false"); err != nil {
		return c, err
	}
	if err := c.startContainerd(ctx); err != nil {
		return c, err
	}
	if err := c.importPause(ctx); err != nil {
		return c, err
	}
	if c.dns, err = startResolver(ctx, ip, c, o.Aliases); err != nil {
		return c, err
	}
	if err := c.startKubelet(); err != nil {
		return c, err
	}
	if err := c.startKubeProxy(); err != nil {
		return c, err
	}
	if err := c.wait(ctx, 3*time.Minute, "node "+NodeName+" Ready", "kubelet", c.nodeReady); err != nil {
		return c, err
	}
	fmt.Fprintf(o.Log, "k8scluster: node %s Ready\n", NodeName)
	return c, nil
}

const cniBinDir = "/usr/lib/cni"

// containerdSock is containerd's socket: its own, beside any containerd the Docker engine
// runs.
func (c *Cluster) containerdSock() string { return "/run/trawl-k8s/containerd.sock" }

func (c *Cluster) startContainerd(ctx context.Context) error {
	cfg := fmt.Sprintf(`version = 2
root = %q
state = "/run/trawl-k8s/containerd"
[grpc]
  address = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  # The kubelet asks for OOM scores below containerd's own (-998 for the pause container),
  # which a node that is itself a container may not set: capped at containerd's instead.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = false
`, filepath.Join(c.o.Dir, "containerd"), c.containerdSock(), PauseImage, cniBinDir, filepath.Join(c.o.Dir, "cni"))
	// One bridge for the node's pods, masqueraded to the outside; the firewall plugin
	// accepts the pods' traffic in FORWARD, whose policy a Docker engine on the same host
	// sets to DROP (and bridged packets pass iptables); portmap for hostPort.
	cni := fmt.Sprintf(`{"cniVersion": "0.4.0", "name": "trawl", "plugins": [
  {"type": "bridge", "bridge": "trawl0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "firewall"},
  {"type": "portmap", "capabilities": {"portMappings": true}},
  {"type": "loopback"}]}
`, filepath.Join(c.o.Dir, "cni-ipam"), PodCIDR)
	for name, text := range map[string]string{"containerd.toml": cfg, "cni/10-trawl.conflist": cni} {
		if err := os.WriteFile(filepath.Join(c.o.Dir, name), []byte(text), 0o644); err != nil {
			return fmt.Errorf("k8scluster: %w", err)
		}
	}
	if err := c.start("containerd", "containerd", "--config", filepath.Join(c.o.Dir, "containerd.toml")); err != nil {
		return err
	}
	return c.wait(ctx, time.Minute, "containerd's socket", "containerd", func() (bool, string) {
		err := exec.CommandContext(ctx, "ctr", "-a", c.containerdSock(), "version").Run()
		return err == nil, fmt.Sprint(err)
	})
}

// ImportImage imports an image archive (`docker save`'s or an OCI one) into containerd's
// k8s.io namespace, where the kubelet finds it: pods name it with imagePullPolicy Never or
// IfNotPresent, and nothing is pulled.
func (c *Cluster) ImportImage(ctx context.Context, archive io.Reader) error {
	cmd := exec.CommandContext(ctx, "ctr", "-a", c.containerdSock(), "-n", "k8s.io", "images", "import", "-")
	cmd.Stdin = archive
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("k8scluster: ctr images import: %w: %s", err, out)
	}
	return nil
}

func (c *Cluster) importPause(ctx context.Context) error {
	archive, err := pauseArchive(c.o.Bin.Pause)
	if err != nil {
		return err
	}
	return c.ImportImage(ctx, bytes.NewReader(archive))
}

func (c *Cluster) startKubelet() error {
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# The API server calls the kubelet (logs, exec) without a client certificate: a test
# node's API, on the node's address only.
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}, x509: {clientCAFile: %q}}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
failCgroupV1: false
clusterDNS: [%q]
clusterDomain: cluster.local
failSwapOn: false
containerRuntimeEndpoint: unix://%s
imageServiceEndpoint: unix://%s
evictionHard: {memory.available: "100Mi", nodefs.available: "512Mi", imagefs.available: "512Mi"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
`, c.pki.path("ca.crt"), c.NodeIP, c.containerdSock(), c.containerdSock())
	path := filepath.Join(c.o.Dir, "kubelet.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return fmt.Errorf("k8scluster: %w", err)
	}
	return c.start("kubelet", c.o.Bin.Path("kubelet"), "--kubeconfig="+c.Kubeconfig, "--config="+path,
		"--hostname-override="+NodeName, "--node-ip="+c.NodeIP, "--root-dir="+filepath.Join(c.o.Dir, "kubelet"))
}

func (c *Cluster) startKubeProxy() error {
	cfg := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: %q}
mode: iptables
clusterCIDR: %q
hostnameOverride: %s
# The host's conntrack sysctls are left as they are (a container may not write them).
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
`, c.Kubeconfig, PodCIDR, NodeName)
	path := filepath.Join(c.o.Dir, "kube-proxy.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return fmt.Errorf("k8scluster: %w", err)
	}
	return c.start("kube-proxy", c.o.Bin.Path("kube-proxy"), "--config="+path)
}

// start starts a component in a process group of its own, its output in Dir/logs/<name>.log.
func (c *Cluster) start(name, bin string, args ...string) error {
	f, err := os.OpenFile(c.logPath(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("k8scluster: %w", err)
	}
	defer f.Close()
	fmt.Fprintf(f, "\n--- %s %s %s\n", time.Now().Format(time.RFC3339), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("k8scluster: start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	c.procs = append(c.procs, p)
	return nil
}

func (c *Cluster) logPath(name string) string { return filepath.Join(c.o.Dir, "logs", name+".log") }

// wait polls cond every half second until it holds, the component who exits, timeout
// passes or ctx ends; its error names what it waited for and the log to read.
func (c *Cluster) wait(ctx context.Context, timeout time.Duration, what, who string, cond func() (bool, string)) error {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ok, why := cond()
		if ok {
			return nil
		}
		last = why
		for _, p := range c.procs {
			select {
			case <-p.done:
				return fmt.Errorf("k8scluster: %s exited (%v) while waiting for %s; its log: %s\n%s", p.name, p.cmd.ProcessState, what, c.logPath(p.name), c.tail(p.name))
			default:
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("k8scluster: waited %s for %s; last: %s; see %s\n%s", timeout, what, last, c.logPath(who), c.tail(who))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("k8scluster: waiting for %s: %w", what, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// tail is the last lines of a component's log.
func (c *Cluster) tail(name string) string {
	b, _ := os.ReadFile(c.logPath(name))
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return strings.Join(lines, "\n")
}

// get GETs path from the API server as the admin.
func (c *Cluster) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://127.0.0.1:6443"+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.pki.token)
	resp, err := c.api.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return body, fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return body, nil
}

func (c *Cluster) nodeReady() (bool, string) {
	body, err := c.get(context.Background(), "/api/v1/nodes/"+NodeName)
	if err != nil {
		return false, err.Error()
	}
	var n struct {
		Status struct {
			Conditions []struct{ Type, Status, Message string }
		}
	}
	if err := json.Unmarshal(body, &n); err != nil {
		return false, err.Error()
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == "Ready" {
			return cond.Status == "True", cond.Message
		}
	}
	return false, "no Ready condition yet"
}

// Kubectl runs kubectl (the one built with the cluster) against it and returns its output.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, c.o.Bin.Path("kubectl"), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// Stop deletes what runs on the node (its pods' containers, their network) and stops every
// component, the kubelet first so that it starts nothing again.
func (c *Cluster) Stop() {
	if c.dns != nil {
		c.dns.close()
	}
	var containerd *proc
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		if p.name == "containerd" {
			containerd = p
			continue
		}
		stop(p)
		if p.name == "kubelet" {
			c.removeContainers()
		}
	}
	if containerd != nil {
		stop(containerd)
	}
	// kube-proxy's rules and the pods' bridge outlive it.
	if _, err := os.Stat(c.o.Bin.Path("kube-proxy")); err == nil {
		exec.Command(c.o.Bin.Path("kube-proxy"), "--cleanup").Run()
	}
	exec.Command("ip", "link", "delete", "trawl0").Run()
	unmountUnder(c.o.Dir)
	c.procs = nil
}

// Remove removes a cluster's state directory, unmounting first what the kubelet and
// containerd left mounted in it (the pods' volumes, the containers' root filesystems).
func Remove(dir string) error {
	unmountUnder(dir)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("k8scluster: remove %s: %w", dir, err)
	}
	return nil
}

// unmountUnder unmounts every mount point under dir, the deepest first.
func unmountUnder(dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	prefix := filepath.Clean(dir) + string(filepath.Separator)
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], prefix) {
			points = append(points, f[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		syscall.Unmount(points[i], syscall.MNT_DETACH)
	}
}

// removeContainers kills and removes every container of the k8s.io namespace (the pods'
// and their sandboxes), whose shims would otherwise outlive containerd.
func (c *Cluster) removeContainers() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctr := func(args ...string) string {
		out, _ := exec.CommandContext(ctx, "ctr", append([]string{"-a", c.containerdSock(), "-n", "k8s.io"}, args...)...).Output()
		return string(out)
	}
	ids := strings.Fields(ctr("containers", "ls", "-q"))
	for _, id := range ids {
		ctr("tasks", "kill", "-s", "SIGKILL", id)
	}
	for _, id := range ids {
		ctr("tasks", "delete", "-f", id)
		ctr("containers", "delete", id)
	}
}

func stop(p *proc) {
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// nodeIP is the address of the interface of the default route.
func nodeIP() (string, error) {
	conn, err := net.Dial("udp", "1.1.1.1:53")
	if err != nil {
		return "", fmt.Errorf("k8scluster: no default route for the node's address: %w", err)
	}
	defer conn.Close()
	return conn.LocalAddr().(*net.UDPAddr).IP.String(), nil
}
