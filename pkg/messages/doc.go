// Package messages is Toolbus's versioned wire contract: the tool definitions
// kept in the catalog, the requests and replies of the coordinator's API, the
// call messages workers consume and the events of a call.
//
// Every message is MessagePack unless its Content-Type header says
// application/json; field names are snake_case in both encodings and every
// message carries the Toolbus-Version header. Subjects, stream, consumer and
// bucket names are built only by [Names] and the types it returns, whose
// methods reject tokens that would change a subject's meaning (dots,
// wildcards, spaces).
//
// # Names
//
// [Names] holds an installation's prefix and names its streams, buckets
// and API subjects itself. The names of one role each are methods of a
// small value type that Names returns:
//
//   - Names.Events ([EventNames]): the subjects a call's events are stored
//     under, and their parsing.
//   - Names.Filters ([FilterNames]): the subject filters by which
//     consumers, direct gets and subscriptions pick a call's, a turn's or
//     a namespace's messages.
//   - Names.Routes ([RouteNames]): the subjects of routed results and the
//     events stream's republish rule.
//   - Names.Consumers ([ConsumerNames]): the namespaces' consumers and the
//     subjects on which workers ask for them.
//   - Names.Audit ([AuditNames]): the audit stream.
//
// Until this version those were methods of Names itself:
// n.CallResultFilter(b, id, ns) is now n.Filters().CallResult(b, id, ns),
// n.EventSubject is n.Events().Subject, n.RouteSubject is
// n.Routes().Subject, n.NamespaceConsumer is n.Consumers().Durable,
// n.AuditStream is n.Audit().Stream, and so on. Only the Go API moved:
// every subject and resource name is as it was (docs/protocol.md), and
// clients in other languages see nothing new.
//
// The MessagePack encoders and decoders of the call path's messages and of
// tools.discover's reply with its tool entries (those whose struct is
// marked //msgpack:generate) are generated into
// msgpack_gen.go by internal/msgpackgen: run go generate in this package
// after changing one of those structs. They write the bytes the msgpack
// library writes from the json tags; every other message is encoded by the
// library.
//
// The package is pure: it imports no NATS package, so any program can use it
// to speak the protocol. docs/protocol.md describes the same contract for
// clients in other languages.
package messages

//go:generate go run ./internal/msgpackgen
