package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

const (
	// DefaultClusterNodes is the cluster size when ClusterOptions.Nodes is zero.
	DefaultClusterNodes = 3
	// DefaultClusterName is the cluster name when ClusterOptions.Name is empty.
	DefaultClusterName = "anarchon-cluster"
	// DefaultClusterReadyTimeout bounds StartCluster and RestartNode when
	// ClusterOptions.ReadyTimeout is zero.
	DefaultClusterReadyTimeout = 30 * time.Second

	// portAttempts is how many times StartCluster picks new ports when one
	// it picked was taken by someone else before the server bound it.
	portAttempts = 3
)

// ClusterOptions configures a cluster of embedded servers on one machine.
type ClusterOptions struct {
	// Nodes is the number of servers. Defaults to DefaultClusterNodes; must
	// be at least 2 (use Start for one server). Three or more survive the
	// loss of a node.
	Nodes int

	// BaseDir holds one JetStream store directory per node, named after the
	// node. Empty means a temporary directory that Shutdown removes.
	BaseDir string

	// Logger receives every node's nats-server log, with a "node" attribute.
	// Nil means silent.
	Logger *slog.Logger

	// ReadyTimeout bounds StartCluster and each RestartNode, in addition to
	// their contexts. Defaults to DefaultClusterReadyTimeout.
	ReadyTimeout time.Duration

	// Name is the cluster name; nodes are named Name-0, Name-1, ...
	// Defaults to DefaultClusterName.
	Name string
}

func (o ClusterOptions) validate() (ClusterOptions, error) {
	if o.Nodes == 0 {
		o.Nodes = DefaultClusterNodes
	}
	if o.Nodes < 2 {
		return o, fmt.Errorf("%w: Nodes must be at least 2, got %d", ErrInvalidOption, o.Nodes)
	}
	if o.ReadyTimeout < 0 {
		return o, fmt.Errorf("%w: ReadyTimeout must not be negative, got %s", ErrInvalidOption, o.ReadyTimeout)
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = DefaultClusterReadyTimeout
	}
	if o.Name == "" {
		o.Name = DefaultClusterName
	}
	if strings.ContainsAny(o.Name, " \t\r\n") {
		return o, fmt.Errorf("%w: Name must not contain whitespace, got %q", ErrInvalidOption, o.Name)
	}
	return o, nil
}

// Cluster is a set of embedded servers on 127.0.0.1 routed to each other,
// with clustered JetStream. Each node keeps its client and cluster ports
// for the cluster's lifetime, so a restarted node is reachable at the same
// URLs. Its methods are safe for concurrent use.
type Cluster struct {
	opts     ClusterOptions
	baseDir  string
	tempBase bool

	clientPorts  []int
	clusterPorts []int

	mu    sync.Mutex
	nodes []*Server // nil while a node is stopped
	down  bool
}

// StartCluster starts opts.Nodes servers on 127.0.0.1 with free client and
// cluster ports, each with its own store under BaseDir, and returns once
// every node is up, a JetStream meta leader is elected that sees all nodes,
// and every node is current with it.
func StartCluster(ctx context.Context, opts ClusterOptions) (*Cluster, error) {
	opts, err := opts.validate()
	if err != nil {
		return nil, err
	}
	c := &Cluster{opts: opts}
	if c.baseDir, c.tempBase, err = makeDir(opts.BaseDir, "anarchon-cluster-", "BaseDir"); err != nil {
		return nil, err
	}

	ctx, cancel := context.WithTimeout(ctx, opts.ReadyTimeout)
	defer cancel()

	for attempt := 1; ; attempt++ {
		err = c.startAll(ctx)
		if err == nil {
			return c, nil
		}
		c.stopAll()
		if attempt == portAttempts || !errors.Is(err, syscall.EADDRINUSE) || ctx.Err() != nil {
			break
		}
	}
	if c.tempBase {
		_ = os.RemoveAll(c.baseDir)
	}
	return nil, err
}

// startAll picks ports and starts every node, then waits for the cluster.
func (c *Cluster) startAll(ctx context.Context) error {
	ports, err := freePorts(2 * c.opts.Nodes)
	if err != nil {
		return err
	}
	c.clientPorts, c.clusterPorts = ports[:c.opts.Nodes], ports[c.opts.Nodes:]
	c.nodes = make([]*Server, c.opts.Nodes)
	for i := range c.nodes {
		s, err := c.startNode(ctx, i)
		if err != nil {
			return fmt.Errorf("embedded: start node %d: %w", i, err)
		}
		c.nodes[i] = s
	}
	return waitFor(ctx, c.opts.ReadyTimeout, nil, c.clusterReady)
}

// startNode starts node i on its ports and store; it returns once the node
// listens and has JetStream enabled, not once the cluster is healthy.
func (c *Cluster) startNode(ctx context.Context, i int) (*Server, error) {
	name := c.nodeName(i)
	var log *slog.Logger
	if c.opts.Logger != nil {
		log = c.opts.Logger.With("node", name)
	}
	opts := Options{
		StoreDir:     filepath.Join(c.baseDir, name),
		ServerName:   name,
		Logger:       log,
		ReadyTimeout: c.opts.ReadyTimeout,
	}
	la := &listenAddr{host: "127.0.0.1", port: c.clientPorts[i]}
	routes := make([]*url.URL, 0, len(c.clusterPorts)-1)
	for j, p := range c.clusterPorts {
		if j != i {
			routes = append(routes, &url.URL{Scheme: "nats", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(p))})
		}
	}
	tune := func(so *server.Options) {
		so.Cluster.Name = c.opts.Name
		so.Cluster.Host = "127.0.0.1"
		so.Cluster.Port = c.clusterPorts[i]
		so.Routes = routes
	}
	return start(ctx, opts, la, tune, false)
}

