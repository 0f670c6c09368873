// Package exposure decides which tool schemas a model sees on one model
// iteration of an agent's turn.
//
// A [Workspace] holds bundles (named sets of match rules) and agents (the
// bundles they use plus rules of their own), usually loaded from YAML files
// with [LoadWorkspace]. Resolution has two steps:
//
//  1. Admission ([Workspace.Admit]): every rule of the agent is expanded
//     against a [Catalog] snapshot. A rule's exclude patterns remove tools
//     from that rule only, duplicates collapse by canonical name, retention
//     flags OR together, tier precedence is critical > onDemand > base, and
//     approval and async settings follow the last rule that has them. The
//     result depends only on (workspace, agent, catalog version), so a
//     [Resolver] caches it.
//  2. Visibility ([Admission.Visible]): for one [Iteration] (intake
//     selection, clarification turn, caller choices, discovery pages,
//     activations) it picks the admitted tools whose schemas the model sees,
//     plus tools that discovery or activation promoted from outside every
//     bundle. This step is cheap and runs on every model iteration.
//
// Tiers decide visibility, never access: an onDemand tool is admitted and can
// be found by discovery; its schema is only withheld until something exact
// promotes it. Exposure metadata lives beside the catalog's definitions in
// [Tool]; the definitions themselves are shared and never modified, so the
// schemas serialised for a model carry none of it.
//
// The package is pure: it reads an fs.FS and plain values and imports no
// NATS package.
package exposure
