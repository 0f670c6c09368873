// Package helm renders deploy/helm/toolbus as helm template does (Helm's
// own loader and engine) and decodes every object strictly into the
// Kubernetes API types. It is a module of its own, so that Helm's and
// Kubernetes' modules stay out of Toolbus's.
package helm

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

const chartDir = "../../deploy/helm/toolbus"

// rendered is what one helm template made.
type rendered struct {
	deployments map[string]*appsv1.Deployment
	services    map[string]*corev1.Service
	secrets     map[string]*corev1.Secret
	configMaps  map[string]*corev1.ConfigMap
	pdbs        map[string]*policyv1.PodDisruptionBudget
	ingresses   map[string]*networkingv1.Ingress
	podMonitors map[string]*podMonitor
	notes       string
}

// podMonitor is the part of the Prometheus operator's PodMonitor the chart
// writes; its CRD's Go types are a module of their own, which this check
// does without.
type podMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector            metav1.LabelSelector `json:"selector"`
		PodMetricsEndpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// render is helm template RELEASE deploy/helm/toolbus --namespace toolbus -f VALUES.
func render(t *testing.T, values map[string]any) (*rendered, error) {
	t.Helper()
	c := loadChart(t)
	vals, err := chartutil.ToRenderValues(c, values, chartutil.ReleaseOptions{Name: "tb", Namespace: "toolbus", Revision: 1, IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(c, vals)
	if err != nil {
		return nil, err
	}
	r := &rendered{
		deployments: map[string]*appsv1.Deployment{}, services: map[string]*corev1.Service{},
		secrets: map[string]*corev1.Secret{}, configMaps: map[string]*corev1.ConfigMap{},
		pdbs: map[string]*policyv1.PodDisruptionBudget{}, ingresses: map[string]*networkingv1.Ingress{},
		podMonitors: map[string]*podMonitor{},
	}
	var names []string
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if strings.HasSuffix(name, "NOTES.txt") {
			r.notes = files[name]
			continue
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(files[name], -1) {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			if err := r.decode([]byte(doc)); err != nil {
				t.Fatalf("%s, document %d: %v\n%s", name, i, err, doc)
			}
		}
	}
	return r, nil
}

// decode decodes one object strictly into its API type: a field the type
// does not have, or a key given twice, is an error.
func (r *rendered) decode(doc []byte) error {
	var meta metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &meta); err != nil {
		return err
	}
	into := func(obj any, name func() string, add func()) error {
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return err
		}
		if name() == "" {
			return fmt.Errorf("%s without a name", meta.Kind)
		}
		add()
		return nil
	}
	switch meta.APIVersion + " " + meta.Kind {
	case "apps/v1 Deployment":
		o := &appsv1.Deployment{}
		return into(o, o.GetName, func() { r.deployments[o.Name] = o })
	case "v1 Service":
		o := &corev1.Service{}
		return into(o, o.GetName, func() { r.services[o.Name] = o })
	case "v1 Secret":
		o := &corev1.Secret{}
		return into(o, o.GetName, func() { r.secrets[o.Name] = o })
	case "v1 ConfigMap":
		o := &corev1.ConfigMap{}
		return into(o, o.GetName, func() { r.configMaps[o.Name] = o })
	case "policy/v1 PodDisruptionBudget":
		o := &policyv1.PodDisruptionBudget{}
		return into(o, o.GetName, func() { r.pdbs[o.Name] = o })
	case "networking.k8s.io/v1 Ingress":
		o := &networkingv1.Ingress{}
		return into(o, o.GetName, func() { r.ingresses[o.Name] = o })
	case "monitoring.coreos.com/v1 PodMonitor":
		o := &podMonitor{}
		return into(o, o.GetName, func() { r.podMonitors[o.Name] = o })
	}
	return fmt.Errorf("unexpected object %s %s", meta.APIVersion, meta.Kind)
}

// valueSets are the chart's default values and every documented set of
// deploy/helm/values, with the files toolbus setup would give production's
// Secrets.
func valueSets(t *testing.T) map[string]map[string]any {
	t.Helper()
	sets := map[string]map[string]any{"default": {}}
	paths, err := filepath.Glob("../../deploy/helm/values/*.yaml")
	if err != nil || len(paths) < 2 {
		t.Fatalf("documented value sets: %v %v", paths, err)
	}
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		vals := map[string]any{}
		if err := yaml.UnmarshalStrict(data, &vals); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		sets[filepath.Base(path)] = vals
	}
	// What helm install --set-file credentials.files.X=DIR/... gives.
	if p := sets["production.yaml"]; p != nil {
		p["credentials"].(map[string]any)["files"] = map[string]any{
			"coordinator": "coordinator's credentials", "indexer": "indexer's credentials",
			"admin": "admin's credentials", "mcp": "mcp's credentials",
			"consoleTokens": "tokens: {}", "mcpTokens": "tokens: {}",
			"workers": map[string]any{"demo": "demo's credentials", "ops": "ops' credentials"},
		}
	}
	return sets
}

