package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/pkg/messages"
)

// livenessCheck is how often Changes looks for workers whose heartbeats
// stopped.
const livenessCheck = time.Second

// Follow follows the catalog bucket and yields each change made after it
// returned (it loads the current contents first): tools added, changed and
// removed, tools and namespaces disabled and enabled, workers joining and
// leaving. A worker leaves when its heartbeat is deleted (it stopped) or
// three of its intervals pass without one (it died). The iteration ends
// when ctx ends, when yield returns false, or with an error; the watch
// lasts as long.
func Follow(ctx context.Context, bucket Bucket) (iter.Seq2[messages.CatalogChange, error], error) {
	ctx, cancel := context.WithCancel(ctx)
	w, err := bucket.WatchAll(ctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("watch catalog: %w", err)
	}
	f := &follower{tools: map[string]bool{}, workers: map[string]heartbeat{}, now: time.Now}
	for !f.live {
		select {
		case <-ctx.Done():
			cancel()
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				cancel()
				return nil, fmt.Errorf("watch catalog: closed before the current contents arrived")
			}
			if e == nil { // the current contents are loaded: what follows is news
				f.live = true
				continue
			}
			f.apply(e)
		}
	}
	return func(yield func(messages.CatalogChange, error) bool) {
		defer cancel()
		defer func() { _ = w.Stop() }()
		tick := time.NewTicker(livenessCheck)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				for _, c := range f.silentWorkers() {
					if !yield(c, nil) {
						return
					}
				}
			case e, ok := <-w.Updates():
				if !ok {
					if ctx.Err() == nil {
						yield(messages.CatalogChange{}, fmt.Errorf("watch catalog: closed"))
					}
					return
				}
				if e == nil {
					continue
				}
				if c, ok := f.apply(e); ok && !yield(c, nil) {
					return
				}
			}
		}
	}, nil
}

// follower holds what the catalog holds, to tell an added tool from a
// changed one and a worker joining from one still there.
type follower struct {
	live    bool
	tools   map[string]bool
	workers map[string]heartbeat
	now     func() time.Time
}

// apply takes one entry in, and returns the change it is, if any.
func (f *follower) apply(e jetstream.KeyValueEntry) (messages.CatalogChange, bool) {
	put := e.Operation() == jetstream.KeyValuePut
	parts := strings.SplitN(e.Key(), ".", 3)
	c := messages.CatalogChange{Time: e.Created().UTC()}
	if len(parts) < 2 {
		return c, false
	}
	c.Namespace = parts[1]
	switch parts[0] {
	case "tools":
		if len(parts) != 3 {
			return c, false
		}
		c.Tool = messages.ToolName{Namespace: parts[1], Method: parts[2]}.String()
		known := f.tools[e.Key()]
		if !put {
			delete(f.tools, e.Key())
			c.Kind = messages.CatalogToolRemoved
			return c, known
		}
		var def messages.ToolDefinition
		if err := json.Unmarshal(e.Value(), &def); err != nil {
			return c, false
		}
		f.tools[e.Key()] = true
		c.Kind, c.Definition = messages.CatalogToolAdded, &def
		if known {
			c.Kind = messages.CatalogToolChanged
		}
		return c, true
	case "disabled":
		if len(parts) == 3 {
			c.Tool = messages.ToolName{Namespace: parts[1], Method: parts[2]}.String()
		}
		if !put {
			c.Kind = messages.CatalogEnabled
			return c, true
		}
		var st messages.DisabledState
		_ = json.Unmarshal(e.Value(), &st)
		c.Kind, c.Reason, c.By = messages.CatalogDisabled, st.Reason, st.By
		return c, true
	case "workers":
		if len(parts) != 3 {
			return c, false
		}
		c.WorkerID = parts[2]
		seen, known := f.workers[e.Key()]
		alive := known && seen.aliveAt(f.now())
		if !put {
			delete(f.workers, e.Key())
			c.Kind = messages.CatalogWorkerLeft
			return c, alive
		}
		var hb messages.WorkerHeartbeat
		if err := json.Unmarshal(e.Value(), &hb); err != nil || hb.IntervalMS <= 0 {
			return c, false
		}
		latest := heartbeat{at: e.Created(), interval: time.Duration(hb.IntervalMS) * time.Millisecond}
		f.workers[e.Key()] = latest
		c.Kind = messages.CatalogWorkerJoined
		return c, !alive && latest.aliveAt(f.now())
	}
	return c, false
}

// silentWorkers returns a leaving for each worker whose heartbeats
// stopped, and forgets it, so that its next heartbeat is a joining.
func (f *follower) silentWorkers() []messages.CatalogChange {
	var out []messages.CatalogChange
	now := f.now()
	for key, w := range f.workers {
		if w.aliveAt(now) {
			continue
		}
		delete(f.workers, key)
		parts := strings.SplitN(key, ".", 3)
		out = append(out, messages.CatalogChange{Kind: messages.CatalogWorkerLeft, Namespace: parts[1], WorkerID: parts[2], Time: now.UTC()})
	}
	return out
}
