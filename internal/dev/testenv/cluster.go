package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Cluster starts size nats-server processes that form one JetStream
// cluster, each with its configuration and store in a temporary
// directory, waits until it is ready (clusterNodes.ready), and returns
// the nodes' client URLs, comma-separated. The processes are killed when
// the test ends.
//
// The nodes are processes, not servers embedded in the test, because
// nats-server has data races of its own between its cluster's goroutines
// (batchStagedDiff.commit against applyStreamMsgOp in 2.15.3) that fail a
// test run with -race; NATSServerBinary builds it without.
func Cluster(t testing.TB, size int) string {
	t.Helper()
	bin := NATSServerBinary(t)
	// A port free a moment ago may be taken by another test's server
	// before the node listens on it: the cluster is then started again on
	// new ports.
	for try := 1; ; try++ {
		nodes := startClusterNodes(t, bin, size)
		err := nodes.await(t)
		if err == nil {
			return nodes.urls()
		}
		nodes.kill()
		if !errors.Is(err, errPortTaken) || try == 5 {
			t.Fatalf("start a cluster of %d nodes (try %d): %v", size, try, err)
		}
	}
}

// errPortTaken is a node's exit because another process listens on one
// of its ports.
var errPortTaken = errors.New("port taken")

// clusterNode is one nats-server process of a Cluster.
type clusterNode struct {
	name                   string
	client, route, monitor int
	proc                   *Process
}

type clusterNodes []*clusterNode

// startClusterNodes writes each node's configuration and starts it.
func startClusterNodes(t testing.TB, bin string, size int) clusterNodes {
	t.Helper()
	ports := FreePorts(t, 3*size)
	var (
		nodes  clusterNodes
		routes []string
	)
	for i := range size {
		n := &clusterNode{name: fmt.Sprintf("n%d", i+1), client: ports[3*i], route: ports[3*i+1], monitor: ports[3*i+2]}
		nodes = append(nodes, n)
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", n.route))
	}
	// The directory's removal, registered by its first creation in the
	// test, runs after the processes' kill, which Start registers later:
	// no node still writes to its store when it goes.
	dir := t.TempDir()
	for _, n := range nodes {
		conf := filepath.Join(dir, n.name+".conf")
		text := fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
http: 127.0.0.1:%d
jetstream {
  store_dir: %q
}
cluster {
  name: testenv
  listen: 127.0.0.1:%d
  routes: [%s]
}
`, n.name, n.client, n.monitor, filepath.Join(dir, n.name), n.route, strings.Join(routes, ", "))
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		n.proc = Start(t, bin, "-c", conf)
	}
	return nodes
}

func (ns clusterNodes) urls() string {
	var urls []string
	for _, n := range ns {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", n.client))
	}
	return strings.Join(urls, ",")
}

// kill ends every node's process and waits until it has.
func (ns clusterNodes) kill() {
	for _, n := range ns {
		n.proc.Kill()
		<-n.proc.done
	}
}

// await waits until the cluster is ready, polling the nodes' monitoring,
// since the server sends no signal on election. It returns errPortTaken
// when a node exited for a taken port, and fails the test when a node
// exited otherwise or the cluster is not ready within Patience.
func (ns clusterNodes) await(t testing.TB) error {
	t.Helper()
	deadline := time.Now().Add(Patience)
	for {
		for _, n := range ns {
			select {
			case <-n.proc.done:
				if strings.Contains(n.proc.Output(), "address already in use") {
					return fmt.Errorf("node %s: %w", n.name, errPortTaken)
				}
				t.Fatalf("cluster node %s exited before the cluster was ready:\n%s", n.name, clusterNodes{n}.lastLines(20))
			default:
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := ns.ready(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster of %d nodes was not ready within %v: %v\n%s", len(ns), Patience, err, ns.lastLines(10))
		}
		time.Sleep(100 * time.Millisecond) // the server sends no signal on election
	}
}

// ready reports why the cluster is not ready, or nil once every node is
// healthy (its JetStream current with the meta leader), they agree on a
// meta leader, and that leader counts every other node an online peer:
// until it does, it places no replicated stream on that node ("no
// suitable peers for placement").
func (ns clusterNodes) ready(ctx context.Context) error {
	for _, n := range ns {
		if err := n.healthy(ctx); err != nil {
			return err
		}
	}
	leader, leaderFound := "", false
	for _, n := range ns {
		meta, err := n.meta(ctx)
		if err != nil {
			return err
		}
		if leader != "" && meta.Leader != leader {
			return fmt.Errorf("nodes disagree on the meta leader: %s, %s", leader, meta.Leader)
		}
		leader = meta.Leader
		if meta.Leader != n.name {
			continue
		}
		leaderFound = true
		if meta.Size != len(ns) || len(meta.Replicas) != len(ns)-1 {
			return fmt.Errorf("the meta leader %s knows a cluster of %d with %d other peers, want %d", n.name, meta.Size, len(meta.Replicas), len(ns))
		}
		for _, r := range meta.Replicas {
			if r.Offline || strings.HasPrefix(r.Name, "Server name unknown") {
				return fmt.Errorf("the meta leader %s counts peer %q offline", n.name, r.Name)
			}
		}
	}
	if !leaderFound {
		return fmt.Errorf("the nodes name a meta leader %q that none of them is", leader)
	}
	return nil
}

// monitorClient keeps no connection open, so that no goroutine of it
// outlives the test.
var monitorClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// get decodes the JSON of the node's monitoring page path into v, and
// returns its status code.
func (n *clusterNode) get(ctx context.Context, path string, v any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", n.monitor, path), nil)
	if err != nil {
		return 0, err
	}
	resp, err := monitorClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("node %s %s: %w", n.name, path, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return resp.StatusCode, fmt.Errorf("node %s %s: %w", n.name, path, err)
	}
	return resp.StatusCode, nil
}

// healthy reports why the node's /healthz is not ok: it runs, its
// JetStream is enabled and current with the meta leader.
func (n *clusterNode) healthy(ctx context.Context) error {
	var body struct {
		Error string `json:"error"`
	}
	code, err := n.get(ctx, "/healthz", &body)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("node %s unhealthy (%d): %s", n.name, code, body.Error)
	}
	return nil
}

// metaCluster is the part of /jsz's meta_cluster that ready reads.
type metaCluster struct {
	Leader   string `json:"leader"`
	Size     int    `json:"cluster_size"`
	Replicas []struct {
		Name    string `json:"name"`
		Offline bool   `json:"offline"`
	} `json:"replicas"`
}

func (n *clusterNode) meta(ctx context.Context) (*metaCluster, error) {
	var jsz struct {
		Meta *metaCluster `json:"meta_cluster"`
	}
	if _, err := n.get(ctx, "/jsz", &jsz); err != nil {
		return nil, err
	}
	if jsz.Meta == nil || jsz.Meta.Leader == "" {
		return nil, fmt.Errorf("node %s knows no meta leader", n.name)
	}
	return jsz.Meta, nil
}

// lastLines is the last lines of every node's output.
func (ns clusterNodes) lastLines(count int) string {
	var b strings.Builder
	for _, n := range ns {
		lines := strings.Split(n.proc.Output(), "\n")
		fmt.Fprintf(&b, "last lines of node %s:\n%s\n", n.name, strings.Join(lines[max(0, len(lines)-count):], "\n"))
	}
	return b.String()
}
