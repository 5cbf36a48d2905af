package redisx

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/trawl/trawl/shared/redact"
)

// TRAWL_REDIS_URL names one Redis server or a Redis Cluster:
//
//	redis://[user:password@]host:port[/db][?options]            one server (go-redis ParseURL)
//	rediss://…                                                   the same over TLS
//	redis://[user:password@]host:port,host:port,…[/0][?options]  a cluster: its seed nodes
//	redis-cluster://[user:password@]host:port[,…][/0][?options]  a cluster, even from one seed
//	rediss-cluster://…                                           a cluster over TLS
//
// A cluster's seeds need not be all its nodes: the client learns the slot map from any
// one of them. A cluster has only database 0. Options are go-redis's URL options
// (ParseURL, ParseClusterURL).

// Timeouts are the client settings a caller chooses; the URL's own options override them.
type Timeouts struct {
	Dial, Read, Write time.Duration
	Retries           int
}

// ErrURL marks a TRAWL_REDIS_URL that cannot be used.
var ErrURL = errors.New("redisx: bad Redis URL")

// IsCluster reports whether raw names a Redis Cluster.
func IsCluster(raw string) bool {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return false
	}
	if strings.HasSuffix(scheme, "-cluster") {
		return true
	}
	return strings.Contains(hostPart(rest), ",")
}

// hostPart is the host list of a URL without its scheme: after the userinfo, before the
// path or query.
func hostPart(rest string) string {
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest = rest[i+1:]
	}
	return rest
}

// Addrs returns the address (or the cluster's seed addresses) of raw, for messages: never
// the password, even of a URL that does not parse.
func Addrs(raw string) string {
	_, rest, ok := strings.Cut(redact.URL(raw), "://")
	if !ok {
		return redact.URL(raw)
	}
	return hostPart(rest)
}

// Check reports whether raw is a usable TRAWL_REDIS_URL, without connecting.
func Check(raw string) error {
	_, _, err := parse(raw)
	return err
}

// parse reads raw into the options of one server or of a cluster (exactly one is set).
func parse(raw string) (*redis.Options, *redis.ClusterOptions, error) {
	if Addrs(raw) == "" {
		return nil, nil, fmt.Errorf("%w: %q has no host", ErrURL, redact.URL(raw))
	}
	if !IsCluster(raw) {
		o, err := redis.ParseURL(raw)
		if err != nil {
			return nil, nil, parseError(raw, Addrs(raw), err)
		}
		return o, nil, nil
	}
	scheme, rest, _ := strings.Cut(raw, "://")
	scheme = strings.TrimSuffix(scheme, "-cluster")
	hosts := hostPart(rest)
	if hosts != Addrs(raw) {
		// A '/', '?' or '@' in the password, not percent-encoded, moved the host list.
		return nil, nil, badURL(raw)
	}
	userinfo := ""
	if i := strings.Index(rest, hosts); i > 0 {
		userinfo = rest[:i]
	}
	tail := rest[len(userinfo)+len(hosts):]
	path, query, _ := strings.Cut(tail, "?")
	if db := strings.Trim(path, "/"); db != "" && db != "0" {
		return nil, nil, fmt.Errorf("%w %q: a Redis Cluster has only database 0, not %q", ErrURL, hosts, db)
	}
	var addrs []string
	for _, h := range strings.Split(hosts, ",") {
		if _, _, err := net.SplitHostPort(h); err != nil {
			return nil, nil, fmt.Errorf("%w %q: cluster seed %q: want host:port: %w", ErrURL, hosts, h, err)
		}
		addrs = append(addrs, h)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, nil, fmt.Errorf("%w %q: options: %w", ErrURL, hosts, err)
	}
	for _, a := range addrs[1:] {
		q.Add("addr", a)
	}
	o, err := redis.ParseClusterURL(scheme + "://" + userinfo + addrs[0] + "?" + q.Encode())
	if err != nil {
		return nil, nil, parseError(raw, hosts, err)
	}
	return nil, o, nil
}

// parseError is go-redis's refusal of raw, without the URL: net/url's error quotes the
// whole URL, or the piece of a password that is not valid percent-encoding.
func parseError(raw, addrs string, err error) error {
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		return badURL(raw)
	}
	return fmt.Errorf("%w %q: %w", ErrURL, addrs, redact.Error(err))
}

