package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
)

// node is one nats-server process of the cluster, with its configuration
// and store kept in the test's temporary directory so that it restarts on
// the same data after a SIGKILL.
type node struct {
	name                        string
	clientPort, routePort, http int
	conf                        string
	proc                        *testenv.Process
}

func (n *node) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.clientPort) }

// cluster is three nodes that route to one another.
type cluster struct {
	bin   string
	nodes []*node
}

func startCluster(t *testing.T, size int) *cluster {
	t.Helper()
	c := &cluster{bin: testenv.NATSServerBinary(t)}
	ports := testenv.FreePorts(t, 3*size)
	for i := range size {
		c.nodes = append(c.nodes, &node{name: fmt.Sprintf("n%d", i+1), clientPort: ports[3*i], routePort: ports[3*i+1], http: ports[3*i+2]})
	}
	var routes []string
	for _, n := range c.nodes {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", n.routePort))
	}
	dir := t.TempDir()
	for _, n := range c.nodes {
		store := filepath.Join(dir, n.name)
		n.conf = filepath.Join(dir, n.name+".conf")
		conf := fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
http: 127.0.0.1:%d
jetstream {
  store_dir: %q
}
cluster {
  name: toolbus-test
  listen: 127.0.0.1:%d
  routes: [
    %s
  ]
}
`, n.name, n.clientPort, n.http, store, n.routePort, strings.Join(routes, "\n    "))
		if err := os.WriteFile(n.conf, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		c.start(t, n)
	}
	return c
}

// startDeployedCluster starts the three nodes of deploy/nats/cluster as
// shipped, with their accounts and users (deploy/nats/users.inc): only
// their ports and store directories are rewritten, so that the test runs
// beside others on one host.
func startDeployedCluster(t *testing.T) *cluster {
	t.Helper()
	deploy := deployDir(t)
	c := &cluster{bin: testenv.NATSServerBinary(t)}
	free := testenv.FreePorts(t, 9)
	for i := range 3 {
		c.nodes = append(c.nodes, &node{name: fmt.Sprintf("toolbus-n%d", i+1), clientPort: free[3*i], routePort: free[3*i+1], http: free[3*i+2]})
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "cluster"), 0o700); err != nil {
		t.Fatal(err)
	}
	inc, err := os.ReadFile(filepath.Join(deploy, "users.inc"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "users.inc"), inc, 0o600); err != nil {
		t.Fatal(err)
	}
	// The shipped nodes listen on 4222-4224, 8222-8224 and 6222-6224.
	ports := map[string]string{}
	for i, n := range c.nodes {
		ports[fmt.Sprintf("127.0.0.1:%d", 4222+i)] = fmt.Sprintf("127.0.0.1:%d", n.clientPort)
		ports[fmt.Sprintf("127.0.0.1:%d", 8222+i)] = fmt.Sprintf("127.0.0.1:%d", n.http)
		ports[fmt.Sprintf("127.0.0.1:%d", 6222+i)] = fmt.Sprintf("127.0.0.1:%d", n.routePort)
	}
	for i, n := range c.nodes {
		text, err := os.ReadFile(filepath.Join(deploy, "cluster", fmt.Sprintf("n%d.conf", i+1)))
		if err != nil {
			t.Fatal(err)
		}
		conf := string(text)
		for from, to := range ports {
			conf = strings.ReplaceAll(conf, from, to)
		}
		shipped := fmt.Sprintf("/var/lib/nats/toolbus-n%d", i+1)
		if !strings.Contains(conf, shipped) {
			t.Fatalf("deploy/nats/cluster/n%d.conf does not keep its store in %s", i+1, shipped)
		}
		conf = strings.ReplaceAll(conf, shipped, filepath.Join(dir, n.name))
		n.conf = filepath.Join(dir, "cluster", fmt.Sprintf("n%d.conf", i+1))
		if err := os.WriteFile(n.conf, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range c.nodes {
		c.start(t, n)
	}
	return c
}

// deployDir is the repository's deploy/nats directory.
func deployDir(t *testing.T) string {
	t.Helper()
	root, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(filepath.Dir(strings.TrimSpace(string(root))), "deploy", "nats")
}

func (c *cluster) start(t *testing.T, n *node) {
	t.Helper()
	n.proc = testenv.Start(t, c.bin, "-c", n.conf)
}

// urls is every node's client URL, for connections that fail over.
func (c *cluster) urls() string {
	var urls []string
	for _, n := range c.nodes {
		urls = append(urls, n.url())
	}
	return strings.Join(urls, ",")
}

func (c *cluster) node(t *testing.T, name string) *node {
	t.Helper()
	for _, n := range c.nodes {
		if n.name == name {
			return n
		}
	}
	t.Fatalf("no node named %q", name)
	return nil
}

// kill ends the node's process with SIGKILL and waits until it is gone.
func (c *cluster) kill(t *testing.T, n *node) {
	t.Helper()
	n.proc.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Patience)
	defer cancel()
	if err := n.proc.Wait(ctx); errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("node %s still runs %v after SIGKILL", n.name, testenv.Patience)
	}
}

// jsz is the part of a node's /jsz monitoring page the test reads.
type jsz struct {
	Meta *struct {
		Leader   string `json:"leader"`
		Size     int    `json:"cluster_size"`
		Replicas []struct {
			Name    string `json:"name"`
			Current bool   `json:"current"`
			Offline bool   `json:"offline"`
		} `json:"replicas"`
	} `json:"meta_cluster"`
}

// httpClient's requests are bounded by their contexts (pollAttempt).
var httpClient = &http.Client{}

func (n *node) jsz(ctx context.Context) (*jsz, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/jsz", n.http), nil)
	if err != nil {
		return nil, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out jsz
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("node %s /jsz: %w", n.name, err)
	}
	return &out, nil
}

// healthy says whether the node's /healthz answers ok: the server runs,
// its JetStream is enabled and current with the meta leader, and every
// stream and consumer it holds a replica of is current.
func (n *node) healthy(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/healthz", n.http), nil)
	if err != nil {
		return err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return fmt.Errorf("node %s: %w", n.name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var body struct {
			Error string `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return fmt.Errorf("node %s unhealthy (%d): %s", n.name, resp.StatusCode, body.Error)
	}
	return nil
}

