package coordinator

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/toolbus/toolbus/pkg/catalog"
	"github.com/toolbus/toolbus/pkg/messages"
)

// DefaultStaleToolTTL is how long a namespace may go without a live worker
// before its tools are swept from the catalog (Config.StaleToolTTL).
const DefaultStaleToolTTL = 24 * time.Hour

// remove is tools.remove: it takes a tool, or every tool of a namespace,
// out of the catalog. Operators use it for stale tools — those of a
// worker that is gone for good, or of a source it no longer has.
func (s *toolSwitches) remove(ctx context.Context, sr *messages.ToolSwitchRequest) (*messages.RemoveToolsReply, error) {
	if (sr.Tool == "") == (sr.Namespace == "") {
		return nil, messages.Errorf(messages.CodeBadRequest, "name either a tool or a namespace")
	}
	var names []messages.ToolName
	if sr.Tool != "" {
		name, err := messages.ParseToolName(sr.Tool)
		if err != nil {
			return nil, err
		}
		// The bucket, not the view, which may not have seen a removal made
		// a moment ago.
		if ok, err := s.store.HasTool(ctx, name); err != nil {
			return nil, unavailable(err, "read tool %s", name)
		} else if !ok {
			return nil, messages.Errorf(messages.CodeToolNotFound, "no tool %s in the catalog", name)
		}
		names = append(names, name)
	} else {
		var err error
		if names, err = s.store.NamespaceTools(ctx, sr.Namespace); err != nil {
			var invalid *messages.NameError
			if errors.As(err, &invalid) {
				return nil, err
			}
			return nil, unavailable(err, "list the tools of %s", sr.Namespace)
		}
		if len(names) == 0 {
			return nil, messages.Errorf(messages.CodeToolNotFound, "no tool of namespace %s in the catalog", sr.Namespace)
		}
	}
	reply := &messages.RemoveToolsReply{Removed: []string{}}
	for _, name := range names {
		if err := s.store.DeleteTool(ctx, name); err != nil {
			return nil, unavailable(err, "remove tool %s", name)
		}
		reply.Removed = append(reply.Removed, name.String())
	}
	return reply, nil
}

// namespaceTools lists the names of the catalog's tools of one namespace.
func namespaceTools(view *catalog.View, ns string) []messages.ToolName {
	var names []messages.ToolName
	for _, t := range view.Tools() {
		if t.Definition.Namespace == ns {
			names = append(names, t.Definition.ToolName())
		}
	}
	return names
}

// staleToolSweep removes the tools of namespaces that have had no live
// worker for ttl. A coordinator keeps no state, so the time is counted from
// when this coordinator first saw the namespace without one: a restarted
// coordinator starts counting again, which only delays a sweep. Replicas
// sweep independently; removing a removed tool does nothing.
type staleToolSweep struct {
	catalog  *catalog.View
	store    *catalog.Store
	ttl      time.Duration
	interval time.Duration
	now      func() time.Time
	log      *slog.Logger
	// deadSince is when each namespace was first seen without a live worker.
	deadSince map[string]time.Time
}

func (s *staleToolSweep) run(ctx context.Context) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		s.sweep(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *staleToolSweep) sweep(ctx context.Context) {
	now := s.now()
	present := map[string]bool{}
	for _, t := range s.catalog.Tools() {
		present[t.Definition.Namespace] = true
	}
	for ns := range s.deadSince {
		if !present[ns] {
			delete(s.deadSince, ns)
		}
	}
	for ns := range present {
		if s.catalog.Available(ns) {
			delete(s.deadSince, ns)
			continue
		}
		since, seen := s.deadSince[ns]
		if !seen {
			s.deadSince[ns] = now
			continue
		}
		if now.Sub(since) < s.ttl {
			continue
		}
		names := namespaceTools(s.catalog, ns)
		removed := 0
		for _, name := range names {
			wctx, cancel := context.WithTimeout(ctx, requestTimeout)
			err := s.store.DeleteTool(wctx, name)
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					s.log.Warn("stale tool not removed; trying again at the next sweep", "tool", name.String(), "error", err)
				}
				continue
			}
			removed++
		}
		s.log.Info("removed the tools of a namespace without a live worker", "namespace", ns, "tools", removed, "without_worker_since", since)
		if removed == len(names) {
			delete(s.deadSince, ns)
		}
	}
}

// startStaleToolSweep starts sweeping stale tools, unless
// Config.StaleToolTTL turns it off.
func (c *Coordinator) startStaleToolSweep(context.Context) (func(context.Context) error, error) {
	if c.cfg.StaleToolTTL < 0 {
		return nil, nil
	}
	s := &staleToolSweep{
		catalog:   c.switches.catalog,
		store:     c.switches.store,
		ttl:       c.cfg.StaleToolTTL,
		interval:  c.cfg.SweepInterval,
		now:       time.Now,
		log:       c.log,
		deadSince: map[string]time.Time{},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.run(ctx)
	}()
	return func(context.Context) error {
		cancel()
		<-done
		return nil
	}, nil
}
