package setup

import (
	"strings"

	"github.com/nats-io/jwt/v2"
)

// The grants below are those of deploy/nats/users.inc, role by role, for
// the default prefix "toolbus"; docs/security.md says why each is there.
// TestGrantsAreThoseOfUsersInc holds them to the file. For another
// prefix every "toolbus" and "TOOLBUS" in a subject is replaced (see
// grants.subject).

// coordinatorPublish is what the coordinator may publish: it creates,
// updates and reads its streams and buckets, serves the API, records
// calls, results and audit, creates the namespaces' consumers and their
// results stores, and serves the built-in tools as a worker of namespace
// llm_tools. It may not purge or delete a stream.
var coordinatorPublish = []string{
	"toolbus.>",
	"$JS.API.INFO",
	"$JS.API.STREAM.INFO.TOOLBUS_EVENTS", "$JS.API.STREAM.CREATE.TOOLBUS_EVENTS", "$JS.API.STREAM.UPDATE.TOOLBUS_EVENTS",
	"$JS.API.STREAM.INFO.TOOLBUS_AUDIT", "$JS.API.STREAM.CREATE.TOOLBUS_AUDIT", "$JS.API.STREAM.UPDATE.TOOLBUS_AUDIT",
	"$JS.API.STREAM.INFO.KV_toolbus_catalog", "$JS.API.STREAM.CREATE.KV_toolbus_catalog", "$JS.API.STREAM.UPDATE.KV_toolbus_catalog",
	"$JS.API.STREAM.INFO.KV_toolbus_turns", "$JS.API.STREAM.CREATE.KV_toolbus_turns", "$JS.API.STREAM.UPDATE.KV_toolbus_turns",
	"$JS.API.STREAM.INFO.KV_toolbus_approvals", "$JS.API.STREAM.CREATE.KV_toolbus_approvals", "$JS.API.STREAM.UPDATE.KV_toolbus_approvals",
	"$JS.API.STREAM.INFO.KV_toolbus_index", "$JS.API.STREAM.CREATE.KV_toolbus_index", "$JS.API.STREAM.UPDATE.KV_toolbus_index",
	"$JS.API.DIRECT.GET.TOOLBUS_EVENTS",
	"$JS.API.STREAM.MSG.GET.TOOLBUS_EVENTS",
	"$JS.API.DIRECT.GET.TOOLBUS_EVENTS.>",
	"$JS.API.CONSUMER.CREATE.TOOLBUS_EVENTS.>",
	"$JS.API.CONSUMER.MSG.NEXT.TOOLBUS_EVENTS.>",
	"$JS.API.CONSUMER.INFO.TOOLBUS_EVENTS.>",
	"$JS.API.CONSUMER.DELETE.TOOLBUS_EVENTS.>",
	"$JS.API.CONSUMER.NAMES.TOOLBUS_EVENTS",
	"$JS.API.CONSUMER.CREATE.TOOLBUS_AUDIT.>",
	"$JS.API.CONSUMER.MSG.NEXT.TOOLBUS_AUDIT.>",
	"$JS.API.CONSUMER.DELETE.TOOLBUS_AUDIT.>",
	"$JS.API.DIRECT.GET.KV_toolbus_catalog",
	"$JS.API.DIRECT.GET.KV_toolbus_catalog.>", "$JS.API.CONSUMER.CREATE.KV_toolbus_catalog.>", "$JS.API.CONSUMER.DELETE.KV_toolbus_catalog.>",
	"$JS.API.DIRECT.GET.KV_toolbus_turns.>", "$JS.API.CONSUMER.CREATE.KV_toolbus_turns.>", "$JS.API.CONSUMER.DELETE.KV_toolbus_turns.>",
	"$JS.API.DIRECT.GET.KV_toolbus_approvals.>", "$JS.API.CONSUMER.CREATE.KV_toolbus_approvals.>", "$JS.API.CONSUMER.DELETE.KV_toolbus_approvals.>",
	"$JS.API.DIRECT.GET.KV_toolbus_index.>", "$JS.API.CONSUMER.CREATE.KV_toolbus_index.>", "$JS.API.CONSUMER.DELETE.KV_toolbus_index.>",
	"$KV.toolbus_catalog.>", "$KV.toolbus_turns.>", "$KV.toolbus_approvals.>",
	"$JS.ACK.TOOLBUS_EVENTS.ns_llm_tools.>",
	"$JS.API.STREAM.INFO.*", "$JS.API.STREAM.CREATE.*",
	"$JS.API.STREAM.INFO.OBJ_toolbus_results_llm_tools", "$JS.API.STREAM.CREATE.OBJ_toolbus_results_llm_tools", "$JS.API.STREAM.UPDATE.OBJ_toolbus_results_llm_tools",
	"$O.toolbus_results_llm_tools.>",
	"$JS.API.DIRECT.GET.OBJ_toolbus_results_llm_tools.>",
	"$JS.API.DIRECT.GET.*", "$JS.API.DIRECT.GET.*.$O.*.M.*",
	"$JS.FC.>",
	"$SRV.>",
	"_INBOX.>",
	"_INBOX_coordinator.>",
	"_R_.>",
}

