package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/dev/testenv/leaks"
	"github.com/toolbus/toolbus/pkg/catalog"
	"github.com/toolbus/toolbus/pkg/messages"
)

func TestMain(m *testing.M) { leaks.Main(m) }

func tool(ns, method, description string) *messages.ToolDefinition {
	return &messages.ToolDefinition{
		Name: ns + "-" + method, Namespace: ns, Method: method, Description: description,
		InputSchema: messages.JSON(`{"type":"object"}`), Source: messages.ToolSource{Kind: messages.SourceGo},
	}
}

// catalogOf starts a server with Toolbus's resources and returns the
// catalog's store, a started view and the bucket itself.
func catalogOf(t *testing.T) (*catalog.Store, *catalog.View, jetstream.KeyValue) {
	t.Helper()
	f := testenv.Catalog(t, testenv.Server(t).URL())
	kv, err := f.JS.KeyValue(testenv.Context(t), messages.MustNames("").CatalogBucket())
	if err != nil {
		t.Fatal(err)
	}
	return f.Store, f.View, kv
}

// waitFor waits on the view's change signal until cond holds.
func waitFor(t *testing.T, v *catalog.View, what string, cond func() bool) {
	t.Helper()
	timeout := time.After(testenv.Patience)
	for {
		changed := v.Changed()
		if cond() {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("gave up waiting for %s after %v", what, testenv.Patience)
		}
	}
}

// findable asks a fresh Finder, as a search does, whether the tool may be
// found, and checks that it returns the tool the view holds.
func findable(t *testing.T, v *catalog.View, def *messages.ToolDefinition, includeUnavailable bool) bool {
	t.Helper()
	got, ok := v.Finder(includeUnavailable)(def.ToolName(), def.ToolName().String())
	if held, _ := v.Lookup(def.ToolName().String()); got != held {
		t.Errorf("Finder returned %v for %s; the view holds %v", got, def.ToolName(), held)
	}
	return ok
}

// Names that cannot be keys are refused before anything is written, with
// an error that names the part that is wrong.
func TestStoreRefusesBadNames(t *testing.T) {
	t.Parallel()
	store, _, _ := catalogOf(t)
	ctx := testenv.Context(t)
	mismatched := tool("maps", "route", "")
	mismatched.Name = "maps-other"
	if err := store.PutTool(ctx, mismatched); err == nil || !strings.Contains(err.Error(), `"maps-other"`) || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("a name that is not its namespace and method: %v", err)
	}
	var nameErr *messages.NameError
	for what, err := range map[string]error{
		"namespace": store.PutTool(ctx, tool("maps.eu", "route", "")),
		"method":    store.DeleteTool(ctx, messages.ToolName{Namespace: "maps", Method: "a.b"}),
		"switch":    store.SetDisabled(ctx, "maps eu", "", true, messages.DisabledState{Reason: "r"}),
		"heartbeat": store.Heartbeat(ctx, &messages.WorkerHeartbeat{Namespace: "maps", WorkerID: "", IntervalMS: 1000}),
		"worker":    store.RemoveWorker(ctx, "maps", "w.1"),
	} {
		if !errors.As(err, &nameErr) || !errors.Is(err, messages.ErrInvalidName) {
			t.Errorf("%s: %v, want a name error", what, err)
		}
	}
	if _, err := store.HasTool(ctx, messages.ToolName{Namespace: "maps", Method: ""}); !errors.Is(err, messages.ErrInvalidName) {
		t.Errorf("HasTool of an empty method: %v", err)
	}
}

