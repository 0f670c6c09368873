package exposure

import "sync"

// Resolver resolves visible tools for many agents and iterations, caching
// each agent's Admission per catalog version so that an iteration whose
// catalog has not changed runs only the cheap Admission.Visible step. It is
// safe for concurrent use.
type Resolver struct {
	mu        sync.RWMutex
	workspace *Workspace
	// generation changes with the workspace, so that an admission computed
	// from an old workspace is not cached under the new one.
	generation uint64
	version    uint64
	cache      map[agentKey]*Admission
}

// NewResolver returns a Resolver over the workspace; nil stands for a
// workspace without bundles or agents.
func NewResolver(ws *Workspace) *Resolver {
	return &Resolver{workspace: ws}
}

// Workspace returns the current workspace.
func (r *Resolver) Workspace() *Workspace {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.workspace
}

// SetWorkspace replaces the workspace, e.g. after its files changed, and
// forgets every cached admission.
func (r *Resolver) SetWorkspace(ws *Workspace) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.workspace = ws
	r.generation++
	r.cache = nil
}

// Admission returns the agent's admission from the catalog, computed once
// per (agent, catalog version). Only the newest catalog version seen is
// cached; an older one is computed on every call.
func (r *Resolver) Admission(agentID string, cat *Catalog) *Admission {
	r.mu.RLock()
	ws, gen := r.workspace, r.generation
	key := cacheKey(ws, agentID)
	if r.cache != nil && r.version == cat.version {
		if a, ok := r.cache[key]; ok {
			r.mu.RUnlock()
			return a
		}
	}
	r.mu.RUnlock()

	a := ws.Admit(agentID, cat)

	r.mu.Lock()
	defer r.mu.Unlock()
	if gen != r.generation {
		return a
	}
	if r.cache == nil || cat.version > r.version {
		r.cache = make(map[agentKey]*Admission)
		r.version = cat.version
	}
	if cat.version == r.version {
		r.cache[key] = a
	}
	return a
}

// Resolve returns the tools visible to the agent on one iteration.
func (r *Resolver) Resolve(agentID string, cat *Catalog, it Iteration) Visible {
	return r.Admission(agentID, cat).Visible(it)
}

type agentKey struct {
	id      string
	defined bool
}

// cacheKey maps every agent that the workspace does not define to one
// entry: they all resolve alike, and unknown IDs must not grow the cache.
func cacheKey(ws *Workspace, agentID string) agentKey {
	if ws != nil {
		if _, ok := ws.agents[agentID]; ok {
			return agentKey{id: agentID, defined: true}
		}
	}
	return agentKey{}
}
