package discovery

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"

	"github.com/toolbus/toolbus/pkg/catalog"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/search"
)

// buildThreshold is the number of missing tools above which an empty index
// is built in one go (tokenizing on every CPU) rather than filled by upserts.
const buildThreshold = 64

// Tracker keeps a search index equal to the enabled tools of a catalog
// view: every tool the view holds that is not disabled, itself or through
// its namespace, at the revision the view holds. Worker liveness plays no
// part: a namespace whose workers are all gone keeps its tools indexed, so
// that workers coming and going do not churn the index, and readers filter
// on liveness when they search.
//
// A Tracker is used by one goroutine at a time; its index may be searched
// from any number of goroutines meanwhile.
type Tracker struct {
	view *catalog.View
	cfg  search.Config
	log  *slog.Logger

	ix        *search.Index
	revisions map[string]uint64 // canonical name → catalog revision indexed
	// learned holds the learned fields set (SetLearned), to set them again
	// on an index built anew.
	learned map[messages.ToolName]search.Learned
	// rejected holds the revisions of definitions the index refused (an
	// invalid name), so that each is reported once.
	rejected map[string]uint64

	synced       bool
	toolsVersion uint64
	fingerprint  string // "" when it must be recomputed
}

// NewTracker returns a tracker of the view with an empty index; Sync fills it.
func NewTracker(view *catalog.View, cfg search.Config, log *slog.Logger) (*Tracker, error) {
	if view == nil {
		return nil, errors.New("discovery tracker: the catalog view is required")
	}
	if log == nil {
		log = slog.Default()
	}
	ix, err := search.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("discovery tracker: %w", err)
	}
	return &Tracker{view: view, cfg: ix.Config(), log: log, ix: ix, revisions: map[string]uint64{}, rejected: map[string]uint64{}, learned: map[messages.ToolName]search.Learned{}}, nil
}

// Index returns the index. It changes in place with Sync; Sync replaces it
// when it builds a new one and Adopt when it adopts a loaded one.
func (t *Tracker) Index() *search.Index { return t.ix }

// Len returns the number of tools indexed.
func (t *Tracker) Len() int { return len(t.revisions) }

// Snapshot returns the index with its revisions, sharing them: encode it
// before the next Sync or Adopt.
func (t *Tracker) Snapshot() *Snapshot { return &Snapshot{Index: t.ix, Revisions: t.revisions} }

// CatalogRevision returns the highest catalog revision among the indexed definitions.
func (t *Tracker) CatalogRevision() uint64 {
	var highest uint64
	for _, r := range t.revisions {
		highest = max(highest, r)
	}
	return highest
}

// Sync brings the index up to date with the view and reports whether it
// changed. It costs a pass over the view's tools when a tool or switch
// changed since the last Sync, and nothing otherwise.
func (t *Tracker) Sync() (bool, error) {
	version := t.view.ToolsVersion()
	if t.synced && version == t.toolsVersion {
		return false, nil
	}
	changed, err := t.reconcile(t.ix, t.revisions, true)
	if err != nil {
		return changed, err
	}
	t.synced, t.toolsVersion = true, version
	return changed, nil
}

// Adopt makes a loaded snapshot the tracker's index, after bringing it up
// to date with the view: whatever the snapshot's age, the index then holds
// every change the view has seen, so adopting an older stored version
// loses nothing that Sync applied before. The snapshot must not be used
// elsewhere afterwards.
func (t *Tracker) Adopt(s *Snapshot) error {
	if s == nil || s.Index == nil || s.Revisions == nil {
		return errors.New("discovery tracker: adopt an empty snapshot")
	}
	version := t.view.ToolsVersion()
	if _, err := t.reconcile(s.Index, s.Revisions, false); err != nil {
		return err
	}
	t.ix, t.revisions, t.cfg = s.Index, s.Revisions, s.Index.Config()
	t.synced, t.toolsVersion, t.fingerprint = true, version, ""
	return nil
}