// badURL says raw does not parse as a URL, quoting it redacted.
func badURL(raw string) error {
	return fmt.Errorf("%w %q: not a valid URL (%s)", ErrURL, redact.URL(raw), redact.EncodingHint)
}

// Open returns a client for raw without connecting: a *redis.Client for one server, a
// *redis.ClusterClient for a cluster. t applies where the URL does not set a value.
func Open(raw string, t Timeouts, opts ...Option) (redis.UniversalClient, error) {
	single, cluster, err := parse(raw)
	if err != nil {
		return nil, err
	}
	var o openOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.tls.Set() {
		var cfg *tls.Config
		if single != nil {
			cfg = single.TLSConfig
		} else {
			cfg = cluster.TLSConfig
		}
		if cfg == nil {
			return nil, fmt.Errorf("%w: TLS files given for %s, which is not a rediss:// URL", ErrURL, Addrs(raw))
		}
		if err := o.tls.apply(cfg); err != nil {
			return nil, err
		}
	}
	or := func(v, d time.Duration) time.Duration {
		if v == 0 {
			return d
		}
		return v
	}
	// Maintenance notifications serve hitless upgrades of managed Redis offerings; an
	// open-source server refuses the handshake's CLIENT MAINT_NOTIFICATIONS, so go-redis's
	// default (auto) only adds a command to every new connection and a timeout-relaxing code
	// path to every read. Off.
	maint := &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	if single != nil {
		single.MaintNotificationsConfig = maint
		single.DialTimeout = or(single.DialTimeout, t.Dial)
		single.ReadTimeout = or(single.ReadTimeout, t.Read)
		single.WriteTimeout = or(single.WriteTimeout, t.Write)
		if single.MaxRetries == 0 {
			single.MaxRetries = t.Retries
		}
		return redis.NewClient(single), nil
	}
	cluster.MaintNotificationsConfig = maint
	cluster.DialTimeout = or(cluster.DialTimeout, t.Dial)
	cluster.ReadTimeout = or(cluster.ReadTimeout, t.Read)
	cluster.WriteTimeout = or(cluster.WriteTimeout, t.Write)
	if cluster.MaxRetries == 0 {
		cluster.MaxRetries = t.Retries
	}
	if cluster.ClusterStateReloadInterval == 0 {
		cluster.ClusterStateReloadInterval = clusterReload
	}
	if cluster.TLSConfig != nil {
		cluster.NewClient = perNodeServerName
	}
	cc := redis.NewClusterClient(cluster)
	cc.AddHook(reloadOnNetErr{cc})
	return cc, nil
}

// perNodeServerName makes the client of one cluster node verify that node's certificate
// against the node's own host name (or address), as the slot map names it. go-redis gives
// every node the TLS configuration made from the URL, whose ServerName is the first seed's:
// a cluster whose nodes have certificates of their own would fail verification on every
// other node.
func perNodeServerName(opt *redis.Options) *redis.Client {
	if opt.TLSConfig != nil {
		if host, _, err := net.SplitHostPort(opt.Addr); err == nil && host != "" {
			cfg := opt.TLSConfig.Clone()
			cfg.ServerName = host
			opt.TLSConfig = cfg
		}
	}
	return redis.NewClient(opt)
}

// clusterReload is how old the cluster client's slot map may be before a command reloads
// it (CLUSTER SLOTS, in the background). go-redis's default, 60 s, would send the commands
// of a failed-over master's slots to the dead node for up to a minute; a MOVED from a
// promoted replica reloads at once, but a dead node answers nothing.
const clusterReload = 2 * time.Second

// reloadOnNetErr reloads the cluster client's slot map when a command or pipeline fails on
// the network, so that the promoted replica of a crashed master is found as soon as the
// cluster has failed it over, not at the next periodic reload.
type reloadOnNetErr struct{ c *redis.ClusterClient }

func (h reloadOnNetErr) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h reloadOnNetErr) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.check(ctx, err)
		return err
	}
}

func (h reloadOnNetErr) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.check(ctx, err)
		return err
	}
}

func (h reloadOnNetErr) check(ctx context.Context, err error) {
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, io.EOF) {
		h.c.ReloadState(ctx)
	}
}