// TestChartRendersValidObjects renders the chart for each value set and
// holds every object to what docs/operations.md ("Kubernetes") says.
func TestChartRendersValidObjects(t *testing.T) {
	for name, vals := range valueSets(t) {
		t.Run(name, func(t *testing.T) {
			r, err := render(t, vals)
			if err != nil {
				t.Fatal(err)
			}
			merged, err := chartutil.CoalesceValues(loadChart(t), vals)
			if err != nil {
				t.Fatal(err)
			}
			checkRelease(t, r, merged)
		})
	}
}

func checkRelease(t *testing.T, r *rendered, v chartutil.Values) {
	metricsPort := int32(intValue(t, v, "metrics.port"))
	natsURL := stringValue(t, v, "nats.url")
	annotations := boolValue(t, v, "metrics.annotations")
	create := boolValue(t, v, "credentials.create")

	// The coordinator: at least two, and a PDB over exactly its pods.
	coord := r.deployments["tb-coordinator"]
	if coord == nil {
		t.Fatalf("no coordinator Deployment among %v", keys(r.deployments))
	}
	if n := *coord.Spec.Replicas; n < 2 || int(n) != intValue(t, v, "coordinator.replicas") {
		t.Errorf("coordinator replicas %d", n)
	}
	pdb := r.pdbs["tb-coordinator"]
	if pdb == nil || pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != intValue(t, v, "coordinator.pdb.minAvailable") {
		t.Fatalf("coordinator PDB: %+v", pdb)
	}
	if pdb.Spec.MinAvailable.IntValue() >= int(*coord.Spec.Replicas) {
		t.Errorf("the PDB's minAvailable %d leaves no coordinator to evict of %d", pdb.Spec.MinAvailable.IntValue(), *coord.Spec.Replicas)
	}
	for name, d := range r.deployments {
		sel := mustSelector(t, pdb.Spec.Selector)
		if matches := sel.Matches(labels.Set(d.Spec.Template.Labels)); matches != (name == "tb-coordinator") {
			t.Errorf("the coordinator's PDB selects %s: %v", name, matches)
		}
	}

	// A worker Deployment per namespace, its grace above its drain.
	workers := v["workers"].([]any)
	for _, w := range workers {
		ns := w.(map[string]any)["namespace"].(string)
		d := r.deployments["tb-worker-"+ns]
		if d == nil {
			t.Errorf("no worker Deployment for namespace %s among %v", ns, keys(r.deployments))
			continue
		}
		drain := flagValue(t, d.Spec.Template.Spec.Containers[0].Args, "--drain")
		seconds, err := strconv.Atoi(strings.TrimSuffix(drain, "s"))
		if err != nil {
			t.Fatalf("worker %s: --drain=%s", ns, drain)
		}
		if want, ok := w.(map[string]any)["drainSeconds"]; ok && fmt.Sprint(want) != strconv.Itoa(seconds) {
			t.Errorf("worker %s: --drain=%s, values say %v", ns, drain, want)
		}
		if grace := d.Spec.Template.Spec.TerminationGracePeriodSeconds; grace == nil || *grace <= int64(seconds) {
			t.Errorf("worker %s: terminationGracePeriodSeconds %s not above its drain %ds", ns, fmtInt(grace), seconds)
		}
		cm := r.configMaps["tb-worker-"+ns]
		if cm == nil {
			t.Fatalf("worker %s: no ConfigMap", ns)
		}
		var config struct {
			Namespaces []struct {
				Name    string           `json:"name"`
				Sources []map[string]any `json:"sources"`
			} `json:"namespaces"`
		}
		if err := yaml.UnmarshalStrict([]byte(cm.Data["worker.yaml"]), &config); err != nil || len(config.Namespaces) != 1 || config.Namespaces[0].Name != ns || len(config.Namespaces[0].Sources) == 0 {
			t.Errorf("worker %s's configuration: %v\n%s", ns, err, cm.Data["worker.yaml"])
		}
	}
	wantDeployments := 2 + len(workers)
	for _, front := range []string{"console", "mcp"} {
		if boolValue(t, v, front+".enabled") {
			wantDeployments++
		}
	}
	if len(r.deployments) != wantDeployments {
		t.Errorf("%d Deployments, want %d: %v", len(r.deployments), wantDeployments, keys(r.deployments))
	}

	for name, d := range r.deployments {
		spec := d.Spec.Template.Spec
		if !mustSelector(t, d.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("%s: its selector does not select its pods", name)
		}
		psc := spec.SecurityContext
		if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != 65532 {
			t.Errorf("%s: pod security context %+v, want non-root uid 65532", name, psc)
		}
		if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
			t.Errorf("%s mounts a service account token it does not use", name)
		}
		if len(spec.Containers) != 1 {
			t.Fatalf("%s: %d containers", name, len(spec.Containers))
		}
		c := spec.Containers[0]
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot ||
			sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
			t.Errorf("%s: container security context %+v", name, sc)
		}
		wantImage := stringValue(t, v, "image.repository") + ":"
		if tag := stringValue(t, v, "image.tag"); tag != "" {
			wantImage += tag
		} else {
			wantImage += "latest"
		}
		if c.Image != wantImage {
			t.Errorf("%s: image %s, want %s", name, c.Image, wantImage)
		}
		if len(c.Command) != 1 || !strings.Contains("toolbus coordinator worker indexer", c.Command[0]) {
			t.Errorf("%s: command %q is none of the image's programs", name, c.Command)
		}
		// --metrics-listen serves the probes and /metrics on the port the
		// probes and the annotations name.
		if got := flagValue(t, c.Args, "--metrics-listen"); got != fmt.Sprintf(":%d", metricsPort) {
			t.Errorf("%s: --metrics-listen=%s, want :%d", name, got, metricsPort)
		}
		if port := containerPort(c, "metrics"); port != metricsPort {
			t.Errorf("%s: port metrics is %d, want %d", name, port, metricsPort)
		}
		for probe, want := range map[*corev1.Probe]string{c.LivenessProbe: "/healthz", c.ReadinessProbe: "/readyz", c.StartupProbe: "/healthz"} {
			if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != want || probe.HTTPGet.Port.String() != "metrics" {
				t.Errorf("%s: probe %+v, want GET %s on port metrics", name, probe, want)
			}
		}
		pa := d.Spec.Template.Annotations
		if annotations {
			if pa["prometheus.io/scrape"] != "true" || pa["prometheus.io/port"] != strconv.Itoa(int(metricsPort)) || pa["prometheus.io/path"] != "/metrics" {
				t.Errorf("%s: scrape annotations %v", name, pa)
			}
		} else if _, ok := pa["prometheus.io/scrape"]; ok {
			t.Errorf("%s: scrape annotations with metrics.annotations false", name)
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("%s: resources %+v", name, c.Resources)
		}
		var url string
		for _, e := range c.Env {
			if e.Name == "TOOLBUS_URL" {
				url = e.Value
			}
		}
		if url != natsURL {
			t.Errorf("%s: TOOLBUS_URL %q, want nats.url %q", name, url, natsURL)
		}
		checkMounts(t, r, name, spec, c, create)
	}

	// The fronts' Services select their pods, on the port they listen on;
	// an Ingress sends to a Service of the release.
	for name, s := range r.services {
		d := r.deployments[name]
		if d == nil || !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("Service %s selects no Deployment of its name", name)
			continue
		}
		listen := flagValue(t, d.Spec.Template.Spec.Containers[0].Args, "--listen")
		if len(s.Spec.Ports) != 1 || s.Spec.Ports[0].TargetPort.String() != "http" || ":"+strconv.Itoa(int(containerPort(d.Spec.Template.Spec.Containers[0], "http"))) != listen {
			t.Errorf("Service %s: ports %+v, the front listens on %s", name, s.Spec.Ports, listen)
		}
	}
	for _, front := range []string{"console", "mcp"} {
		enabled := boolValue(t, v, front+".enabled")
		if (r.services["tb-"+front] != nil) != enabled {
			t.Errorf("%s enabled %v, Service %v", front, enabled, r.services["tb-"+front] != nil)
		}
		ing := r.ingresses["tb-"+front]
		if (ing != nil) != (enabled && boolValue(t, v, front+".ingress.enabled")) {
			t.Errorf("%s: Ingress %v", front, ing != nil)
		}
		if ing != nil {
			backend := ing.Spec.Rules[0].HTTP.Paths[0].Backend.Service
			if backend == nil || r.services[backend.Name] == nil || ing.Spec.Rules[0].Host != stringValue(t, v, front+".ingress.host") {
				t.Errorf("%s's Ingress: %+v", front, ing.Spec)
			}
		}
	}
	if boolValue(t, v, "metrics.podMonitor.enabled") {
		if len(r.podMonitors) != len(r.deployments) {
			t.Errorf("%d PodMonitors for %d Deployments", len(r.podMonitors), len(r.deployments))
		}
		for name, pm := range r.podMonitors {
			d := r.deployments[name]
			if d == nil || !mustSelector(t, &pm.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) || pm.Spec.PodMetricsEndpoints[0].Port != "metrics" {
				t.Errorf("PodMonitor %s: %+v", name, pm.Spec)
			}
		}
	} else if len(r.podMonitors) > 0 {
		t.Errorf("PodMonitors without metrics.podMonitor.enabled")
	}
}