// A definition the bucket already holds unchanged is not written again;
// a changed one is.
func TestPutToolWritesOnlyChanges(t *testing.T) {
	t.Parallel()
	store, _, kv := catalogOf(t)
	ctx := testenv.Context(t)
	revision := func() uint64 {
		t.Helper()
		e, err := kv.Get(ctx, "tools.maps.route")
		if err != nil {
			t.Fatal(err)
		}
		return e.Revision()
	}
	if err := store.PutTool(ctx, tool("maps", "route", "Routes.")); err != nil {
		t.Fatal(err)
	}
	first := revision()
	if err := store.PutTool(ctx, tool("maps", "route", "Routes.")); err != nil {
		t.Fatal(err)
	}
	if r := revision(); r != first {
		t.Errorf("the same definition was written again: revision %d, then %d", first, r)
	}
	if err := store.PutTool(ctx, tool("maps", "route", "Routes by road.")); err != nil {
		t.Fatal(err)
	}
	if r := revision(); r <= first {
		t.Errorf("a changed definition was not written: revision %d, then %d", first, r)
	}
	if has, err := store.HasTool(ctx, messages.ToolName{Namespace: "maps", Method: "route"}); err != nil || !has {
		t.Errorf("HasTool after PutTool: %v, %v", has, err)
	}
	if err := store.DeleteTool(ctx, messages.ToolName{Namespace: "maps", Method: "route"}); err != nil {
		t.Fatal(err)
	}
	if has, err := store.HasTool(ctx, messages.ToolName{Namespace: "maps", Method: "route"}); err != nil || has {
		t.Errorf("HasTool after DeleteTool: %v, %v", has, err)
	}
	if err := store.DeleteTool(ctx, messages.ToolName{Namespace: "maps", Method: "route"}); err != nil {
		t.Errorf("deleting a tool that is gone: %v", err)
	}
}

