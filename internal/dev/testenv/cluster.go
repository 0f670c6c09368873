package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/wire/natsserver"
)

// Cluster starts size embedded servers that form one JetStream cluster,
// each with its store in a temporary directory, and waits until they have
// elected a meta leader. It returns the servers and a URL list that
// reaches any of them. They are stopped when the test ends.
func Cluster(t testing.TB, size int) ([]*natsserver.Server, string) {
	t.Helper()
	// A port free a moment ago may be taken by another test's server
	// before the node listens on it: the cluster is then started again on
	// new ports.
	for try := 1; ; try++ {
		servers, urls, err := startCluster(t, size)
		if err == nil {
			return servers, urls
		}
		if !strings.Contains(err.Error(), "address already in use") || try == 5 {
			t.Fatal(err)
		}
	}
}

func startCluster(t testing.TB, size int) ([]*natsserver.Server, string, error) {
	t.Helper()
	routePorts := FreePorts(t, size)
	var routes []string
	for i := range routePorts {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", routePorts[i]))
	}
	dir := t.TempDir()
	var (
		servers []*natsserver.Server
		urls    []string
	)
	for i, port := range routePorts {
		name := fmt.Sprintf("n%d", i+1)
		conf := filepath.Join(dir, name+".conf")
		text := fmt.Sprintf("cluster {\n  name: testenv\n  listen: 127.0.0.1:%d\n  routes: [%s]\n}\n", port, strings.Join(routes, ", "))
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		srv, err := natsserver.Start(natsserver.Config{DataDir: filepath.Join(dir, name), ConfigFile: conf, ServerName: name})
		if err != nil {
			for _, s := range servers {
				s.Stop()
			}
			return nil, "", fmt.Errorf("start cluster node %s: %w", name, err)
		}
		t.Cleanup(srv.Stop)
		servers = append(servers, srv)
		urls = append(urls, srv.URL())
	}
	deadline := time.Now().Add(Patience)
	for {
		// Ready once the meta leader has every node's JetStream stats: it
		// places no replicated stream on a node it has none of ("no
		// suitable peers for placement").
		leader := false
		current := true
		for _, s := range servers {
			if s.JetStreamIsLeader() {
				leader = len(s.JetStreamClusterPeers()) == size
			}
			current = current && s.JetStreamIsCurrent()
		}
		if leader && current {
			return servers, strings.Join(urls, ","), nil
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster elected no JetStream meta leader that knows all %d nodes within %v", size, Patience)
		}
		time.Sleep(50 * time.Millisecond) // the server sends no signal on election
	}
}
