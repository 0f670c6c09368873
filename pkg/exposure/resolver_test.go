package exposure

import (
	"fmt"
	"sync"
	"testing"
)

func TestResolverCachesPerAgentAndVersion(t *testing.T) {
	ws := mustWorkspace(t, []Bundle{bundle("catalog", seedRules...), bundle("ops", Rule{Name: "ops"})},
		Agent{ID: "ops-only", Tool: AgentTools{Bundles: []string{"ops"}}})
	r := NewResolver(ws)
	v1 := catalogOf(1, seedCatalog...)

	a := r.Admission("ops-only", v1)
	if b := r.Admission("ops-only", catalogOf(1, seedCatalog...)); b != a {
		t.Error("same agent and catalog version: admission recomputed")
	}
	if r.Admission("someone", v1) != r.Admission("someone-else", v1) {
		t.Error("agents the workspace does not define do not share one cache entry")
	}
	if r.Admission("someone", v1) == a {
		t.Error("a defined agent shares the default entry")
	}

	v2 := catalogOf(2, "ops:restart")
	a2 := r.Admission("ops-only", v2)
	if a2 == a || a2.CatalogVersion() != 2 {
		t.Errorf("new catalog version served the old admission")
	}
	assertNames(t, "admitted from v2", toolNames(a2.Tools()), []string{"ops-restart"})
	if old1, old2 := r.Admission("ops-only", v1), r.Admission("ops-only", v1); old1 == old2 {
		t.Error("an older catalog version was cached over the newer one")
	}
	if r.Admission("ops-only", v2) != a2 {
		t.Error("the newest version was evicted by a request for an older one")
	}

	r.SetWorkspace(mustWorkspace(t, []Bundle{bundle("catalog", Rule{Name: "catalog"})}))
	a3 := r.Admission("ops-only", v2)
	if a3 == a2 {
		t.Error("SetWorkspace kept the cached admission")
	}
	assertNames(t, "admitted after reload", toolNames(a3.Tools()), nil)
	if r.Workspace() == ws {
		t.Error("Workspace returns the old workspace")
	}
}

func TestResolverConcurrentUse(t *testing.T) {
	ws := mustWorkspace(t, []Bundle{bundle("catalog", seedRules...)})
	r := NewResolver(ws)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				cat := catalogOf(uint64(i/20), seedCatalog...)
				v := r.Resolve(fmt.Sprint("agent", g), cat, Iteration{Discovered: []string{"catalog-details"}})
				if len(v.Tools) != 3 {
					t.Errorf("visible = %v", v.Names())
					return
				}
				if g == 0 && i%50 == 0 {
					r.SetWorkspace(ws)
				}
			}
		}()
	}
	wg.Wait()
}
