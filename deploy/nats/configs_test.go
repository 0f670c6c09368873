package nats

import (
	"path/filepath"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// TestConfigsLoad parses every server configuration and checks the users
// each role needs are there.
func TestConfigsLoad(t *testing.T) {
	files, _ := filepath.Glob("*.conf")
	cluster, _ := filepath.Glob("cluster/*.conf")
	files = append(files, cluster...)
	if len(files) != 5 {
		t.Fatalf("found %v", files)
	}
	for _, f := range files {
		opts, err := server.ProcessConfigFile(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if !opts.JetStream {
			t.Errorf("%s: JetStream is off", f)
		}
		if f == "dev.conf" {
			continue
		}
		users := map[string]*server.User{}
		for _, u := range opts.Users {
			users[u.Username] = u
		}
		for _, name := range []string{"client", "operator", "coordinator", "indexer", "worker_demo"} {
			if u := users[name]; u == nil || u.Permissions == nil {
				t.Errorf("%s: user %s missing or without permissions", f, name)
			}
		}
		if filepath.Dir(f) == "cluster" && (opts.Cluster.Name != "toolbus" || len(opts.Routes) != 3) {
			t.Errorf("%s: cluster %q with %d routes", f, opts.Cluster.Name, len(opts.Routes))
		}
	}
}
