package messages

import "time"

// CatalogChangeKind says what changed in the catalog.
type CatalogChangeKind string

// The kinds of catalog change.
const (
	CatalogToolAdded    CatalogChangeKind = "tool_added"
	CatalogToolChanged  CatalogChangeKind = "tool_changed"
	CatalogToolRemoved  CatalogChangeKind = "tool_removed"
	CatalogDisabled     CatalogChangeKind = "disabled"
	CatalogEnabled      CatalogChangeKind = "enabled"
	CatalogWorkerJoined CatalogChangeKind = "worker_joined"
	CatalogWorkerLeft   CatalogChangeKind = "worker_left"
)

// CatalogChange is one change of the catalog, as a client follows them
// (client.CatalogChanges): a tool added, changed or removed; a tool or a
// namespace disabled or enabled; a worker joining or leaving a namespace.
type CatalogChange struct {
	Kind      CatalogChangeKind `json:"kind"`
	Namespace string            `json:"namespace"`
	// Tool is the tool's name (namespace-method); empty for a change of a
	// whole namespace or of a worker.
	Tool string `json:"tool,omitempty"`
	// Definition is the tool as added or changed.
	Definition *ToolDefinition `json:"definition,omitempty"`
	// Reason and By say why and by whom a tool or namespace was disabled.
	Reason string `json:"reason,omitempty"`
	By     string `json:"by,omitempty"`
	// WorkerID names the worker that joined or left.
	WorkerID string `json:"worker_id,omitempty"`
	// Time is when the change was stored (a worker's leaving: when it was
	// noticed, three heartbeat intervals after its last one).
	Time time.Time `json:"time"`
}
