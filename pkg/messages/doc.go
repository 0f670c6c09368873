// Package messages is Toolbus's versioned wire contract: the tool definitions
// kept in the catalog, the requests and replies of the coordinator's API, the
// call messages workers consume and the events of a call.
//
// Every message is MessagePack unless its Content-Type header says
// application/json; field names are snake_case in both encodings and every
// message carries the Toolbus-Version header. Subjects, stream, consumer and
// bucket names are built only by [Names], whose methods reject tokens that
// would change a subject's meaning (dots, wildcards, spaces).
//
// The MessagePack encoders and decoders of the call path's messages (those
// whose struct is marked //msgpack:generate) are generated into
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
