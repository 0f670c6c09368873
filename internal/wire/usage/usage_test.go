package usage_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/wire/usage"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/search"
)

func TestOutcomeWeight(t *testing.T) {
	for _, c := range []struct {
		res  *messages.CallResult
		want float64
	}{
		{&messages.CallResult{Status: messages.StateCompleted}, 1},
		{&messages.CallResult{Status: messages.StateCompleted, IsError: true}, 0.5},
		{&messages.CallResult{Status: messages.StateFailed, IsError: true}, 0.5},
		{&messages.CallResult{Status: messages.StateTimedOut, IsError: true}, 0.5},
		{&messages.CallResult{Status: messages.StateCancelled, IsError: true}, 0},
		{&messages.CallResult{Status: messages.StateDenied, IsError: true}, 0},
		{nil, 0},
	} {
		if got := usage.OutcomeWeight(c.res); got != c.want {
			t.Errorf("usage.OutcomeWeight(%+v) = %v; want %v", c.res, got, c.want)
		}
	}
}

func TestKeys(t *testing.T) {
	tool := messages.ToolName{Namespace: "media", Method: "view_image"}
	key := usage.EvidenceKey(tool, "alice")
	if got, ok := usage.ParseEvidenceKey(key); !ok || got != tool {
		t.Errorf("usage.ParseEvidenceKey(%s) = %v, %v", key, got, ok)
	}
	for _, bad := range []string{"turns." + usage.Token("turn", "t"), "tools.media-view_image", "tools.media-view_image.short", usage.SettingsKey, "tools.bad name." + usage.Token("agent", "a")} {
		if _, ok := usage.ParseEvidenceKey(bad); ok {
			t.Errorf("usage.ParseEvidenceKey(%q) took it", bad)
		}
	}
	if usage.Token("agent", "a") == usage.Token("user", "a") || usage.Token("agent", "a") == usage.Token("agent", "b") || len(usage.Token("turn", "t")) != 32 {
		t.Error("tokens of different names or kinds collide, or are not 32 digits")
	}
}

// bucket returns a usage bucket on a real server, and a watch of it.
func bucket(t *testing.T) (jetstream.KeyValue, jetstream.KeyWatcher) {
	t.Helper()
	srv := testenv.Server(t)
	js, err := jetstream.New(testenv.Connect(t, srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t)
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "usage_test", History: 1, LimitMarkerTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop() })
	return kv, w
}

// next applies the watch's entries to f until one changes a learned field.
func next(t *testing.T, w jetstream.KeyWatcher, f *usage.Follower) {
	t.Helper()
	for {
		select {
		case e := <-w.Updates():
			if f.Apply(e) {
				return
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no entry changed a learned field")
		}
	}
}

func put(t *testing.T, kv jetstream.KeyValue, key string, v any) {
	t.Helper()
	data, ok := v.([]byte)
	if !ok {
		var err error
		if data, err = json.Marshal(v); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kv.Put(context.Background(), key, data); err != nil {
		t.Fatal(err)
	}
}

// The follower folds each tool's records as FoldUsage does, says which
// tools changed, forgets deleted records, ignores what is no evidence,
// and clears every learned field while learning is off.
func TestFollower(t *testing.T) {
	kv, w := bucket(t)
	f := usage.NewFollower(search.LearnConfig{})
	view := messages.ToolName{Namespace: "media", Method: "view_image"}
	edit := messages.ToolName{Namespace: "fs", Method: "edit"}
	now := time.Now().UTC()
	record := func(user string, terms ...string) search.UsageRecord {
		var r search.UsageRecord
		r.Add(terms, 1, now, search.LearnConfig{})
		r.User = user
		return r
	}
	a, b := record("u1", "pictur", "show"), record("u2", "pictur")
	put(t, kv, usage.EvidenceKey(view, "a"), a)
	next(t, w, f)
	put(t, kv, usage.EvidenceKey(view, "b"), b)
	next(t, w, f)
	put(t, kv, usage.TurnKey("t1"), usage.TurnRecord{Agent: usage.Token("agent", "a")})
	put(t, kv, usage.EvidenceKey(edit, "a"), []byte("not json"))
	put(t, kv, usage.EvidenceKey(edit, "b"), record("u1", "edit"))
	next(t, w, f)
	changes := f.Changes()
	if want := search.FoldUsage([]search.UsageRecord{a, b}, search.LearnConfig{}); len(changes) != 2 || !slices.Equal(changes[view].Terms, want) || len(want) == 0 || changes[view].Teachers != 2 {
		t.Fatalf("changes %v; want view_image's %v, taught by two users, and edit's", changes, want)
	}
	if got := changes[edit]; len(got.Terms) != 1 || got.Terms[0].Term != "edit" || got.Teachers != 1 {
		t.Errorf("edit learned %v: the damaged record should count as none", got)
	}
	if tools, records := f.Records(); tools != 2 || records != 3 {
		t.Errorf("%d tools and %d records", tools, records)
	}
	if again := f.Changes(); len(again) != 0 {
		t.Errorf("changes without a change: %v", again)
	}

	if err := kv.Delete(context.Background(), usage.EvidenceKey(view, "a")); err != nil {
		t.Fatal(err)
	}
	next(t, w, f)
	if got := f.Changes()[view]; !slices.Equal(got.Terms, search.FoldUsage([]search.UsageRecord{b}, search.LearnConfig{})) || got.Teachers != 1 {
		t.Errorf("after a deletion, view_image learned %v", got)
	}

	put(t, kv, usage.SettingsKey, usage.Settings{Disabled: true, Reason: "test"})
	next(t, w, f)
	off := f.Changes()
	if len(off) != 2 || len(off[view].Terms) != 0 || len(off[edit].Terms) != 0 || !f.Disabled() {
		t.Errorf("learning off: changes %v; want every learned field cleared", off)
	}
	put(t, kv, usage.EvidenceKey(edit, "c"), record("u3", "edit"))
	next(t, w, f)
	if got := f.Changes()[edit]; len(got.Terms) != 0 {
		t.Errorf("learned %v while learning is off", got)
	}
	put(t, kv, usage.SettingsKey, usage.Settings{})
	next(t, w, f)
	if on := f.Changes(); len(on[view].Terms) == 0 || len(on[edit].Terms) == 0 {
		t.Errorf("learning on again: changes %v", on)
	}
}