// checkMounts: every Secret and ConfigMap a pod mounts is rendered, or, a
// Secret the operator makes, named in the release's notes with its keys;
// the files the arguments name are keys of what is mounted there.
func checkMounts(t *testing.T, r *rendered, name string, spec corev1.PodSpec, c corev1.Container, create bool) {
	t.Helper()
	mounted := map[string][]string{} // mount path: the keys there
	for _, vol := range spec.Volumes {
		var path string
		for _, m := range c.VolumeMounts {
			if m.Name == vol.Name {
				path = m.MountPath
			}
		}
		if path == "" {
			t.Errorf("%s: volume %s is mounted nowhere", name, vol.Name)
		}
		switch {
		case vol.Secret != nil:
			s := r.secrets[vol.Secret.SecretName]
			if s == nil && create {
				t.Errorf("%s mounts Secret %s, which the chart did not make with credentials.create", name, vol.Secret.SecretName)
			}
			if s == nil {
				line := regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(vol.Secret.SecretName) + ` \(([^)]*)\)`).FindStringSubmatch(r.notes)
				if line == nil {
					t.Errorf("%s mounts Secret %s, neither rendered nor named in NOTES.txt:\n%s", name, vol.Secret.SecretName, r.notes)
					continue
				}
				mounted[path] = strings.Split(line[1], ", ")
				continue
			}
			for k := range s.Data {
				mounted[path] = append(mounted[path], k)
			}
		case vol.ConfigMap != nil:
			cm := r.configMaps[vol.ConfigMap.Name]
			if cm == nil {
				t.Errorf("%s mounts ConfigMap %s, which is not rendered", name, vol.ConfigMap.Name)
				continue
			}
			for k := range cm.Data {
				mounted[path] = append(mounted[path], k)
			}
		case vol.EmptyDir != nil:
		default:
			t.Errorf("%s: volume %s of an unexpected kind", name, vol.Name)
		}
	}
	for _, arg := range c.Args {
		flag, file, ok := strings.Cut(arg, "=")
		if !ok || !strings.HasPrefix(file, "/") {
			continue
		}
		dir, key := filepath.Dir(file), filepath.Base(file)
		switch flag {
		case "--creds-dir":
			ns := strings.TrimPrefix(name, "tb-worker-")
			dir, key = file, "worker_"+ns+".creds"
		case "--creds", "--tokens", "--config":
		default:
			continue
		}
		found := false
		for _, k := range mounted[dir] {
			found = found || k == key
		}
		if !found {
			t.Errorf("%s: %s names %s, which %s does not hold (%v)", name, flag, key, dir, mounted[dir])
		}
	}
}