var coordinatorSubscribe = []string{
	"toolbus.api.>", "toolbus.consumers.*", "toolbus.events.>", "toolbus.cancel.llm_tools.*", "$SRV.>", "_INBOX_coordinator.>",
	"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.TOOLBUS_EVENTS.*",
}

// agentPublish is what an agent's or an operator's user may send: the
// coordinator's API, and two JetStream requests the server answers for
// an account without JetStream.
var agentPublish = []string{"toolbus.api.>", "$JS.API.INFO", "$JS.API.CONSUMER.CREATE.>"}

// export is one export of TOOLBUS; restricted ones are for AGENTS only.
type export struct {
	subject    string
	stream     bool
	response   jwt.ResponseType
	restricted bool
}

var toolbusExports = []export{
	{subject: "toolbus.api.>", response: jwt.ResponseTypeSingleton, restricted: true},
	{subject: "toolbus.results.>", stream: true, restricted: true},
	{subject: "$JS.API.INFO"},
	{subject: "$JS.API.STREAM.INFO.*"},
	{subject: "$JS.API.CONSUMER.INFO.TOOLBUS_EVENTS.*"},
	{subject: "$JS.API.CONSUMER.MSG.NEXT.TOOLBUS_EVENTS.*", response: jwt.ResponseTypeStream},
	{subject: "$JS.ACK.TOOLBUS_EVENTS.>"},
	{subject: "$JS.API.DIRECT.GET.TOOLBUS_EVENTS.>"},
	{subject: "$JS.API.DIRECT.GET.KV_toolbus_catalog.>"},
	{subject: "$JS.API.DIRECT.GET.*.$O.>"},
	{subject: "toolbus.events.>"},
	{subject: "toolbus.consumers.*"},
	{subject: "$KV.toolbus_catalog.>"},
	{subject: "$O.>"},
	{subject: "toolbus.cancel.>", stream: true},
	{subject: "$JS.API.DIRECT.GET.KV_toolbus_catalog", response: jwt.ResponseTypeStream},
	{subject: "$JS.API.DIRECT.GET.KV_toolbus_index", response: jwt.ResponseTypeStream},
	{subject: "$JS.API.DIRECT.GET.KV_toolbus_index.>"},
	{subject: "$KV.toolbus_index.>"},
	{subject: "toolbus.kv.>", stream: true},
	{subject: "$JS.API.DIRECT.GET.TOOLBUS_AUDIT", response: jwt.ResponseTypeStream},
	{subject: "$JS.API.DIRECT.GET.TOOLBUS_AUDIT.>"},
}

// agentsImports are what AGENTS imports of TOOLBUS: the API, shared so
// that the server writes Nats-Request-Info on every request, and the
// routed results.
var agentsImports = []importOf{
	{subject: "toolbus.api.>", share: true},
	{subject: "toolbus.results.>", stream: true},
}