// The view follows tools as they are written and removed; heartbeats do
// not change ToolsVersion, so caches keyed by it survive them.
func TestViewFollowsTools(t *testing.T) {
	t.Parallel()
	store, view, _ := catalogOf(t)
	ctx := testenv.Context(t)
	before := view.ToolsVersion()
	for _, def := range []*messages.ToolDefinition{tool("maps", "route", "Routes."), tool("geo", "locate", "Locates.")} {
		if err := store.PutTool(ctx, def); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, view, "both tools in the view", func() bool {
		_, a := view.Lookup("maps-route")
		_, b := view.Lookup("geo-locate")
		return a && b
	})
	if view.ToolsVersion() <= before {
		t.Errorf("ToolsVersion %d after two tools, %d before", view.ToolsVersion(), before)
	}
	var names []string
	for _, tl := range view.Tools() {
		names = append(names, tl.Definition.Name)
		if tl.Revision == 0 {
			t.Errorf("%s has no revision", tl.Definition.Name)
		}
	}
	if strings.Join(names, ",") != "geo-locate,maps-route" {
		t.Errorf("Tools() = %v, want them sorted by name", names)
	}

	version := view.ToolsVersion()
	if err := store.Heartbeat(ctx, &messages.WorkerHeartbeat{Namespace: "maps", WorkerID: "w1", IntervalMS: 60_000}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, view, "the worker's heartbeat", func() bool { return view.Available("maps") })
	if v := view.ToolsVersion(); v != version {
		t.Errorf("a heartbeat changed ToolsVersion from %d to %d", version, v)
	}

	if err := store.DeleteTool(ctx, messages.ToolName{Namespace: "maps", Method: "route"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, view, "the tool's removal", func() bool { _, ok := view.Lookup("maps-route"); return !ok })
	if view.ToolsVersion() <= version {
		t.Errorf("removing a tool left ToolsVersion at %d", view.ToolsVersion())
	}
}

// Start returns with what the bucket held loaded; Get finds a tool the
// view does not hold yet by reading the bucket.
func TestViewLoadsAndReadsThrough(t *testing.T) {
	t.Parallel()
	store, _, kv := catalogOf(t)
	ctx := testenv.Context(t)
	if err := store.PutTool(ctx, tool("maps", "route", "Routes.")); err != nil {
		t.Fatal(err)
	}
	viewCtx, stop := context.WithCancel(ctx)
	defer stop()
	started := catalog.NewView(kv, testenv.Logger(t))
	if err := started.Start(viewCtx); err != nil {
		t.Fatal(err)
	}
	if _, ok := started.Lookup("maps-route"); !ok {
		t.Error("a tool stored before Start is missing once Start returned")
	}

	unstarted := catalog.NewView(kv, testenv.Logger(t))
	if _, ok := unstarted.Lookup("maps-route"); ok {
		t.Fatal("a view that never started holds a tool")
	}
	got, ok, err := unstarted.Get(ctx, messages.ToolName{Namespace: "maps", Method: "route"})
	if err != nil || !ok || got.Definition.Description != "Routes." || got.Revision == 0 {
		t.Fatalf("Get through to the bucket: %+v, %v, %v", got, ok, err)
	}
	if _, ok := unstarted.Lookup("maps-route"); !ok {
		t.Error("the tool Get read is not kept")
	}
	if got, ok, err := unstarted.Get(ctx, messages.ToolName{Namespace: "maps", Method: "none"}); err != nil || ok || got != nil {
		t.Errorf("Get of a tool nobody stored: %+v, %v, %v", got, ok, err)
	}
	if _, _, err := unstarted.Get(ctx, messages.ToolName{Namespace: "maps", Method: "a b"}); !errors.Is(err, messages.ErrInvalidName) {
		t.Errorf("Get of a bad name: %v", err)
	}
}

// Entries any client may have written are read defensively: a definition
// under another tool's key, or one that is not JSON, is left out.
func TestViewIgnoresUnreadableEntries(t *testing.T) {
	t.Parallel()
	store, view, kv := catalogOf(t)
	ctx := testenv.Context(t)
	if _, err := kv.Put(ctx, "tools.maps.route", []byte(`{"name":"maps-other","namespace":"maps","method":"other"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "tools.maps.broken", []byte(`not json`)); err != nil {
		t.Fatal(err)
	}
	// The watch delivers in order: once this one is in, so are the others.
	if err := store.PutTool(ctx, tool("maps", "good", "Good.")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, view, "the good tool", func() bool { _, ok := view.Lookup("maps-good"); return ok })
	for _, name := range []string{"maps-route", "maps-other", "maps-broken"} {
		if _, ok := view.Lookup(name); ok {
			t.Errorf("the view holds %s", name)
		}
	}
}

// An operator's switches disable a tool or a whole namespace, with the
// reason, until they are switched back.
func TestDisabledSwitches(t *testing.T) {
	t.Parallel()
	store, view, _ := catalogOf(t)
	ctx := testenv.Context(t)
	route, locate := messages.ToolName{Namespace: "maps", Method: "route"}, messages.ToolName{Namespace: "maps", Method: "locate"}
	if err := store.SetDisabled(ctx, "maps", "route", true, messages.DisabledState{Reason: "returns wrong routes", By: "ops"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, view, "the tool disabled", func() bool { off, _ := view.Disabled(route); return off })
	if _, why := view.Disabled(route); why != "returns wrong routes" {
		t.Errorf("reason %q", why)
	}
	if off, _ := view.Disabled(locate); off {
		t.Error("disabling one tool disabled another of its namespace")
	}
	if err := store.SetDisabled(ctx, "maps", "", true, messages.DisabledState{Reason: "maintenance"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, view, "the namespace disabled", func() bool { off, _ := view.Disabled(locate); return off })
	if _, why := view.Disabled(locate); why != "namespace maps disabled: maintenance" {
		t.Errorf("reason %q", why)
	}
	for _, method := range []string{"route", ""} {
		if err := store.SetDisabled(ctx, "maps", method, false, messages.DisabledState{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, view, "both switched back", func() bool {
		a, _ := view.Disabled(route)
		b, _ := view.Disabled(locate)
		return !a && !b
	})
	if err := store.SetDisabled(ctx, "maps", "", false, messages.DisabledState{}); err != nil {
		t.Errorf("enabling what is not disabled: %v", err)
	}
}

// A tool is served while a live worker serves its namespace and has not
// reported its source down; when none can, the view says why.
func TestServingFollowsHeartbeats(t *testing.T) {
	t.Parallel()
	store, view, _ := catalogOf(t)
	ctx := testenv.Context(t)
	def := tool("maps", "route", "Routes.")
	def.Source = messages.ToolSource{Kind: messages.SourceMCP, Name: "osm"}
	local := tool("maps", "locate", "Locates.")
	if err := store.PutTool(ctx, def); err != nil {
		t.Fatal(err)
	}
	waitFor(t, view, "the tool", func() bool { _, ok := view.Lookup("maps-route"); return ok })
	if ok, why := view.Serving(def); ok || why != "no live worker serves namespace maps" {
		t.Errorf("without a worker: %v, %q", ok, why)
	}
	if serving, live, _ := view.ServingState(def); serving || live {
		t.Errorf("without a worker: serving %v, a live worker %v", serving, live)
	}
	if findable(t, view, def, false) || findable(t, view, local, false) || !findable(t, view, def, true) {
		t.Error("without a worker, a search finds the namespace's tools, or finds none even when it includes unavailable tools")
	}
	if n := view.LiveWorkers()["maps"]; n != 0 {
		t.Errorf("%d live workers before any heartbeat", n)
	}

	hb := &messages.WorkerHeartbeat{Namespace: "maps", WorkerID: "w1", IntervalMS: 60_000}
	if err := store.Heartbeat(ctx, hb); err != nil {
		t.Fatal(err)
	}
	waitFor(t, view, "the worker", func() bool { ok, _ := view.Serving(def); return ok })
	if !findable(t, view, def, false) || !findable(t, view, local, false) {
		t.Error("a search does not find the tools of a live worker")
	}
	if n := view.LiveWorkers()["maps"]; n != 1 {
		t.Errorf("%d live workers, want 1", n)
	}

	version := view.ToolsVersion()
	hb.Down = []messages.SourceDown{{Source: "osm", Reason: "connection refused"}}
	if err := store.Heartbeat(ctx, hb); err != nil {
		t.Fatal(err)
	}
	waitFor(t, view, "the source down", func() bool { ok, _ := view.Serving(def); return !ok })
	if _, why := view.ToolAvailable(def.ToolName()); why != "source osm is down: connection refused" {
		t.Errorf("reason %q", why)
	}
	if serving, live, why := view.ServingState(def); serving || !live || why != "source osm is down: connection refused" {
		t.Errorf("a live worker whose source is down: serving %v, a live worker %v, %q", serving, live, why)
	}
	if view.ToolsVersion() == version {
		t.Error("a source going down left ToolsVersion as it was: model views would keep its tools")
	}
	if ok, _ := view.Serving(local); !ok {
		t.Error("a tool of no source is unavailable while another source is down")
	}
	if findable(t, view, def, false) || !findable(t, view, def, true) || !findable(t, view, local, false) {
		t.Error("a search finds a tool of a source that is down, or misses one of no source")
	}
	// A second worker that reaches the source serves the tool again.
	if err := store.Heartbeat(ctx, &messages.WorkerHeartbeat{Namespace: "maps", WorkerID: "w2", IntervalMS: 60_000}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, view, "the second worker", func() bool { ok, _ := view.Serving(def); return ok })
	if !findable(t, view, def, false) {
		t.Error("a search misses a tool whose source one of two workers reaches")
	}
	if err := store.RemoveWorker(ctx, "maps", "w2"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, view, "the second worker gone", func() bool { ok, _ := view.Serving(def); return !ok })
	if err := store.SetDisabled(ctx, "maps", "locate", true, messages.DisabledState{Reason: "testing"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, view, "the tool disabled", func() bool { off, _ := view.Disabled(local.ToolName()); return off })
	if findable(t, view, local, false) || findable(t, view, local, true) {
		t.Error("a search finds a disabled tool")
	}
	if e := view.Entry(&catalog.Tool{Definition: *local}); !e.Disabled || e.Reason != "testing" || !e.Available {
		t.Errorf("entry of the disabled tool %+v", e)
	}
	entry := view.Entry(&catalog.Tool{Definition: *def})
	if entry.Available || entry.Unavailable == "" {
		t.Errorf("entry %+v", entry)
	}

	if err := store.RemoveWorker(ctx, "maps", "w1"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, view, "the worker gone", func() bool { return !view.Available("maps") })
	if n, ok := view.LiveWorkers()["maps"]; !ok || n != 0 {
		t.Errorf("the namespace of a stored tool: %d live workers (listed %v), want 0", n, ok)
	}
}

// Follow yields the changes made after it returned, each once: tools
// added, changed and removed, switches, and workers joining and leaving,
// the last also when their heartbeats stop.
func TestFollowYieldsChanges(t *testing.T) {
	t.Parallel()
	store, _, kv := catalogOf(t)
	ctx := testenv.Context(t)
	if err := store.PutTool(ctx, tool("maps", "old", "Old.")); err != nil {
		t.Fatal(err)
	}
	followCtx, stop := context.WithCancel(ctx)
	changes, err := catalog.Follow(followCtx, kv)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan messages.CatalogChange)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for c, err := range changes {
			if err != nil {
				t.Errorf("follow: %v", err)
				return
			}
			select {
			case got <- c:
			case <-followCtx.Done():
				return
			}
		}
	}()
	defer wg.Wait()
	defer stop()
	next := func(kind messages.CatalogChangeKind) messages.CatalogChange {
		t.Helper()
		select {
		case c := <-got:
			if c.Kind != kind || c.Namespace != "maps" || c.Time.IsZero() {
				t.Fatalf("change %+v, want %s in maps", c, kind)
			}
			return c
		case <-time.After(30 * time.Second):
			t.Fatalf("no %s change", kind)
			panic("unreachable")
		}
	}
	put := func(def *messages.ToolDefinition) {
		t.Helper()
		if err := store.PutTool(ctx, def); err != nil {
			t.Fatal(err)
		}
	}

	put(tool("maps", "route", "Routes."))
	if c := next(messages.CatalogToolAdded); c.Tool != "maps-route" || c.Definition == nil || c.Definition.Description != "Routes." {
		t.Errorf("added: %+v", c)
	}
	put(tool("maps", "route", "Routes by road."))
	if c := next(messages.CatalogToolChanged); c.Definition.Description != "Routes by road." {
		t.Errorf("changed: %+v", c)
	}
	put(tool("maps", "old", "Older."))
	if c := next(messages.CatalogToolChanged); c.Tool != "maps-old" {
		t.Errorf("a tool stored before Follow, changed: %+v", c)
	}
	if err := store.DeleteTool(ctx, messages.ToolName{Namespace: "maps", Method: "route"}); err != nil {
		t.Fatal(err)
	}
	if c := next(messages.CatalogToolRemoved); c.Tool != "maps-route" {
		t.Errorf("removed: %+v", c)
	}
	if err := store.SetDisabled(ctx, "maps", "", true, messages.DisabledState{Reason: "maintenance", By: "ops"}); err != nil {
		t.Fatal(err)
	}
	if c := next(messages.CatalogDisabled); c.Tool != "" || c.Reason != "maintenance" || c.By != "ops" {
		t.Errorf("disabled: %+v", c)
	}
	if err := store.SetDisabled(ctx, "maps", "", false, messages.DisabledState{}); err != nil {
		t.Fatal(err)
	}
	next(messages.CatalogEnabled)

	hb := &messages.WorkerHeartbeat{Namespace: "maps", WorkerID: "w1", IntervalMS: 60_000}
	for range 2 { // the second heartbeat is no news
		if err := store.Heartbeat(ctx, hb); err != nil {
			t.Fatal(err)
		}
	}
	if c := next(messages.CatalogWorkerJoined); c.WorkerID != "w1" {
		t.Errorf("joined: %+v", c)
	}
	if err := store.RemoveWorker(ctx, "maps", "w1"); err != nil {
		t.Fatal(err)
	}
	if c := next(messages.CatalogWorkerLeft); c.WorkerID != "w1" {
		t.Errorf("left: %+v", c)
	}

	// A worker whose heartbeats stop leaves three intervals after its last.
	if err := store.Heartbeat(ctx, &messages.WorkerHeartbeat{Namespace: "maps", WorkerID: "w2", IntervalMS: 1000}); err != nil {
		t.Fatal(err)
	}
	if c := next(messages.CatalogWorkerJoined); c.WorkerID != "w2" {
		t.Errorf("joined: %+v", c)
	}
	if c := next(messages.CatalogWorkerLeft); c.WorkerID != "w2" {
		t.Errorf("left by silence: %+v", c)
	}
}

// Sync returns once the view holds every write the bucket had when it was
// called: the last of a burst of writes made through another connection,
// which the watch delivers after all the others, is in the view at once.
func TestSyncWaitsForTheBucketsLastWrite(t *testing.T) {
	t.Parallel()
	store, view, kv := catalogOf(t)
	ctx := testenv.Context(t)
	// Written through the bucket's own connection, which the view's watch
	// shares; the view learns of them only as the watch delivers them.
	for i := range 500 {
		if _, err := kv.PutString(ctx, fmt.Sprintf("workers.busy.w%d", i), `{"worker_id":"w","namespace":"busy","interval_ms":60000}`); err != nil {
			t.Fatal(err)
		}
	}
	last := tool("late", "tool", "Written last.")
	if err := store.PutTool(ctx, last); err != nil {
		t.Fatal(err)
	}
	if err := view.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := view.Lookup(last.Name); !ok {
		t.Fatal("Sync returned before the view held the bucket's last write")
	}
	// A context that ends first ends the wait with its error.
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := view.Sync(done); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sync with an ended context: %v", err)
	}
}