// metaLeader returns the meta leader's name as the live nodes agree on it.
func (c *cluster) metaLeader(ctx context.Context) (string, error) {
	leader := ""
	for _, n := range c.nodes {
		if n.proc == nil {
			continue
		}
		info, err := n.jsz(ctx)
		if err != nil {
			continue // a killed node
		}
		if info.Meta == nil || info.Meta.Leader == "" {
			return "", fmt.Errorf("node %s knows no meta leader", n.name)
		}
		if leader != "" && leader != info.Meta.Leader {
			return "", fmt.Errorf("nodes disagree on the meta leader: %s, %s", leader, info.Meta.Leader)
		}
		leader = info.Meta.Leader
	}
	if leader == "" {
		return "", errors.New("no node answered")
	}
	return leader, nil
}

// whole reports why the cluster is not whole, or nil when every node is
// healthy, agrees on a meta leader, and every replicated stream and
// consumer named has a leader and two current followers.
func (c *cluster) whole(ctx context.Context, js jetstream.JetStream, streams []string, consumers [][2]string) error {
	for _, n := range c.nodes {
		if err := n.healthy(ctx); err != nil {
			return err
		}
	}
	if _, err := c.metaLeader(ctx); err != nil {
		return err
	}
	check := func(what string, ci *jetstream.ClusterInfo) error {
		if ci == nil || ci.Leader == "" {
			return fmt.Errorf("%s has no leader", what)
		}
		if len(ci.Replicas) != len(c.nodes)-1 {
			return fmt.Errorf("%s has %d followers", what, len(ci.Replicas))
		}
		for _, r := range ci.Replicas {
			if !r.Current || r.Offline {
				return fmt.Errorf("%s: follower %s not current", what, r.Name)
			}
		}
		return nil
	}
	for _, name := range streams {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return fmt.Errorf("stream %s: %w", name, err)
		}
		if err := check("stream "+name, s.CachedInfo().Cluster); err != nil {
			return err
		}
	}
	for _, sc := range consumers {
		cons, err := js.Consumer(ctx, sc[0], sc[1])
		if err != nil {
			return fmt.Errorf("consumer %s: %w", sc[1], err)
		}
		if err := check("consumer "+sc[1], cons.CachedInfo().Cluster); err != nil {
			return err
		}
	}
	return nil
}

// poll calls cond until it returns nil, for cluster state that sends no
// signal. It fails the test with cond's last error after timeout.
func poll(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) error) time.Duration {
	t.Helper()
	d, err := pollFor(timeout, cond)
	if err != nil {
		t.Fatalf("%s: not within %s: %v", what, timeout, err)
	}
	return d
}

// pollAttempt bounds one call of a poll's cond: a node's answer can take
// seconds on a busy machine, and a bound shorter than that would fail
// every attempt.
const pollAttempt = 20 * time.Second

// pollFor calls cond every 100ms until it returns nil or timeout passes,
// and returns how long that took, or cond's last error.
func pollFor(timeout time.Duration, cond func(ctx context.Context) error) (time.Duration, error) {
	return pollWithin(timeout, pollAttempt, cond)
}

// electionAttempt bounds one look for a new leader: a JetStream request
// to a stream or consumer that has none is answered at its deadline, so
// the attempt's bound is the resolution of the measured election.
const electionAttempt = 2 * time.Second

// pollWithin is pollFor with each call of cond bounded by attempt.
func pollWithin(timeout, attempt time.Duration, cond func(ctx context.Context) error) (time.Duration, error) {
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), attempt)
		err := cond(ctx)
		cancel()
		if err == nil {
			return time.Since(start), nil
		}
		if time.Now().After(deadline) {
			return time.Since(start), err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