func (c *Cluster) nodeName(i int) string { return c.opts.Name + "-" + strconv.Itoa(i) }

// clusterReady reports why the running nodes are not yet a ready cluster:
// every running node healthy (meta leader known, current with it, its
// streams and consumers current) and the meta leader seeing them all.
func (c *Cluster) clusterReady() error {
	c.mu.Lock()
	nodes := append([]*Server(nil), c.nodes...)
	c.mu.Unlock()
	running := 0
	var leader *Server
	for i, s := range nodes {
		if s == nil {
			continue
		}
		running++
		if h := s.ns.Healthz(nil); h.StatusCode != 200 {
			return fmt.Errorf("node %d: %s", i, h.Error)
		}
		if s.ns.JetStreamIsLeader() {
			leader = s
		}
	}
	if leader == nil {
		return errors.New("no JetStream meta leader")
	}
	if n := len(leader.ns.JetStreamClusterPeers()); n < running {
		return fmt.Errorf("meta leader sees %d of %d running nodes", n, running)
	}
	return nil
}

// freePorts returns n distinct free TCP ports on 127.0.0.1. They are free
// when returned, not reserved: StartCluster retries if one gets taken.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("embedded: pick a free port: %w", err)
		}
		// Keep them open until all are picked so they differ.
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Nodes returns the cluster's servers by index. A stopped node's entry is
// nil; after RestartNode the entry is the new Server.
func (c *Cluster) Nodes() []*Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Server(nil), c.nodes...)
}

// ClientURLs returns every node's client URL, stopped nodes included (they
// come back on the same port). strings.Join(urls, ",") is a valid
// nats.Connect URL.
func (c *Cluster) ClientURLs() []string {
	urls := make([]string, len(c.clientPorts))
	for i, p := range c.clientPorts {
		urls[i] = (&url.URL{Scheme: "nats", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(p))}).String()
	}
	return urls
}

// Connect opens a TCP client connection that knows all nodes' URLs.
func (c *Cluster) Connect(opts ...nats.Option) (*nats.Conn, error) {
	nc, err := nats.Connect(strings.Join(c.ClientURLs(), ","), opts...)
	if err != nil {
		return nil, fmt.Errorf("embedded: connect to cluster: %w", err)
	}
	return nc, nil
}

func (c *Cluster) checkIndex(i int) error {
	if i < 0 || i >= len(c.clientPorts) {
		return fmt.Errorf("embedded: node index %d out of range [0,%d)", i, len(c.clientPorts))
	}
	return nil
}

// StopNode shuts node i down, keeping its store for RestartNode. Stopping a
// stopped node does nothing.
func (c *Cluster) StopNode(i int) error {
	if err := c.checkIndex(i); err != nil {
		return err
	}
	c.mu.Lock()
	s := c.nodes[i]
	c.nodes[i] = nil
	c.mu.Unlock()
	if s != nil {
		s.Shutdown()
	}
	return nil
}

// RestartNode starts node i again (stopping it first if it runs) on its
// store and its client and cluster ports, and waits until it is healthy:
// current with the meta leader and with the streams it replicates.
func (c *Cluster) RestartNode(ctx context.Context, i int) error {
	if err := c.StopNode(i); err != nil {
		return err
	}
	c.mu.Lock()
	if c.down {
		c.mu.Unlock()
		return errors.New("embedded: cluster is shut down")
	}
	c.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, c.opts.ReadyTimeout)
	defer cancel()
	s, err := c.startNode(ctx, i)
	if err != nil {
		return fmt.Errorf("embedded: restart node %d: %w", i, err)
	}
	c.mu.Lock()
	if c.down || c.nodes[i] != nil {
		// Shut down, or restarted concurrently, while we were starting.
		c.mu.Unlock()
		s.Shutdown()
		return fmt.Errorf("embedded: restart node %d: cluster changed during restart", i)
	}
	c.nodes[i] = s
	c.mu.Unlock()

	err = waitFor(ctx, c.opts.ReadyTimeout, nil, func() error {
		if h := s.ns.Healthz(nil); h.StatusCode != 200 {
			return errors.New(h.Error)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("embedded: restart node %d: %w", i, err)
	}
	return nil
}

// Leader returns the index of the node leading the JetStream meta group.
func (c *Cluster) Leader() (int, error) {
	for i, s := range c.Nodes() {
		if s != nil && s.ns.JetStreamIsLeader() {
			return i, nil
		}
	}
	return -1, fmt.Errorf("%w: JetStream meta group", ErrNoLeader)
}

// StreamLeader returns the index of the node leading the given stream's
// replica group. An empty account means the default account ($G).
func (c *Cluster) StreamLeader(account, stream string) (int, error) {
	if account == "" {
		account = server.DEFAULT_GLOBAL_ACCOUNT
	}
	for i, s := range c.Nodes() {
		if s != nil && s.ns.JetStreamIsStreamLeader(account, stream) {
			return i, nil
		}
	}
	return -1, fmt.Errorf("%w: stream %q in account %q", ErrNoLeader, stream, account)
}

// Shutdown stops every node and removes BaseDir if StartCluster created it
// as a temporary one. It is safe to call more than once.
func (c *Cluster) Shutdown() {
	c.mu.Lock()
	if c.down {
		c.mu.Unlock()
		return
	}
	c.down = true
	c.mu.Unlock()
	c.stopAll()
	if c.tempBase {
		_ = os.RemoveAll(c.baseDir)
	}
}

// stopAll shuts the running nodes down in parallel.
func (c *Cluster) stopAll() {
	c.mu.Lock()
	nodes := c.nodes
	c.nodes = make([]*Server, len(nodes))
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range nodes {
		if s != nil {
			wg.Go(s.Shutdown)
		}
	}
	wg.Wait()
}