// importOf is one import of TOOLBUS's exports.
type importOf struct {
	subject string
	stream  bool
	share   bool
}

// services and streams make import lists.
func services(subjects ...string) []importOf {
	out := make([]importOf, len(subjects))
	for i, s := range subjects {
		out[i] = importOf{subject: s}
	}
	return out
}

func streams(subjects ...string) []importOf {
	out := make([]importOf, len(subjects))
	for i, s := range subjects {
		out[i] = importOf{subject: s, stream: true}
	}
	return out
}

// The indexer reads the catalog and writes the discovery index bucket;
// it follows both buckets by direct get, without consumers.
var (
	indexerPublish = []string{
		"$JS.API.INFO",
		"$JS.API.STREAM.INFO.TOOLBUS_EVENTS",
		"$JS.API.STREAM.INFO.TOOLBUS_AUDIT",
		"$JS.API.STREAM.INFO.OBJ_toolbus_results",
		"$JS.API.STREAM.INFO.KV_toolbus_catalog",
		"$JS.API.STREAM.INFO.KV_toolbus_turns",
		"$JS.API.STREAM.INFO.KV_toolbus_approvals",
		"$JS.API.STREAM.INFO.KV_toolbus_index",
		"$JS.API.DIRECT.GET.KV_toolbus_catalog", "$JS.API.DIRECT.GET.KV_toolbus_catalog.>",
		"$JS.API.DIRECT.GET.KV_toolbus_index", "$JS.API.DIRECT.GET.KV_toolbus_index.>",
		"$KV.toolbus_index.>",
		"_INBOX.>",
	}
	indexerSubscribe = []string{"_INBOX_indexer.>", "toolbus.kv.toolbus_catalog.>", "toolbus.kv.toolbus_index.>"}
	indexerImports   = append(services(
		"$JS.API.INFO",
		"$JS.API.STREAM.INFO.TOOLBUS_EVENTS",
		"$JS.API.STREAM.INFO.TOOLBUS_AUDIT",
		"$JS.API.STREAM.INFO.OBJ_toolbus_results",
		"$JS.API.STREAM.INFO.KV_toolbus_catalog",
		"$JS.API.STREAM.INFO.KV_toolbus_turns",
		"$JS.API.STREAM.INFO.KV_toolbus_approvals",
		"$JS.API.STREAM.INFO.KV_toolbus_index",
		"$JS.API.DIRECT.GET.KV_toolbus_catalog",
		"$JS.API.DIRECT.GET.KV_toolbus_catalog.>",
		"$JS.API.DIRECT.GET.KV_toolbus_index",
		"$JS.API.DIRECT.GET.KV_toolbus_index.>",
		"$KV.toolbus_index.>",
	), streams("toolbus.kv.toolbus_catalog.>", "toolbus.kv.toolbus_index.>")...)
)

// The auditor reads the audit stream by direct get, and nothing else.
var (
	auditorPublish   = []string{"$JS.API.INFO", "$JS.API.STREAM.INFO.TOOLBUS_AUDIT", "$JS.API.DIRECT.GET.TOOLBUS_AUDIT", "$JS.API.DIRECT.GET.TOOLBUS_AUDIT.>"}
	auditorSubscribe = []string{"_INBOX_auditor.>"}
	auditorImports   = services("$JS.API.INFO", "$JS.API.STREAM.INFO.TOOLBUS_AUDIT", "$JS.API.DIRECT.GET.TOOLBUS_AUDIT", "$JS.API.DIRECT.GET.TOOLBUS_AUDIT.>")
)

