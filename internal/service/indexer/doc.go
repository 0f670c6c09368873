// Package indexer is the service behind cmd/indexer: it follows the catalog
// through a catalog.View, keeps a search index of its enabled tools up to
// date change by change (a discovery.Tracker), and stores it in the index
// bucket for coordinators to load (see package discovery for the layout).
//
// Any number of indexers may run. One writes: the holder of a lease kept
// under discovery.LeaseKey by compare-and-set (see lease for the timing);
// the others follow the catalog too, so that a standby that takes over has
// its index ready. The writer stores a version at most every WriteInterval
// while changes keep coming, and none when the stored version already
// answers like its index (equal fingerprints), so a restart or a takeover
// rewrites nothing. Each version is cut into chunks created under fresh
// keys; then the manifest moves to it by compare-and-set. Chunks of a
// superseded version are deleted once it has been superseded for
// GracePeriod, so that a reader that read the previous manifest finds its
// chunks.
package indexer
