package helm

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// The official NATS chart, as its repository holds it (testdata/README.md).
const natsChartDir = "testdata/nats"

// TestNATSChartTakesTheInstallation makes an installation with toolbus
// setup, writes the NATS chart's values with the commands of
// docs/operations.md ("Kubernetes"), renders the official NATS chart with
// them as helm install nats nats/nats would, and holds the servers'
// configuration to the installation: its operator, its system account, every
// account's JWT preloaded in a full resolver, JetStream on three clustered
// nodes, the control line a service user's JWT needs; and the Service the
// Toolbus chart's default nats.url names.
func TestNATSChartTakesTheInstallation(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/toolbus")
	}
	dir := filepath.Join(t.TempDir(), "installation")
	setup := exec.Command("go", "run", "./cmd/toolbus", "setup", "--dir", dir, "--listen", "127.0.0.1:4222", "--namespace", "demo")
	setup.Dir = "../.."
	if out, err := setup.CombinedOutput(); err != nil {
		t.Fatalf("toolbus setup: %v\n%s", err, out)
	}

	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	snippet := regexp.MustCompile("(?s)```sh\n(\\{\n.*?\n\\} > nats-values.yaml)\n").FindSubmatch(doc)
	if snippet == nil {
		t.Fatal(`operations.md's "Kubernetes" has no commands writing nats-values.yaml`)
	}
	work := t.TempDir()
	sh := exec.Command("bash", "-euo", "pipefail", "-c", string(snippet[1]))
	sh.Dir = work
	sh.Env = append(os.Environ(), "DIR="+dir)
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("the commands of operations.md: %v\n%s\n%s", err, out, snippet[1])
	}
	raw, err := os.ReadFile(filepath.Join(work, "nats-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]any{}
	if err := yaml.UnmarshalStrict(raw, &values); err != nil {
		t.Fatalf("nats-values.yaml: %v\n%s", err, raw)
	}

	c, err := loader.Load(natsChartDir)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := chartutil.ToRenderValues(c, values, chartutil.ReleaseOptions{Name: "nats", Namespace: "toolbus", Revision: 1, IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Render(c, vals)
	if err != nil {
		t.Fatalf("the NATS chart with nats-values.yaml: %v", err)
	}
	var conf string
	var sts *appsv1.StatefulSet
	var client *corev1.Service
	for name, text := range files {
		for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(text, -1) {
			if strings.TrimSpace(d) == "" || strings.HasSuffix(name, "NOTES.txt") {
				continue
			}
			var kind struct{ Kind string }
			if err := yaml.Unmarshal([]byte(d), &kind); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			switch kind.Kind {
			case "ConfigMap":
				var cm corev1.ConfigMap
				if err := yaml.UnmarshalStrict([]byte(d), &cm); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				conf = cm.Data["nats.conf"]
			case "StatefulSet":
				sts = &appsv1.StatefulSet{}
				if err := yaml.UnmarshalStrict([]byte(d), sts); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
			case "Service":
				var s corev1.Service
				if err := yaml.UnmarshalStrict([]byte(d), &s); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if s.Spec.ClusterIP != corev1.ClusterIPNone {
					client = &s
				}
			}
		}
	}
	if conf == "" || sts == nil || client == nil {
		t.Fatalf("the NATS chart rendered no nats.conf, StatefulSet or client Service: %v", keys(files))
	}
	if *sts.Spec.Replicas != 3 {
		t.Errorf("the NATS StatefulSet has %d replicas, want 3", *sts.Spec.Replicas)
	}
	// The Toolbus chart's default nats.url, nats://nats:4222.
	if client.Name != "nats" || !servesPort(client, 4222) {
		t.Errorf("the NATS chart's client Service is %s %+v, the Toolbus chart's default nats.url nats://nats:4222", client.Name, client.Spec.Ports)
	}

	server := decodeNATSConf(t, conf)
	operator, err := os.ReadFile(filepath.Join(dir, "jwt", "operator.jwt"))
	if err != nil {
		t.Fatal(err)
	}
	if server["operator"] != strings.TrimSpace(string(operator)) {
		t.Errorf("operator %v, want the installation's JWT", server["operator"])
	}
	var installation struct {
		Accounts map[string]string `json:"accounts"`
	}
	state, err := os.ReadFile(filepath.Join(dir, "installation.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(state, &installation); err != nil {
		t.Fatal(err)
	}
	if sys := installation.Accounts["SYS"]; sys == "" || server["system_account"] != sys {
		t.Errorf("system_account %v, the installation's is %q", server["system_account"], sys)
	}
	preload, _ := server["resolver_preload"].(map[string]any)
	jwts, err := filepath.Glob(filepath.Join(dir, "jwt", "A*.jwt"))
	if err != nil {
		t.Fatal(err)
	}
	accounts, err := os.ReadFile(filepath.Join(dir, "nats", "accounts.conf"))
	if err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`(?m)^  (A[A-Z0-9]+): "([^"]+)"$`).FindAllStringSubmatch(string(accounts), -1)
	if len(want) < 6 || len(preload) != len(want) {
		t.Errorf("resolver_preload holds %d accounts, accounts.conf %d (jwt/ %d)", len(preload), len(want), len(jwts))
	}
	for _, a := range want {
		if preload[a[1]] != a[2] {
			t.Errorf("resolver_preload lacks account %s's JWT", a[1])
		}
	}
	for _, a := range []string{"TOOLBUS", "AGENTS", "SYS"} {
		if _, ok := preload[installation.Accounts[a]]; !ok {
			t.Errorf("resolver_preload lacks account %s (%s)", a, installation.Accounts[a])
		}
	}
	resolver, _ := server["resolver"].(map[string]any)
	if resolver["type"] != "full" || resolver["dir"] == nil {
		t.Errorf("resolver %v, want a full resolver with its directory", resolver)
	}
	if js, _ := server["jetstream"].(map[string]any); js["store_dir"] == nil {
		t.Errorf("jetstream %v, want a file store", server["jetstream"])
	}
	if cluster, _ := server["cluster"].(map[string]any); cluster == nil || len(cluster["routes"].([]any)) != 3 {
		t.Errorf("cluster %v, want routes to three nodes", server["cluster"])
	}
	if n, _ := server["max_control_line"].(float64); n < 64<<10 {
		t.Errorf("max_control_line %v, want 64 KiB for a service user's JWT", server["max_control_line"])
	}
}

// decodeNATSConf reads the configuration the NATS chart writes, JSON but
// for values it leaves raw (<< $SERVER_NAME >>, << 10Gi >>, include lines).
func decodeNATSConf(t *testing.T, conf string) map[string]any {
	t.Helper()
	raw := regexp.MustCompile(`(?m)^(\s*"[^"]+": )([^"\[{\s][^,\n]*?)(,?)$`)
	quoted := raw.ReplaceAllStringFunc(conf, func(line string) string {
		m := raw.FindStringSubmatch(line)
		if m[2] == "true" || m[2] == "false" || m[2] == "null" || regexp.MustCompile(`^-?[0-9.]+$`).MatchString(m[2]) {
			return line
		}
		b, _ := json.Marshal(m[2])
		return m[1] + string(b) + m[3]
	})
	quoted = regexp.MustCompile(`(?m)^\s*include .*;$`).ReplaceAllString(quoted, "")
	server := map[string]any{}
	if err := json.Unmarshal([]byte(quoted), &server); err != nil {
		t.Fatalf("nats.conf: %v\n%s", err, conf)
	}
	return server
}

func servesPort(s *corev1.Service, port int32) bool {
	for _, p := range s.Spec.Ports {
		if p.Port == port {
			return true
		}
	}
	return false
}