// workerPublish, workerSubscribe and workerImports are those of the
// workers of namespace ns: its own namespace's part of the streams.
func workerPublish(ns string) []string {
	return []string{
		"toolbus.consumers." + ns,
		"$JS.API.CONSUMER.MSG.NEXT.TOOLBUS_EVENTS.ns_" + ns,
		"$JS.API.CONSUMER.INFO.TOOLBUS_EVENTS.ns_" + ns,
		"$JS.ACK.TOOLBUS_EVENTS.ns_" + ns + ".>",
		"$JS.API.INFO",
		"$JS.API.STREAM.INFO.TOOLBUS_EVENTS",
		"$JS.API.STREAM.INFO.TOOLBUS_AUDIT",
		"$JS.API.STREAM.INFO.KV_toolbus_catalog",
		"$JS.API.STREAM.INFO.KV_toolbus_turns",
		"$JS.API.STREAM.INFO.KV_toolbus_approvals",
		"toolbus.events.*.*.started." + ns,
		"toolbus.events.*.*.progress." + ns,
		"toolbus.events.*.*.log." + ns,
		"toolbus.events.*.*.result." + ns,
		"$JS.API.DIRECT.GET.TOOLBUS_EVENTS.toolbus.events.*.*.*." + ns,
		"$KV.toolbus_catalog.tools." + ns + ".>",
		"$KV.toolbus_catalog.workers." + ns + ".>",
		"$JS.API.DIRECT.GET.KV_toolbus_catalog.$KV.toolbus_catalog.tools." + ns + ".>",
		"$JS.API.STREAM.INFO.OBJ_toolbus_results_" + ns,
		"$O.toolbus_results_" + ns + ".>",
		"$JS.API.DIRECT.GET.OBJ_toolbus_results_" + ns + ".$O.toolbus_results_" + ns + ".>",
		"_INBOX.>",
	}
}

func workerSubscribe(ns string) []string {
	return []string{"_INBOX_worker_" + ns + ".>", "toolbus.cancel." + ns + ".*"}
}

func workerImports(ns string) []importOf {
	return append(services(
		"toolbus.consumers."+ns,
		"$JS.API.CONSUMER.MSG.NEXT.TOOLBUS_EVENTS.ns_"+ns,
		"$JS.API.CONSUMER.INFO.TOOLBUS_EVENTS.ns_"+ns,
		"$JS.ACK.TOOLBUS_EVENTS.ns_"+ns+".>",
		"$JS.API.INFO",
		"$JS.API.STREAM.INFO.TOOLBUS_EVENTS",
		"$JS.API.STREAM.INFO.TOOLBUS_AUDIT",
		"$JS.API.STREAM.INFO.KV_toolbus_catalog",
		"$JS.API.STREAM.INFO.KV_toolbus_turns",
		"$JS.API.STREAM.INFO.KV_toolbus_approvals",
		"toolbus.events.*.*.started."+ns,
		"toolbus.events.*.*.progress."+ns,
		"toolbus.events.*.*.log."+ns,
		"toolbus.events.*.*.result."+ns,
		"$JS.API.DIRECT.GET.TOOLBUS_EVENTS.toolbus.events.*.*.*."+ns,
		"$KV.toolbus_catalog.tools."+ns+".>",
		"$KV.toolbus_catalog.workers."+ns+".>",
		"$JS.API.DIRECT.GET.KV_toolbus_catalog.$KV.toolbus_catalog.tools."+ns+".>",
		"$JS.API.STREAM.INFO.OBJ_toolbus_results_"+ns,
		"$O.toolbus_results_"+ns+".>",
		"$JS.API.DIRECT.GET.OBJ_toolbus_results_"+ns+".$O.toolbus_results_"+ns+".>",
	), streams("toolbus.cancel."+ns+".*")...)
}

// grants rewrites the subjects above for an installation's prefix.
type grants struct {
	lower, upper string
}

func newGrants(prefix string) grants {
	return grants{lower: prefix, upper: strings.ToUpper(prefix)}
}

func (g grants) subject(s string) string {
	if g.lower == "toolbus" {
		return s
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "toolbus", g.lower), "TOOLBUS", g.upper)
}

func (g grants) subjects(list []string) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = g.subject(s)
	}
	return out
}
