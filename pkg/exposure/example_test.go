package exposure_test

import (
	"fmt"
	"testing/fstest"

	"github.com/toolbus/toolbus/pkg/exposure"
	"github.com/toolbus/toolbus/pkg/messages"
)

func Example() {
	files := fstest.MapFS{
		"bundles/catalog.yaml": {Data: []byte(`
id: catalog
match:
  - name: "catalog:lookup"
    tier: critical
  - name: "catalog:details"
    tier: onDemand
  - name: "catalog:help"
    tier: onDemand
    alwaysInclude: true
`)},
		"bundles/ops.yaml": {Data: []byte(`
id: ops
match:
  - name: ops
    exclude: ["ops:reboot"]
    approval: {mode: prompt, title: "Run an ops tool?"}
`)},
	}
	ws, err := exposure.LoadWorkspace(files)
	if err != nil {
		fmt.Println(err)
		return
	}
	var defs []messages.ToolDefinition
	for _, name := range []string{"catalog-lookup", "catalog-details", "catalog-help", "ops-status", "ops-reboot", "web-fetch"} {
		n, _ := messages.ParseToolName(name)
		defs = append(defs, messages.ToolDefinition{Name: n.String(), Namespace: n.Namespace, Method: n.Method})
	}
	cat := exposure.NewCatalog(1, defs)
	r := exposure.NewResolver(ws)

	fmt.Println("first iteration:", r.Resolve("analyst", cat, exposure.Iteration{}).Names())
	fmt.Println("empty intake:   ", r.Resolve("analyst", cat, exposure.Iteration{Intake: &exposure.Intake{}}).Names())
	fmt.Println("after discovery:", r.Resolve("analyst", cat, exposure.Iteration{
		Intake:     &exposure.Intake{},
		Discovered: []string{"catalog:details", "web/fetch", "ops:reboot"},
	}).Names())
	status, _ := r.Admission("analyst", cat).Lookup("ops:status")
	fmt.Println("ops-status approval:", status.Approval.Mode)
	// Output:
	// first iteration: [catalog-help catalog-lookup ops-status]
	// empty intake:    [catalog-help catalog-lookup]
	// after discovery: [catalog-details catalog-help catalog-lookup web-fetch]
	// ops-status approval: prompt
}