// reconcile edits ix and revisions to match the view. With mayBuild, an
// empty index that lacks many tools is replaced by a freshly built one.
func (t *Tracker) reconcile(ix *search.Index, revisions map[string]uint64, mayBuild bool) (bool, error) {
	tools := t.view.Tools()
	want := make(map[string]struct{}, len(tools))
	var upserts []messages.ToolDefinition
	for _, tool := range tools {
		def := &tool.Definition
		if off, _ := t.view.Disabled(def.ToolName()); off {
			continue
		}
		want[def.Name] = struct{}{}
		if r, ok := revisions[def.Name]; ok && r == tool.Revision {
			continue
		}
		if r, ok := t.rejected[def.Name]; ok && r == tool.Revision {
			continue
		}
		upserts = append(upserts, *def)
		revisions[def.Name] = tool.Revision
	}
	var removals []messages.ToolName
	for name := range revisions {
		if _, ok := want[name]; !ok {
			n, _ := messages.ParseToolName(name)
			removals = append(removals, n)
			delete(revisions, name)
		}
	}
	for name := range t.rejected {
		if _, ok := want[name]; !ok {
			delete(t.rejected, name)
		}
	}
	if len(upserts) == 0 && len(removals) == 0 {
		return false, nil
	}
	t.fingerprint = ""
	ix.Remove(removals...)
	if mayBuild && ix.Len() == 0 && len(upserts) > buildThreshold {
		if built, err := search.Build(t.cfg, upserts); err == nil {
			for name, learned := range t.learned {
				if _, err := built.SetLearnedBy(name, learned.Terms, learned.Teachers); err != nil {
					t.log.Warn("discovery: learned terms left out", "tool", name, "error", err)
				}
			}
			t.ix = built
			return true, nil
		}
		// A definition the index refuses: the upserts below find which.
	}
	if err := ix.Upsert(upserts...); err != nil {
		for i := range upserts {
			def := &upserts[i]
			if err := ix.Upsert(*def); err != nil {
				t.log.Warn("discovery: tool left out of the index", "tool", def.Name, "error", err)
				t.rejected[def.Name] = revisions[def.Name]
				delete(revisions, def.Name)
			}
		}
	}
	return true, nil
}

// SetLearned sets a tool's learned field and its teachers
// (search.Index.SetLearnedBy), for the tool's definitions to come too, and
// reports whether the index changed.
func (t *Tracker) SetLearned(name messages.ToolName, learned search.Learned) (bool, error) {
	changed, err := t.ix.SetLearnedBy(name, learned.Terms, learned.Teachers)
	if err != nil {
		return false, err
	}
	if len(learned.Terms) == 0 {
		delete(t.learned, name)
	} else {
		t.learned[name] = learned
	}
	if changed {
		t.fingerprint = ""
	}
	return changed, nil
}

// Fingerprint identifies what the index answers: the SHA-256 of the search
// parameters, of the indexed tools' names and catalog revisions, and of
// their learned fields. Two indexes with one fingerprint answer every
// query alike, since a catalog revision names one definition.
func (t *Tracker) Fingerprint() string {
	if t.fingerprint == "" {
		t.fingerprint = fingerprint(t.cfg, t.revisions, t.ix)
	}
	return t.fingerprint
}

func fingerprint(cfg search.Config, revisions map[string]uint64, ix *search.Index) string {
	h := sha256.New()
	var b []byte
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(cfg.K1))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(cfg.Delta))
	for _, p := range cfg.Fields {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(p.Weight))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(p.B))
	}
	h.Write(b)
	for _, name := range slices.Sorted(maps.Keys(revisions)) {
		b = b[:0]
		b = binary.AppendUvarint(b, uint64(len(name)))
		b = append(b, name...)
		b = binary.AppendUvarint(b, revisions[name])
		h.Write(b)
	}
	// Learned fields come after a byte that begins no name's length.
	first := true
	ix.EachLearned(func(name string, terms []search.LearnedTerm, teachers int) {
		if first {
			h.Write([]byte{0xff})
			first = false
		}
		b = b[:0]
		b = binary.AppendUvarint(b, uint64(len(name)))
		b = append(b, name...)
		b = binary.AppendUvarint(b, uint64(len(terms)))
		for _, lt := range terms {
			b = binary.AppendUvarint(b, uint64(len(lt.Term)))
			b = append(b, lt.Term...)
			b = append(b, lt.Count)
		}
		b = binary.AppendUvarint(b, uint64(teachers))
		h.Write(b)
	})
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}