// TestChartRefusesMissingValues: what the chart cannot do without is named.
func TestChartRefusesMissingValues(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values map[string]any
		says   string
	}{
		{"credentials.create without the files", map[string]any{"credentials": map[string]any{"create": true}}, "credentials.files.coordinator is required with credentials.create"},
		{"an Ingress without a host", map[string]any{"mcp": map[string]any{"ingress": map[string]any{"enabled": true}}}, "mcp.ingress.host is required"},
		{"no NATS URL", map[string]any{"nats": map[string]any{"url": ""}}, "nats.url is required"},
		{"a worker without its namespace", map[string]any{"workers": []any{map[string]any{"replicas": 1}}}, "each of workers needs its namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, tc.values)
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("rendered with %v: %v, want an error saying %q", tc.values, err, tc.says)
			}
		})
	}
}

func mustSelector(t *testing.T, s *metav1.LabelSelector) labels.Selector {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil || sel.Empty() {
		t.Fatalf("selector %+v: %v", s, err)
	}
	return sel
}

func flagValue(t *testing.T, args []string, flag string) string {
	t.Helper()
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	t.Fatalf("no %s in %q", flag, args)
	return ""
}

func containerPort(c corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

func lookup(t *testing.T, v chartutil.Values, path string) any {
	t.Helper()
	var cur any = map[string]any(v)
	for _, part := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			t.Fatalf("values: %s", path)
		}
		cur = m[part]
	}
	return cur
}

func intValue(t *testing.T, v chartutil.Values, path string) int {
	t.Helper()
	n, err := strconv.Atoi(fmt.Sprint(lookup(t, v, path)))
	if err != nil {
		t.Fatalf("values: %s: %v", path, err)
	}
	return n
}

func stringValue(t *testing.T, v chartutil.Values, path string) string {
	t.Helper()
	s, _ := lookup(t, v, path).(string)
	return s
}

func boolValue(t *testing.T, v chartutil.Values, path string) bool {
	t.Helper()
	b, _ := lookup(t, v, path).(bool)
	return b
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func fmtInt(p *int64) string {
	if p == nil {
		return "unset"
	}
	return strconv.FormatInt(*p, 10)
}
