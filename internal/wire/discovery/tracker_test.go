package discovery_test

import (
	"slices"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/wire/discovery"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/search"
)

func newTracker(t testing.TB, b *bundle, cfg search.Config) *discovery.Tracker {
	t.Helper()
	tr, err := discovery.NewTracker(b.view, cfg, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func mustSync(t testing.TB, tr *discovery.Tracker) bool {
	t.Helper()
	changed, err := tr.Sync()
	if err != nil {
		t.Fatal(err)
	}
	return changed
}

// TestTrackerFollowsTheView: the index holds exactly the enabled tools, at
// their latest definitions, whatever switch disabled the others.
func TestTrackerFollowsTheView(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.put(t,
		tool("files", "read_file", "Reads a file from the disk."),
		tool("files", "write_file", "Writes a file to the disk."),
		tool("web", "fetch_page", "Downloads a web page."),
	)
	tr := newTracker(t, b, search.Config{})
	if !mustSync(t, tr) || tr.Len() != 3 {
		t.Fatalf("first sync: %d tools", tr.Len())
	}
	if mustSync(t, tr) {
		t.Fatal("a sync without a catalog change changed the index")
	}
	before := tr.Fingerprint()

	b.disable(t, "files", "write_file")
	mustSync(t, tr)
	if got := top(t, tr.Index(), "", 10); !slices.Equal(got, []string{"files-read_file", "web-fetch_page"}) {
		t.Fatalf("with write_file disabled: %v", got)
	}
	b.disable(t, "web", "")
	mustSync(t, tr)
	if got := top(t, tr.Index(), "", 10); !slices.Equal(got, []string{"files-read_file"}) {
		t.Fatalf("with namespace web disabled too: %v", got)
	}

	b.put(t, tool("files", "read_file", "Opens a document and returns its text."))
	mustSync(t, tr)
	if got := top(t, tr.Index(), "document text", 1); !slices.Equal(got, []string{"files-read_file"}) {
		t.Fatalf("the new description is not searched: %v", got)
	}
	b.remove(t, messages.ToolName{Namespace: "files", Method: "read_file"})
	mustSync(t, tr)
	if tr.Len() != 0 || tr.Index().Len() != 0 {
		t.Fatalf("after the deletion: %d tools", tr.Index().Len())
	}
	if tr.Fingerprint() == before {
		t.Fatal("the fingerprint did not change with the index")
	}
}

// TestTrackerFingerprint: two trackers of one catalog agree; other search
// parameters make another fingerprint.
func TestTrackerFingerprint(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.put(t, tool("files", "read_file", "Reads a file."), tool("web", "fetch_page", "Downloads a web page."))
	one, two := newTracker(t, b, search.Config{}), newTracker(t, b, search.DefaultConfig())
	mustSync(t, one)
	mustSync(t, two)
	if one.Fingerprint() != two.Fingerprint() {
		t.Fatal("two trackers of one catalog differ")
	}
	cfg := search.DefaultConfig()
	cfg.K1 = 1.2
	other := newTracker(t, b, cfg)
	mustSync(t, other)
	if other.Fingerprint() == one.Fingerprint() {
		t.Fatal("other parameters, same fingerprint")
	}
	if one.CatalogRevision() == 0 {
		t.Fatal("no catalog revision")
	}
}

// TestTrackerAdoptKeepsNewerChanges adopts a snapshot older than the view:
// after Adopt the index holds the view's state, not the snapshot's.
func TestTrackerAdoptKeepsNewerChanges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.put(t,
		tool("files", "read_file", "Reads a file from the disk."),
		tool("files", "write_file", "Writes a file to the disk."),
		tool("web", "fetch_page", "Downloads a web page."),
	)
	old := newTracker(t, b, search.Config{})
	mustSync(t, old)
	stale, err := discovery.DecodeSnapshot(old.Snapshot().Encode())
	if err != nil {
		t.Fatal(err)
	}

	// Since the snapshot: a new tool, a new description, a disabled tool, a deleted one.
	b.put(t, tool("mail", "send_mail", "Sends an email."), tool("files", "read_file", "Opens a document."))
	b.disable(t, "files", "write_file")
	b.remove(t, messages.ToolName{Namespace: "web", Method: "fetch_page"})

	current := newTracker(t, b, search.Config{})
	mustSync(t, current)
	if err := current.Adopt(stale); err != nil {
		t.Fatal(err)
	}
	if current.Index() != stale.Index {
		t.Fatal("Adopt did not take the snapshot's index")
	}
	if got := top(t, current.Index(), "", 10); !slices.Equal(got, []string{"files-read_file", "mail-send_mail"}) {
		t.Fatalf("after adopting the stale snapshot: %v", got)
	}
	if got := top(t, current.Index(), "document", 10); !slices.Equal(got, []string{"files-read_file"}) {
		t.Fatalf("the new description is lost: %v", got)
	}
	fresh := newTracker(t, b, search.Config{})
	mustSync(t, fresh)
	if current.Fingerprint() != fresh.Fingerprint() {
		t.Fatal("the adopted index differs from one built from the view")
	}
	if mustSync(t, current) {
		t.Fatal("a sync right after Adopt found changes")
	}
}
