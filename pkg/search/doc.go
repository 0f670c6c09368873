// Package search is Toolbus discovery: a BM25F index of tool definitions
// that finds the tools matching a request in natural language, or a tool's
// name, in well under a millisecond for catalogs of thousands of tools.
//
// Each tool is indexed in fields (see Field): the words of its name, its
// namespace, its description, the names and descriptions of its input
// schema's properties (nested ones too), its tags and its search hint. Each
// field has its own weight and length normalisation (Config); a query term
// adds the tool's weighted, normalised frequencies over all fields before
// BM25 saturation, plus a BM25+ lower bound. Tokenize turns text into terms:
// it splits snake_case, camelCase, kebab-case, dotted names and digit runs,
// folds case, drops English stop words, stems with Porter's algorithm, and
// turns Chinese, Japanese and Korean text into character bigrams and
// unigrams.
//
// A query that is a tool's name (canonical, method or original name, in any
// spelling messages.ParseToolName accepts, ignoring case) ranks that tool
// first. Queries filter by namespace, tags and an allow predicate (what the
// agent may see), and page through hits in a deterministic order.
//
// An Index is updated in place (Upsert, Remove) in microseconds, while
// searches go on. Encode writes it in a compact, versioned binary form that
// Decode reads back into an index that answers identically; the indexer
// stores that form and coordinators load it. The package is pure: it does
// no I/O and imports no NATS package.
package search
